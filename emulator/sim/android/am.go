package android

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The activity manager side of the device: tasks and their activities, app
// processes with pids, the keyguard and screen state, foreground services and
// running instrumentations. All of its state is guarded by Device.mu.

// Home screen of a Google API 29+ emulator image (sdk_gphone*): the window
// "com.google.android.apps.nexuslauncher/com.google.android.apps.nexuslauncher.NexusLauncherActivity"
// in fixtures/captures/dumpsys-window-windows/api30.txt (mOwnerUid=10137).
const (
	homePackage  = "com.google.android.apps.nexuslauncher"
	homeActivity = "com.google.android.apps.nexuslauncher.NexusLauncherActivity"
	homeUID      = 10137
	// systemUIPackage draws the keyguard (NotificationShade window).
	systemUIPackage = "com.android.systemui"
	systemUIUID     = 10144 // mOwnerUid of NavigationBar0/StatusBar in the api30 capture

	// firstAppPID is where app pids start (system processes sit below it).
	firstAppPID = 1500
	// framesPerSecond is the frame rate of an animating screen.
	framesPerSecond = 60
	// launchFrames are drawn when an activity comes to the front; the first
	// of them is janky (a cold first frame misses its deadline).
	launchFrames = 3
)

// InstrumentationFunc is the body of an instrumentation (what the test runner
// of an androidTest APK does once `am instrument` started it). It runs until it
// returns or ctx is done; ctx ends when the `am instrument` command's context
// ends or the target package is force-stopped, uninstalled or replaced. args
// are the `-e KEY VALUE` pairs.
type InstrumentationFunc func(ctx context.Context, d *Device, args map[string]string) error

// RegisterInstrumentation makes fn run when `am instrument` starts component
// ("pkg/class" or "pkg/.Class"). The component must also be installed (an APK
// declaring the instrumentation) for `am instrument` to find it.
func (d *Device) RegisterInstrumentation(component string, fn InstrumentationFunc) {
	pkg, cls, ok := parseComponent(component)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.am.instrFns[pkg+"/"+cls] = fn
}

type activityManager struct {
	d         *Device
	nextPID   int
	nextTask  int
	nextHash  uint32
	tasks     []*amTask // front (top) first; the home task is always present
	procs     map[string]*amProcess
	awake     bool // screen on (mWakefulness=Awake)
	keyguard  bool // keyguard showing
	instrFns  map[string]InstrumentationFunc
	instrRuns map[string]*instrRun // by target package
	gfx       map[string]*gfxStats
	fgService map[string]string // package -> foreground service class
}

type amTask struct {
	id      int
	hash    string
	pkg     string
	root    string // root activity class
	intent  amIntent
	records []*amRecord // bottom first
	home    bool
}

type amRecord struct {
	hash    string
	winHash string
	pkg     string
	cls     string
	shownAt time.Time
	busy    Busy
	root    *Element
}

type amProcess struct {
	pid     int
	pkg     string
	uid     int
	started time.Time
}

type instrRun struct {
	component string
	cancel    context.CancelFunc
	stopped   bool // force-stopped / uninstalled (the process "crashed")
}

// newActivityManager sets up the boot state: the home task with the launcher
// resumed, screen awake, keyguard dismissed (an emulator started with
// -no-window has no lock screen set; `input keyevent 26` locks it).
func newActivityManager(d *Device) *activityManager {
	am := &activityManager{
		d: d, nextPID: firstAppPID, nextTask: 2, nextHash: 0x5f62743,
		procs: map[string]*amProcess{}, awake: true,
		instrFns: map[string]InstrumentationFunc{}, instrRuns: map[string]*instrRun{},
		gfx: map[string]*gfxStats{}, fgService: map[string]string{},
	}
	home := &amTask{id: 1, hash: am.hash(), pkg: homePackage, root: homeActivity, home: true,
		intent: amIntent{action: "android.intent.action.MAIN", categories: []string{"android.intent.category.HOME"}, flags: 0x10000100, cmpPkg: homePackage, cls: homeActivity, explicit: true, hasExtras: true}}
	home.records = []*amRecord{{hash: am.hash(), winHash: am.hash(), pkg: homePackage, cls: homeActivity, shownAt: d.started}}
	am.tasks = []*amTask{home}
	am.procs[homePackage] = &amProcess{pid: 1163, pkg: homePackage, uid: homeUID, started: d.started}
	am.procs[systemUIPackage] = &amProcess{pid: 684, pkg: systemUIPackage, uid: systemUIUID, started: d.started}
	d.addGeneratedFile("/proc/net/tcp", func() []byte { return d.procNetTCP(false) })
	d.addGeneratedFile("/proc/net/tcp6", func() []byte { return d.procNetTCP(true) })
	return am
}

// hash is the identity hash printed in records ("ActivityRecord{6fa5a4f ...}").
func (am *activityManager) hash() string {
	am.nextHash = am.nextHash*1103515245 + 12345
	return strconv.FormatUint(uint64(am.nextHash&0xfffffff|0x1000000), 16)
}

// --- intents -------------------------------------------------------------------

type amIntent struct {
	action     string
	categories []string
	data       string
	mimeType   string
	flags      uint32
	pkg        string // -p (intent package)
	cmpPkg     string // -n component
	cls        string // component class (full)
	hasExtras  bool
	explicit   bool
}

// String renders Intent.toShortString the way `am` prints it:
// "Intent { act=… cat=[…] dat=… typ=… flg=0x… pkg=… cmp=pkg/.Cls (has extras) }"
// (captures: am-start-W/api29plus-cold-encapp.txt; Intent.toShortString order).
func (it amIntent) String() string { return it.render(it.flags) }

func (it amIntent) render(flags uint32) string {
	var parts []string
	if it.action != "" {
		parts = append(parts, "act="+it.action)
	}
	if len(it.categories) > 0 {
		parts = append(parts, "cat=["+strings.Join(it.categories, ",")+"]")
	}
	if it.data != "" {
		parts = append(parts, "dat="+safeURI(it.data))
	}
	if it.mimeType != "" {
		parts = append(parts, "typ="+it.mimeType)
	}
	if flags != 0 {
		parts = append(parts, "flg=0x"+strconv.FormatUint(uint64(flags), 16))
	}
	if it.pkg != "" {
		parts = append(parts, "pkg="+it.pkg)
	}
	if it.explicit {
		parts = append(parts, "cmp="+shortComponent(it.cmpPkg, it.cls))
	}
	if it.hasExtras {
		parts = append(parts, "(has extras)")
	}
	return "Intent { " + strings.Join(parts, " ") + " }"
}

// safeURI is Uri.toSafeString for hierarchical URIs: scheme://authority/...
// (captures: "dat=https://shopee.co.id/...", "dat=ctf://payatu/...").
func safeURI(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	rest := u[i+3:]
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		return u[:i+3] + rest[:j] + "/..."
	}
	return u
}

// shortComponent is ComponentName.flattenToShortString: "pkg/.Cls" when the
// class is inside the package, else "pkg/full.Cls".
func shortComponent(pkg, cls string) string {
	if strings.HasPrefix(cls, pkg+".") {
		return pkg + "/" + cls[len(pkg):]
	}
	return pkg + "/" + cls
}

// parseComponent is ComponentName.unflattenFromString: "pkg/cls", a class
// starting with "." is relative to the package.
func parseComponent(s string) (pkg, cls string, ok bool) {
	i := strings.Index(s, "/")
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	pkg, cls = s[:i], s[i+1:]
	if strings.HasPrefix(cls, ".") {
		cls = pkg + cls
	}
	return pkg, cls, true
}

// --- app model lookups (called without d.mu) ---------------------------------------

// activityInfo resolves one activity of an installed package. installed is
// false when the package is not installed.
func (d *Device) activityInfo(pkg, cls string) (act Activity, installed, found bool) {
	if _, ok := d.packageInfo(pkg); !ok {
		return Activity{}, false, false
	}
	app, ok := d.appModel(pkg)
	if !ok {
		return Activity{}, true, false
	}
	for _, a := range app.Activities {
		if a.Name == cls {
			return a, true, true
		}
	}
	return Activity{}, true, false
}

// launcherOf is the MAIN/LAUNCHER activity of an installed package.
func (d *Device) launcherOf(pkg string) (string, bool) {
	if _, ok := d.packageInfo(pkg); !ok {
		return "", false
	}
	app, ok := d.appModel(pkg)
	if !ok || app.LauncherActivity == "" {
		return "", false
	}
	return app.LauncherActivity, true
}

func (d *Device) uidOf(pkg string) int {
	switch pkg {
	case homePackage:
		if uid, ok := d.packageUID(pkg); ok {
			return uid
		}
		return homeUID
	case systemUIPackage:
		if uid, ok := d.packageUID(pkg); ok {
			return uid
		}
		return systemUIUID
	}
	uid, _ := d.packageUID(pkg)
	return uid
}

// --- state transitions (all *Locked: d.mu held) -------------------------------

type launchState int

const (
	launchUnknown launchState = 0
	launchCold    launchState = 1
	launchWarm    launchState = 2
	launchHot     launchState = 3
)

func (s launchState) String() string {
	switch s {
	case launchCold:
		return "COLD"
	case launchWarm:
		return "WARM"
	case launchHot:
		return "HOT"
	}
	return "UNKNOWN (" + strconv.Itoa(int(s)) + ")"
}

type startResult struct {
	state       launchState
	toFront     bool // START_TASK_TO_FRONT: "its current task has been brought to the front"
	top         *amRecord
	totalTimeMs int // -1: not reported
}

// startActivityLocked brings pkg/cls to the front the way ActivityStarter does
// for an intent with FLAG_ACTIVITY_NEW_TASK (am always adds it): an existing
// task of the package whose root is cls is brought to the front unchanged;
// another activity of that package is pushed onto its task; otherwise a new
// task starts. A dead process is started (COLD).
func (am *activityManager) startActivityLocked(pkg, cls string, act Activity, it amIntent, uid int) startResult {
	now := am.d.now()
	am.d.actions.add("start", pkg, now)
	res := startResult{totalTimeMs: -1}
	am.d.logStartLocked(it, now)
	proc, alive := am.procs[pkg]
	if !alive {
		proc = am.startProcessLocked(pkg, uid, now)
		// ProcessList.startProcessLocked: a process the user starts in the
		// foreground gets its crash count cleared.
		delete(am.d.faults.crashTimes, pkg)
		am.d.logProcStartLocked(proc, cls, now)
	}
	var task *amTask
	for _, t := range am.tasks {
		if !t.home && t.pkg == pkg {
			task = t
			break
		}
	}
	wasTop := task != nil && am.tasks[0] == task
	clearTask := it.flags&0x00008000 != 0 // FLAG_ACTIVITY_CLEAR_TASK
	switch {
	case task != nil && task.root == cls && len(task.records) > 0 && !clearTask:
		res.toFront = true
		am.moveToFrontLocked(task)
		top := task.records[len(task.records)-1]
		if wasTop {
			res.state = launchUnknown
		} else {
			res.state = launchHot
			top.shownAt = now
			am.onShownLocked(top, now, false)
			res.totalTimeMs = 90 + len(task.records)*7
			am.d.logDisplayedLocked(top, res.totalTimeMs, now)
			am.d.onLaunchLocked(pkg, top.cls, proc.pid, now, false)
		}
		res.top = top
		return res
	case task != nil && !clearTask:
		rec := am.newRecordLocked(pkg, cls, act, now)
		task.records = append(task.records, rec)
		am.moveToFrontLocked(task)
		res.top = rec
	default:
		if task != nil {
			am.removeTaskLocked(task)
		}
		rec := am.newRecordLocked(pkg, cls, act, now)
		task = &amTask{id: am.nextTask, hash: am.hash(), pkg: pkg, root: cls, intent: it, records: []*amRecord{rec}}
		am.nextTask++
		am.tasks = append([]*amTask{task}, am.tasks...)
		res.top = rec
	}
	if alive {
		res.state = launchWarm
		res.totalTimeMs = 210 + nodeCount(act.Root)*3
	} else {
		res.state = launchCold
		res.totalTimeMs = 412 + nodeCount(act.Root)*5
	}
	am.onShownLocked(res.top, now, !alive)
	am.d.logDisplayedLocked(res.top, res.totalTimeMs, now)
	am.d.onLaunchLocked(pkg, cls, proc.pid, now, false)
	return res
}

func (am *activityManager) startProcessLocked(pkg string, uid int, now time.Time) *amProcess {
	p := &amProcess{pid: am.nextPID, pkg: pkg, uid: uid, started: now}
	am.nextPID += 17 + len(pkg)%13 // other processes fork in between, as on a real device
	am.procs[pkg] = p
	am.gfx[pkg] = &gfxStats{since: now}
	return p
}

func (am *activityManager) newRecordLocked(pkg, cls string, act Activity, now time.Time) *amRecord {
	root := act.Root
	if root == nil {
		w, h, dpi := am.d.displaySizeLocked()
		label := act.Label
		if label == "" {
			label = cls
		}
		root = plainActivityRoot(label, w, h, dpi)
	}
	return &amRecord{hash: am.hash(), winHash: am.hash(), pkg: pkg, cls: cls, shownAt: now, busy: act.Busy, root: root}
}

func (am *activityManager) moveToFrontLocked(t *amTask) {
	for i, x := range am.tasks {
		if x == t {
			copy(am.tasks[1:i+1], am.tasks[:i])
			am.tasks[0] = t
			return
		}
	}
}

func (am *activityManager) removeTaskLocked(t *amTask) {
	for i, x := range am.tasks {
		if x == t {
			am.tasks = append(am.tasks[:i], am.tasks[i+1:]...)
			return
		}
	}
}

// onShownLocked records the frames drawn when rec comes to the front.
func (am *activityManager) onShownLocked(rec *amRecord, now time.Time, cold bool) {
	g := am.gfx[rec.pkg]
	if g == nil {
		return
	}
	g.launches = append(g.launches, frameBurst{at: now, frames: launchFrames, janky: 1, rec: rec})
	switch {
	case rec.busy.NeverIdle:
		g.segments = append(g.segments, frameSegment{start: now, endless: true, rec: rec})
	case rec.busy.AnimateFor > 0:
		g.segments = append(g.segments, frameSegment{start: now, end: now.Add(rec.busy.AnimateFor), rec: rec})
	}
	_ = cold
}

// goHomeLocked moves the home task to the front (KEYCODE_HOME).
func (am *activityManager) goHomeLocked() {
	for _, t := range am.tasks {
		if t.home {
			wasTop := am.tasks[0] == t
			am.moveToFrontLocked(t)
			if !wasTop {
				t.records[len(t.records)-1].shownAt = am.d.now()
			}
			return
		}
	}
}

// backLocked finishes the top activity (KEYCODE_BACK); the last activity of a
// task finishing removes the task, and the process stays cached (a later
// start is WARM). Back on the home screen does nothing.
func (am *activityManager) backLocked() {
	t := am.tasks[0]
	if t.home {
		return
	}
	t.records = t.records[:len(t.records)-1]
	if len(t.records) == 0 {
		am.removeTaskLocked(t)
	}
	now := am.d.now()
	top := am.tasks[0].records[len(am.tasks[0].records)-1]
	top.shownAt = now
	if g := am.gfx[top.pkg]; g != nil {
		g.launches = append(g.launches, frameBurst{at: now, frames: launchFrames, rec: top})
	}
	am.restartSegmentsLocked(top, now)
}

// restartSegmentsLocked: a NeverIdle screen coming back keeps animating; a
// timed animation replays.
func (am *activityManager) restartSegmentsLocked(rec *amRecord, now time.Time) {
	g := am.gfx[rec.pkg]
	if g == nil {
		return
	}
	if rec.busy.AnimateFor > 0 && !rec.busy.NeverIdle {
		g.segments = append(g.segments, frameSegment{start: now, end: now.Add(rec.busy.AnimateFor), rec: rec})
	}
	if rec.busy.NeverIdle {
		for _, s := range g.segments {
			if s.rec == rec && s.endless {
				return
			}
		}
		g.segments = append(g.segments, frameSegment{start: now, endless: true, rec: rec})
	}
}

// forceStopLocked kills the package's process, removes its tasks, stops its
// foreground service and ends an instrumentation targeting it (like
// ActivityManagerService.forceStopPackage). It reports whether anything ran.
func (am *activityManager) forceStopLocked(pkg string) bool {
	found := false
	if _, ok := am.procs[pkg]; ok && pkg != homePackage && pkg != systemUIPackage {
		delete(am.procs, pkg)
		found = true
	}
	kept := am.tasks[:0]
	for _, t := range am.tasks {
		if !t.home && t.pkg == pkg {
			found = true
			continue
		}
		kept = append(kept, t)
	}
	am.tasks = kept
	delete(am.fgService, pkg)
	if g := am.gfx[pkg]; g != nil {
		delete(am.gfx, pkg)
	}
	for target, run := range am.instrRuns {
		instrPkg, _, _ := parseComponent(run.component)
		if target == pkg || instrPkg == pkg {
			run.stopped = true
			run.cancel()
			delete(am.instrRuns, target)
			found = true
		}
	}
	if found && am.tasks[0].home {
		am.tasks[0].records[len(am.tasks[0].records)-1].shownAt = am.d.now()
	}
	return found
}

// onPackageRemoved is called by the package manager (d.mu not held) after pkg
// was uninstalled: its process dies and its activities go away.
func (d *Device) onPackageRemoved(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.am.forceStopLocked(id)
}

// onPackageReplaced is called after an update of pkg was installed: like
// Android, the old process is killed and its tasks removed.
func (d *Device) onPackageReplaced(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.am.forceStopLocked(id)
}

// topLocked is the resumed activity (front task's top record).
func (am *activityManager) topLocked() *amRecord {
	t := am.tasks[0]
	return t.records[len(t.records)-1]
}

// --- the `am` command --------------------------------------------------------

// amUsageError is what `am`/`cmd activity` print for an unknown option (the
// ShellCommand prints "Error: Unknown option: X" on stderr; exit 255 = -1).
func init() {
	registerCommand("am", cmdAm)
	registerCmdService("activity", cmdActivityService)
	registerCommand("monkey", cmdMonkey)
	registerCmdService("notification", cmdNotificationService)
}

// cmdAm is /system/bin/am. On API 29+ it is a script: `am instrument` runs
// com.android.commands.am.Am (app_process), everything else is `cmd activity`.
func cmdAm(c *Ctx) int {
	if len(c.Args) > 1 && c.Args[1] == "instrument" {
		return amInstrument(c, c.Args[2:])
	}
	if !c.Device.serviceRegistered("activity") {
		// The script's `cmd activity` before system_server published the service.
		fmt.Fprintln(c.Stderr, "cmd: Can't find service: activity")
		return 20
	}
	return amDispatch(c, c.Args[1:])
}

func cmdActivityService(c *Ctx) int { return amDispatch(c, c.Args[1:]) }

func amDispatch(c *Ctx, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(c.Stdout, "Activity manager (activity) commands:")
		fmt.Fprintln(c.Stdout, "  help")
		fmt.Fprintln(c.Stdout, "      Print this help text.")
		return 0
	}
	switch args[0] {
	case "start", "start-activity":
		return amStart(c, args)
	case "force-stop":
		return amForceStop(c, args[1:])
	case "instrument":
		return amInstrument(c, args[1:])
	case "kill":
		return amKill(c, args[1:])
	}
	// ShellCommand.onCommand default: handleDefaultCommands -> "Unknown command: X" on stderr, -1.
	fmt.Fprintf(c.Stderr, "Unknown command: %s\n", args[0])
	return 255
}

// amOpts are the parsed `am start` options and intent.
type amOpts struct {
	wait, stop bool
	user       string
	it         amIntent
}

// parseAmStart parses `am start [options] <INTENT>` as ActivityManagerShellCommand
// (makeIntent + Intent.parseCommandArgs). err is the text ShellCommand prints
// on stderr ("Error: Unknown option: -x", "Error: No intent supplied").
func parseAmStart(args []string) (amOpts, string) {
	var o amOpts
	need := func(i int) (string, bool) {
		if i+1 >= len(args) {
			return "", false
		}
		return args[i+1], true
	}
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "-W":
			o.wait = true
		case "-S":
			o.stop = true
		case "-D", "-N", "--activity-clear-top", "--activity-single-top", "--activity-no-history",
			"--activity-reorder-to-front", "--activity-brought-to-front", "--activity-new-task",
			"--activity-clear-task", "--activity-multiple-task", "--activity-no-animation", "--track-allocation",
			"--receiver-registered-only", "--grant-read-uri-permission", "--grant-write-uri-permission",
			"--include-stopped-packages", "--exclude-stopped-packages", "--debug-log-resolution":
			switch a {
			case "--activity-clear-task":
				o.it.flags |= 0x00008000
			case "--activity-new-task":
				o.it.flags |= 0x10000000
			case "--activity-clear-top":
				o.it.flags |= 0x04000000
			case "--activity-single-top":
				o.it.flags |= 0x20000000
			case "--activity-reorder-to-front":
				o.it.flags |= 0x00020000
			}
		case "--user", "-a", "-c", "-d", "-t", "-n", "-p", "-f", "--windowingMode", "--activityType", "--display", "--task", "-R", "-P", "--start-profiler", "--sampling", "--attach-agent":
			v, ok := need(i)
			if !ok {
				return o, "Error: No argument supplied for option: " + a
			}
			i++
			switch a {
			case "--user":
				o.user = v
			case "-a":
				o.it.action = v
			case "-c":
				o.it.categories = append(o.it.categories, v)
			case "-d":
				o.it.data = v
			case "-t":
				o.it.mimeType = v
			case "-n":
				pkg, cls, ok := parseComponent(v)
				if !ok {
					return o, "Error: Bad component name: " + v
				}
				o.it.cmpPkg, o.it.cls, o.it.explicit = pkg, cls, true
			case "-p":
				o.it.pkg = v
			case "-f":
				f, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(v, "0x"), "0X"), 16, 32)
				if !strings.HasPrefix(strings.ToLower(v), "0x") {
					f, err = strconv.ParseUint(v, 10, 32)
				}
				if err != nil {
					return o, "Error: Bad number: " + v
				}
				o.it.flags |= uint32(f)
			}
		case "-e", "--es", "--ei", "--ez", "--el", "--ef", "--eu", "--ecn", "--eia", "--ela", "--efa", "--esa", "--esn":
			if a == "--esn" {
				if _, ok := need(i); !ok {
					return o, "Error: No argument supplied for option: " + a
				}
				i++
				o.it.hasExtras = true
				continue
			}
			if i+2 >= len(args) {
				return o, "Error: No argument supplied for option: " + a
			}
			i += 2
			o.it.hasExtras = true
		default:
			if strings.HasPrefix(a, "-") && len(a) > 1 {
				return o, "Error: Unknown option: " + a
			}
			positional = append(positional, a)
		}
	}
	for _, p := range positional {
		// A bare argument is a component when it contains '/', else data URI / package.
		if pkg, cls, ok := parseComponent(p); ok && !strings.Contains(p, ":") {
			o.it.cmpPkg, o.it.cls, o.it.explicit = pkg, cls, true
		} else if strings.Contains(p, ":") {
			o.it.data = p
		} else {
			o.it.pkg = p
		}
	}
	if !o.it.explicit && o.it.action == "" && o.it.data == "" && len(o.it.categories) == 0 && o.it.pkg == "" && o.it.mimeType == "" {
		return o, "Error: No intent supplied"
	}
	return o, ""
}

// amStart implements `am start` / `am start-activity` (ActivityManagerShellCommand.runStartActivity):
// stdout gets "Starting: Intent { … }"; the result lines go to stdout with -W
// and to stderr without; with -W a launched activity adds Status/LaunchState/
// Activity/TotalTime/WaitTime/Complete. A non-exported activity throws a
// SecurityException (stderr, exit 255). Other failures exit 0, as on Android.
func amStart(c *Ctx, args []string) int {
	d := c.Device
	o, perr := parseAmStart(args[1:])
	if perr != "" {
		fmt.Fprintln(c.Stderr, perr)
		return 255
	}
	if o.user == "all" {
		fmt.Fprintln(c.Stderr, "Error: Can't start service with user 'all'")
		return 1
	}
	it := o.it
	// Resolve the target component.
	pkg, cls := it.cmpPkg, it.cls
	if !it.explicit {
		target := it.pkg
		if target != "" && (it.action == "" || it.action == "android.intent.action.MAIN") && (len(it.categories) == 0 || contains(it.categories, "android.intent.category.LAUNCHER")) && it.data == "" {
			if l, ok := d.launcherOf(target); ok {
				pkg, cls = target, l
			}
		}
	}
	if o.stop {
		if pkg == "" {
			fmt.Fprintf(c.Stderr, "Error: Intent does not match any activities: %s\n", it.render(it.flags))
			return 1
		}
		fmt.Fprintf(c.Stdout, "Stopping: %s\n", pkg)
		d.forceStop(pkg)
	}
	fmt.Fprintf(c.Stdout, "Starting: %s\n", it.render(it.flags))
	out := c.Stderr
	if o.wait {
		out = c.Stdout
	}
	began := d.now()
	if pkg == "" {
		fmt.Fprintf(out, "Error: Activity not started, unable to resolve %s\n", it.render(it.flags|0x10000000))
		return 0
	}
	act, _, found := d.activityInfo(pkg, cls)
	if !found {
		fmt.Fprintln(out, "Error type 3")
		fmt.Fprintf(out, "Error: Activity class {%s/%s} does not exist.\n", pkg, cls)
		return 0
	}
	uid := d.uidOf(pkg)
	if act.Exported != nil && !*act.Exported {
		flags := it.flags | 0x10000000
		fmt.Fprintln(c.Stderr)
		fmt.Fprintln(c.Stderr, "Exception occurred while executing 'start':")
		fmt.Fprintf(c.Stderr, "java.lang.SecurityException: Permission Denial: starting %s from null (pid=%d, uid=2000) not exported from uid %d\n",
			it.render(flags), d.shellPID(), uid)
		for _, frame := range securityExceptionFrames(d.APILevel()) {
			fmt.Fprintln(c.Stderr, "\tat "+frame)
		}
		return 255
	}
	launchIntent := it
	launchIntent.flags |= 0x10000000
	launchIntent.cmpPkg, launchIntent.cls, launchIntent.explicit = pkg, cls, true
	d.mu.Lock()
	res := d.am.startActivityLocked(pkg, cls, act, launchIntent, uid)
	finishesAtOnce := settingsHelperStartLocked(d.am, pkg, cls)
	d.mu.Unlock()
	if res.toFront {
		fmt.Fprintln(out, "Warning: Activity not started, its current task has been brought to the front")
	}
	if o.wait {
		fmt.Fprintln(c.Stdout, "Status: ok")
		fmt.Fprintf(c.Stdout, "LaunchState: %s\n", res.state)
		who := res.top
		if finishesAtOnce {
			d.mu.Lock()
			who = d.am.topLocked()
			d.mu.Unlock()
		}
		fmt.Fprintf(c.Stdout, "Activity: %s\n", shortComponent(who.pkg, who.cls))
		if res.totalTimeMs >= 0 {
			fmt.Fprintf(c.Stdout, "TotalTime: %d\n", res.totalTimeMs)
		}
		wait := int(d.now().Sub(began)/time.Millisecond) + 3
		if res.totalTimeMs >= 0 {
			wait += res.totalTimeMs
		}
		fmt.Fprintf(c.Stdout, "WaitTime: %d\n", wait)
		fmt.Fprintln(c.Stdout, "Complete")
	}
	return 0
}

// settingsHelperStartLocked models the Appium Settings helper
// (io.appium.settings): its Settings activity starts ForegroundService and
// finishes in onCreate, so the previous screen comes back and `dumpsys
// activity services io.appium.settings` shows isForeground=true.
func settingsHelperStartLocked(am *activityManager, pkg, cls string) bool {
	if pkg != "io.appium.settings" || cls != "io.appium.settings.Settings" {
		return false
	}
	am.fgService[pkg] = "io.appium.settings.ForegroundService"
	t := am.tasks[0]
	if !t.home && t.pkg == pkg {
		am.backLocked()
	}
	return true
}

// securityExceptionFrames are the first stack frames of the SecurityException
// thrown for a non-exported activity (captures: API 30 "ActivityStackSupervisor.
// checkStartAnyActivityPermission(ActivityStackSupervisor.java:1157)", API 31+
// "ActivityTaskSupervisor.checkStartAnyActivityPermission(ActivityTaskSupervisor.java:1401)").
func securityExceptionFrames(api int) []string {
	if api <= 30 {
		return []string{
			"com.android.server.wm.ActivityStackSupervisor.checkStartAnyActivityPermission(ActivityStackSupervisor.java:1157)",
			"com.android.server.wm.ActivityStarter.executeRequest(ActivityStarter.java:1244)",
			"com.android.server.wm.ActivityStarter.execute(ActivityStarter.java:754)",
			"com.android.server.wm.ActivityTaskManagerService.startActivityAsUser(ActivityTaskManagerService.java:1169)",
		}
	}
	return []string{
		"com.android.server.wm.ActivityTaskSupervisor.checkStartAnyActivityPermission(ActivityTaskSupervisor.java:1401)",
		"com.android.server.wm.ActivityStarter.executeRequest(ActivityStarter.java:1520)",
		"com.android.server.wm.ActivityStarter.execute(ActivityStarter.java:1033)",
		"com.android.server.wm.ActivityTaskManagerService.startActivityAsUser(ActivityTaskManagerService.java:1663)",
	}
}

// shellPID is a pid for the shell process running a command: each call takes
// the next free pid, as each `adb shell` forks a new sh.
func (d *Device) shellPID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	pid := d.am.nextPID
	d.am.nextPID += 2
	return pid
}

// forceStop kills a package (am force-stop), logging what
// ActivityManagerService.forceStopPackage logs.
func (d *Device) forceStop(pkg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	if uid, ok := d.pm.pkgs[pkg]; ok {
		caller := d.am.nextPID
		d.logAt(now, bufSystem, pidSystemSrv, tidBinder, 'I', "ActivityManager",
			fmt.Sprintf("Force stopping %s appid=%d user=0: from pid %d", pkg, uid.UID%100000, caller))
		if p, alive := d.am.procs[pkg]; alive && pkg != homePackage && pkg != systemUIPackage {
			d.logAt(now, bufSystem, pidSystemSrv, tidBinder, 'I', "ActivityManager",
				fmt.Sprintf("Killing %d:%s/u0a%d (adj 0): stop %s due to from pid %d", p.pid, pkg, p.uid%100000-10000, pkg, caller))
			// Stamped with the stop: the process is gone when am returns
			// (pidof no longer finds it), so zygote has reaped it, and a
			// reader that starts after the command (a lease's log window)
			// sees none of the stop.
			d.logAt(now, bufMain, pidZygote64, pidZygote64, 'I', "Zygote", fmt.Sprintf("Process %d exited due to signal 9 (Killed)", p.pid))
		}
	}
	d.closeDialogsOfLocked(pkg)
	d.am.forceStopLocked(pkg)
}

// amForceStop is `am force-stop [--user U] PKG`: silent, exit 0, also for an
// unknown package.
func amForceStop(c *Ctx, args []string) int {
	var pkg string
	for i := 0; i < len(args); i++ {
		if args[i] == "--user" {
			i++
			continue
		}
		if strings.HasPrefix(args[i], "-") {
			fmt.Fprintf(c.Stderr, "Error: Unknown option: %s\n", args[i])
			return 255
		}
		pkg = args[i]
	}
	if pkg == "" {
		fmt.Fprintln(c.Stderr, "Error: Argument expected after \"force-stop\"")
		return 255
	}
	c.Device.forceStop(pkg)
	return 0
}

// amKill is `am kill PKG`: kills a background (not front) process.
func amKill(c *Ctx, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Error: Argument expected after \"kill\"")
		return 255
	}
	pkg := args[len(args)-1]
	d := c.Device
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.am.tasks[0]; !t.home && t.pkg == pkg {
		return 0
	}
	d.am.forceStopLocked(pkg)
	return 0
}

// --- am instrument ------------------------------------------------------------

// amInstrument implements `am instrument [-w] [-r] [-e K V]… [--no-window-animation] COMPONENT`.
// Unknown component: stdout "INSTRUMENTATION_STATUS: id=ActivityManagerService",
// "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for:
// ComponentInfo{pkg/cls}", "INSTRUMENTATION_STATUS_CODE: -1"; stderr
// "android.util.AndroidException: INSTRUMENTATION_FAILED: pkg/cls" with its
// frame; exit 1 (captures quoted in SOURCES.md). A found component kills and
// restarts the target process and runs the registered InstrumentationFunc.
func amInstrument(c *Ctx, args []string) int {
	d := c.Device
	wait, raw := false, false
	extras := map[string]string{}
	var comp string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "-w":
			wait = true
		case "-r":
			raw = true
		case "-m", "--no-window-animation", "--no-hidden-api-checks", "--no-test-api-access", "--no-isolated-storage", "--no-logcat", "--no-restart", "--always-check-signature", "--instrument-sdk-sandbox", "--instrument-sdk-in-sandbox":
		case "-e":
			if i+2 >= len(args) {
				fmt.Fprintf(c.Stderr, "Error: No argument supplied for option: %s\n", a)
				return 1
			}
			extras[args[i+1]] = args[i+2]
			i += 2
		case "-p", "--user", "--abi":
			i++
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(c.Stderr, "Error: Unknown option: %s\n", a)
				return 1
			}
			comp = a
		}
	}
	_ = raw
	pkg, cls, ok := parseComponent(comp)
	if !ok {
		fmt.Fprintf(c.Stderr, "Error: Bad component name: %s\n", comp)
		return 1
	}
	var target string
	for _, in := range d.instrumentations() {
		ip, ic, ok := parseComponent(in.Component)
		if ok && ip == pkg && ic == cls {
			target = in.TargetPackage
		}
	}
	flat := pkg + "/" + cls
	fail := func(msg string) int {
		fmt.Fprintln(c.Stdout, "INSTRUMENTATION_STATUS: id=ActivityManagerService")
		fmt.Fprintf(c.Stdout, "INSTRUMENTATION_STATUS: Error=%s\n", msg)
		fmt.Fprintln(c.Stdout, "INSTRUMENTATION_STATUS_CODE: -1")
		fmt.Fprintf(c.Stderr, "android.util.AndroidException: INSTRUMENTATION_FAILED: %s\n", flat)
		fmt.Fprintln(c.Stderr, "\tat com.android.commands.am.Instrument.run(Instrument.java:549)")
		return 1
	}
	if target == "" {
		return fail("Unable to find instrumentation info for: ComponentInfo{" + flat + "}")
	}
	if _, ok := d.packageInfo(target); !ok {
		// ActivityManagerService.startInstrumentation's second check.
		return fail("Unable to find instrumentation target package: " + target)
	}
	parent := c.Context
	if !wait {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	run := &instrRun{component: flat, cancel: cancel}
	uid := d.uidOf(target)
	d.mu.Lock()
	d.am.forceStopLocked(target) // the instrumented process is always restarted
	d.am.startProcessLocked(target, uid, d.now())
	d.am.instrRuns[target] = run
	fn := d.am.instrFns[flat]
	d.mu.Unlock()

	type result struct{ err error }
	done := make(chan result, 1)
	start := d.now()
	go func() {
		var err error
		if fn != nil {
			err = fn(ctx, d, extras)
		}
		done <- result{err}
	}()
	finish := func(r result) int {
		d.mu.Lock()
		stopped := run.stopped
		if d.am.instrRuns[target] == run {
			delete(d.am.instrRuns, target)
			// ActivityManagerService.finishInstrumentationLocked force-stops
			// the instrumented package ("finished inst"): its process is gone
			// from ps once am instrument returns, which Appium's driver waits
			// for on session delete.
			d.am.forceStopLocked(target)
		}
		d.mu.Unlock()
		cancel()
		if !wait {
			return 0
		}
		switch {
		case stopped:
			// ActivityManagerService reports the killed instrumented process.
			fmt.Fprintln(c.Stdout, "INSTRUMENTATION_RESULT: shortMsg=Process crashed.")
			fmt.Fprintln(c.Stdout, "INSTRUMENTATION_CODE: 0")
		default:
			secs := d.now().Sub(start).Seconds()
			n := 1
			if fn == nil {
				n = 0
			}
			fmt.Fprintln(c.Stdout, "INSTRUMENTATION_RESULT: stream=")
			fmt.Fprintln(c.Stdout)
			fmt.Fprintf(c.Stdout, "Time: %.3f\n", secs)
			fmt.Fprintln(c.Stdout)
			if r.err != nil && ctx.Err() == nil {
				fmt.Fprintln(c.Stdout, "There was 1 failure:")
				fmt.Fprintf(c.Stdout, "1) %s\n", r.err)
				fmt.Fprintln(c.Stdout)
				fmt.Fprintln(c.Stdout, "FAILURES!!!")
				fmt.Fprintf(c.Stdout, "Tests run: %d,  Failures: 1\n", n)
			} else {
				if n == 1 {
					fmt.Fprintln(c.Stdout, "OK (1 test)")
				} else {
					fmt.Fprintln(c.Stdout, "OK (0 tests)")
				}
			}
			fmt.Fprintln(c.Stdout)
			fmt.Fprintln(c.Stdout)
			fmt.Fprintln(c.Stdout, "INSTRUMENTATION_CODE: -1")
		}
		return 0
	}
	if !wait {
		go func() { finish(<-done) }()
		return 0
	}
	return finish(<-done)
}

// instrumentationRunning reports the running instrumentation processes
// (target package -> component), for ps.
func (am *activityManager) instrumentationTargetsLocked() []string {
	var out []string
	for t := range am.instrRuns {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// --- monkey ---------------------------------------------------------------------

// cmdMonkey handles `monkey -p PKG -c android.intent.category.LAUNCHER 1`, the
// launch-by-package form: it starts the package's launcher activity like a
// launcher tap. Output as the real monkey script + Monkey.java print it: the
// "  bash arg: X" echo on stdout, "args: […]", " arg: \"X\"", "data=\"X\"" on
// stderr, then "Events injected: 1" and the network stats line; no launcher
// activity → "** No activities found to run, monkey aborted." (exit 252, as
// measured on a real phone: monkey/no-activities-found.txt in SOURCES.md).
func cmdMonkey(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	for _, a := range args {
		fmt.Fprintf(c.Stdout, "  bash arg: %s\n", a)
	}
	fmt.Fprintf(c.Stderr, "args: [%s]\n", strings.Join(args, ", "))
	for _, a := range args {
		fmt.Fprintf(c.Stderr, " arg: \"%s\"\n", a)
	}
	var pkgs, cats []string
	count := 0
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-p":
			if i+1 < len(args) {
				pkgs = append(pkgs, args[i+1])
				fmt.Fprintf(c.Stderr, "data=\"%s\"\n", args[i+1])
				i++
			}
		case "-c":
			if i+1 < len(args) {
				cats = append(cats, args[i+1])
				fmt.Fprintf(c.Stderr, "data=\"%s\"\n", args[i+1])
				i++
			}
		case "--pct-syskeys", "--throttle", "-s", "--pct-touch", "--pct-motion":
			i++
		default:
			if n, err := strconv.Atoi(args[i]); err == nil {
				count = n
			}
		}
	}
	var pkg, act string
	for _, p := range pkgs {
		if l, ok := d.launcherOf(p); ok {
			pkg, act = p, l
			break
		}
	}
	if pkg == "" {
		fmt.Fprintln(c.Stdout, "** No activities found to run, monkey aborted.")
		return 252
	}
	a, _, _ := d.activityInfo(pkg, act)
	it := amIntent{action: "android.intent.action.MAIN", categories: []string{"android.intent.category.LAUNCHER"}, flags: 0x10200000, cmpPkg: pkg, cls: act, explicit: true}
	start := d.now()
	if count > 0 {
		uid := d.uidOf(pkg)
		d.mu.Lock()
		d.am.startActivityLocked(pkg, act, a, it, uid)
		d.mu.Unlock()
	}
	elapsed := int(d.now().Sub(start)/time.Millisecond) + 9
	fmt.Fprintf(c.Stdout, "Events injected: %d\n", count)
	fmt.Fprintf(c.Stdout, "## Network stats: elapsed time=%dms (0ms mobile, 0ms wifi, %dms not connected)\n", elapsed, elapsed)
	return 0
}

// cmdNotificationService handles `cmd notification allow_listener COMPONENT`
// (and disallow_listener): silent on success, as Appium's settings setup sees.
func cmdNotificationService(c *Ctx) int {
	args := c.Args[1:]
	if len(args) >= 2 && (args[0] == "allow_listener" || args[0] == "disallow_listener") {
		return 0
	}
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Notification service (notification) commands:")
		return 255
	}
	fmt.Fprintf(c.Stderr, "Unknown command: %s\n", args[0])
	return 255
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func nodeCount(e *Element) int {
	if e == nil {
		return 0
	}
	n := 1
	for _, c := range e.Children {
		n += nodeCount(c)
	}
	return n
}
