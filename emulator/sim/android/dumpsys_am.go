package android

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// dumpsys services of the activity side: window, activity, gfxinfo, power.
// Formats follow fixtures/captures (dumpsys-window-windows/api30.txt, api31.txt,
// dumpsys-activity-activities/api34.txt) and the AOSP dump code cited per
// function; only the sections and lines the simulator models are printed, each
// line in its real form.

func init() {
	registerDumpsys("window", dumpsysWindow)
	registerDumpsys("activity", dumpsysActivity)
	registerDumpsys("gfxinfo", dumpsysGfxinfo)
	registerDumpsys("power", dumpsysPower)
}

// --- frame statistics ---------------------------------------------------------

type frameBurst struct {
	at     time.Time
	frames int
	janky  int
}

// frameSegment is an animation: frames at framesPerSecond from start to end
// (or to now when endless).
type frameSegment struct {
	start, end time.Time
	endless    bool
	rec        *amRecord
}

type gfxStats struct {
	since    time.Time // process start or last `dumpsys gfxinfo PKG reset`
	launches []frameBurst
	segments []frameSegment
}

// resetLocked starts counting afresh: frames drawn up to now (launch bursts
// included) are forgotten, running animations keep counting from now.
func (g *gfxStats) resetLocked(now time.Time) {
	g.since = now
	kept := g.launches[:0]
	for _, b := range g.launches {
		if b.at.After(now) {
			kept = append(kept, b)
		}
	}
	g.launches = kept
}

// frame durations (ms) the model assigns: animation frames, launch frames,
// janky first frames; and their GPU times.
const (
	animFrameMs   = 7
	launchFrameMs = 9
	jankyFrameMs  = 48
)

type frameCounts struct {
	total, janky, anim, launch int
}

func (g *gfxStats) countLocked(now time.Time) frameCounts {
	var fc frameCounts
	for _, b := range g.launches {
		if !b.at.Before(g.since) && !b.at.After(now) {
			fc.launch += b.frames - b.janky
			fc.janky += b.janky
		}
	}
	for _, s := range g.segments {
		from := s.start
		if from.Before(g.since) {
			from = g.since
		}
		to := s.end
		if s.endless || to.After(now) {
			to = now
		}
		if to.After(from) {
			fc.anim += int(to.Sub(from) * framesPerSecond / time.Second)
		}
	}
	fc.total = fc.anim + fc.launch + fc.janky
	return fc
}

// animatingLocked reports whether pkg's front activity is drawing frames now.
func (am *activityManager) animatingLocked(rec *amRecord, now time.Time) bool {
	g := am.gfx[rec.pkg]
	if g == nil {
		return false
	}
	for _, s := range g.segments {
		if s.rec == rec && !now.Before(s.start) && (s.endless || now.Before(s.end)) {
			return true
		}
	}
	return false
}

// HWUI histogram buckets as printed by `dumpsys gfxinfo` (capture: the
// "HISTOGRAM:" and "GPU HISTOGRAM:" lines of an API 31+ device quoted in
// SOURCES.md): 5..32 by 1, 34..48 by 2, 53..133 by 4, 150..4950 by 50.
func frameBuckets() []int {
	var b []int
	for i := 5; i <= 32; i++ {
		b = append(b, i)
	}
	for i := 34; i <= 48; i += 2 {
		b = append(b, i)
	}
	for i := 53; i <= 133; i += 4 {
		b = append(b, i)
	}
	for i := 150; i <= 4950; i += 50 {
		b = append(b, i)
	}
	return b
}

func gpuBuckets() []int {
	var b []int
	for i := 1; i <= 25; i++ {
		b = append(b, i)
	}
	return append(b, 4950)
}

func bucketIndex(buckets []int, ms int) int {
	for i, b := range buckets {
		if ms <= b {
			return i
		}
	}
	return len(buckets) - 1
}

// percentile follows HWUI ProfileData::findPercentile: walking down from the
// slowest bucket; an empty histogram answers the last bucket (4950ms).
func percentile(buckets []int, counts []int, total, pct int) int {
	pos := pct * total / 100
	remaining := total - pos
	for i := len(counts) - 1; i >= 0; i-- {
		remaining -= counts[i]
		if remaining <= 0 {
			return buckets[i]
		}
	}
	return buckets[0]
}

// dumpsysGfxinfo is `dumpsys gfxinfo PKG [reset|framestats]` (format: the
// API 31+ capture quoted in SOURCES.md; "Janky frames (legacy)" and "Number
// Frame deadline missed" exist from API 31). "reset" prints the stats, then
// starts counting afresh. No process: "No process found for: PKG".
func dumpsysGfxinfo(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	var pkg string
	reset := false
	for _, a := range args {
		switch a {
		case "reset":
			reset = true
		case "framestats", "--checkin", "-a":
		default:
			pkg = a
		}
	}
	now := d.now()
	up := d.uptimeMillis()
	fmt.Fprintln(c.Stdout, "Applications Graphics Acceleration Info:")
	fmt.Fprintf(c.Stdout, "Uptime: %d Realtime: %d\n", up, up)
	d.mu.Lock()
	defer d.mu.Unlock()
	var pkgs []string
	if pkg == "" {
		for p := range d.am.procs {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
	} else {
		if _, ok := d.am.procs[pkg]; !ok {
			fmt.Fprintf(c.Stdout, "No process found for: %s\n", pkg)
			return 0
		}
		pkgs = []string{pkg}
	}
	for _, p := range pkgs {
		proc := d.am.procs[p]
		g := d.am.gfx[p]
		if g == nil {
			g = &gfxStats{since: proc.started}
			d.am.gfx[p] = g
		}
		d.writeGfxLocked(c.Stdout, proc, g, now)
		if reset {
			g.resetLocked(now)
		}
	}
	return 0
}

func (d *Device) writeGfxLocked(w io.Writer, proc *amProcess, g *gfxStats, now time.Time) {
	api := d.APILevel()
	fc := g.countLocked(now)
	fb, gb := frameBuckets(), gpuBuckets()
	counts := make([]int, len(fb))
	gcounts := make([]int, len(gb))
	counts[bucketIndex(fb, animFrameMs)] += fc.anim
	counts[bucketIndex(fb, launchFrameMs)] += fc.launch
	counts[bucketIndex(fb, jankyFrameMs)] += fc.janky
	gcounts[bucketIndex(gb, 2)] += fc.anim + fc.launch
	gcounts[bucketIndex(gb, 8)] += fc.janky
	pctOf := func(n int) string {
		if fc.total == 0 {
			return "0.00"
		}
		return fmt.Sprintf("%.2f", math.Round(float64(n)*10000/float64(fc.total))/100)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "** Graphics info for pid %d [%s] **\n", proc.pid, proc.pkg)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Stats since: %dns\n", d.uptimeNanosAt(g.since))
	fmt.Fprintf(w, "Total frames rendered: %d\n", fc.total)
	fmt.Fprintf(w, "Janky frames: %d (%s%%)\n", fc.janky, pctOf(fc.janky))
	if api >= 31 {
		fmt.Fprintf(w, "Janky frames (legacy): %d (%s%%)\n", fc.janky, pctOf(fc.janky))
	}
	for _, p := range []int{50, 90, 95, 99} {
		fmt.Fprintf(w, "%dth percentile: %dms\n", p, percentile(fb, counts, fc.total, p))
	}
	fmt.Fprintln(w, "Number Missed Vsync: 0")
	fmt.Fprintln(w, "Number High input latency: 0")
	fmt.Fprintf(w, "Number Slow UI thread: %d\n", fc.janky)
	fmt.Fprintln(w, "Number Slow bitmap uploads: 0")
	fmt.Fprintln(w, "Number Slow issue draw commands: 0")
	if api >= 31 {
		fmt.Fprintf(w, "Number Frame deadline missed: %d\n", fc.janky)
		fmt.Fprintf(w, "Number Frame deadline missed (legacy): %d\n", fc.janky)
	}
	fmt.Fprintln(w, "HISTOGRAM: "+histogram(fb, counts))
	for _, p := range []int{50, 90, 95, 99} {
		fmt.Fprintf(w, "%dth gpu percentile: %dms\n", p, percentile(gb, gcounts, fc.total, p))
	}
	fmt.Fprintln(w, "GPU HISTOGRAM: "+histogram(gb, gcounts))
	fmt.Fprintln(w, "Pipeline=Skia (OpenGL)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Profile data in ms:")
	fmt.Fprintln(w)
	var roots []*amRecord
	for _, t := range d.am.tasks {
		if t.pkg == proc.pkg {
			roots = append(roots, t.records...)
		}
	}
	views := 0
	for _, r := range roots {
		fmt.Fprintf(w, "\t%s/%s/android.view.ViewRootImpl@%s (visibility=0)\n", r.pkg, r.cls, r.winHash)
	}
	fmt.Fprintln(w, "View hierarchy:")
	fmt.Fprintln(w)
	for _, r := range roots {
		n := nodeCount(r.root) + 3 // DecorView, LinearLayout, content FrameLayout
		views += n
		fmt.Fprintf(w, "  %s/%s/android.view.ViewRootImpl@%s\n", r.pkg, r.cls, r.winHash)
		fmt.Fprintf(w, "  %d views, %.2f kB of render nodes\n", n, float64(n)*1.44)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Total ViewRootImpl   : %d\n", len(roots))
	fmt.Fprintf(w, "Total attached Views : %d\n", views)
	fmt.Fprintf(w, "Total RenderNode     : %.2f kB (used) / %.2f kB (capacity)\n", float64(views)*1.44, float64(views)*2.88)
}

func histogram(buckets, counts []int) string {
	parts := make([]string, len(buckets))
	for i, b := range buckets {
		parts[i] = fmt.Sprintf("%dms=%d", b, counts[i])
	}
	return strings.Join(parts, " ")
}

// uptimeMillis is SystemClock.uptimeMillis: the simulated device booted
// bootUptimeOffset before the Device was created.
const bootUptimeOffset = 20 * time.Second

func (d *Device) uptimeMillis() int64 {
	return int64((d.now().Sub(d.started) + bootUptimeOffset) / time.Millisecond)
}

func (d *Device) uptimeNanosAt(t time.Time) int64 {
	return int64(t.Sub(d.started) + bootUptimeOffset)
}

// --- dumpsys power ---------------------------------------------------------------

// dumpsysPower prints the head of PowerManagerService.dump: "POWER MANAGER
// (dumpsys power)", a blank line, "Power Manager State:" and its first fields
// (field names and order from the AOSP dump and a device capture quoted in
// SOURCES.md), plus the "Display Power: state=ON|OFF" line.
func dumpsysPower(c *Ctx) int {
	d := c.Device
	d.mu.Lock()
	awake := d.am.awake
	d.mu.Unlock()
	wake, disp := "Awake", "ON"
	if !awake {
		wake, disp = "Asleep", "OFF"
	}
	booted := d.Booted()
	w := c.Stdout
	fmt.Fprintln(w, "POWER MANAGER (dumpsys power)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Power Manager State:")
	fmt.Fprintln(w, "  mDirty=0x0")
	fmt.Fprintf(w, "  mWakefulness=%s\n", wake)
	fmt.Fprintln(w, "  mWakefulnessChanging=false")
	fmt.Fprintln(w, "  mIsPowered=true")
	fmt.Fprintln(w, "  mPlugType=1")
	fmt.Fprintln(w, "  mBatteryLevel=100")
	fmt.Fprintln(w, "  mBatteryLevelWhenDreamStarted=0")
	fmt.Fprintln(w, "  mDockState=0")
	fmt.Fprintln(w, "  mStayOn=false")
	fmt.Fprintln(w, "  mProximityPositive=false")
	fmt.Fprintf(w, "  mBootCompleted=%t\n", booted)
	fmt.Fprintf(w, "  mSystemReady=%t\n", booted)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Display Power: state=%s\n", disp)
	return 0
}

// --- dumpsys window ----------------------------------------------------------------

// winGeom is the display geometry used in window dumps: status bar 24dp,
// navigation bar 48dp (portrait) / 42dp (landscape side bar), as in the
// captures (1080x1920@420: status 63, nav 126, rng=1080x1017-1810x1731).
type winGeom struct {
	w, h, dpi              int
	status, nav, navLand   int
	appH, swdp, wdp, hdp   int
	rngA, rngB, rngC, rngD int
}

func (d *Device) geom() winGeom {
	w, h, dpi := d.DisplaySize()
	dp := func(v int) int { return int(math.Round(float64(v) * float64(dpi) / 160)) }
	g := winGeom{w: w, h: h, dpi: dpi, status: dp(24), nav: dp(48), navLand: dp(42)}
	g.appH = h - g.nav
	short, long := w, h
	if short > long {
		short, long = long, short
	}
	g.swdp = short * 160 / dpi
	g.wdp = w * 160 / dpi
	g.hdp = (g.appH - g.status) * 160 / dpi
	g.rngA, g.rngB = short, short-g.status
	g.rngC, g.rngD = long-g.navLand, long-g.status-g.nav
	return g
}

type focusView struct {
	pkg, cls   string
	recHash    string
	winHash    string
	taskID     int
	keyguard   bool
	awake      bool
	lockWin    string // NotificationShade window hash
	statusWin  string
	navWin     string
	shadeOwner int
}

func (d *Device) focusLocked() focusView {
	t := d.am.tasks[0]
	r := t.records[len(t.records)-1]
	return focusView{pkg: r.pkg, cls: r.cls, recHash: r.hash, winHash: r.winHash, taskID: t.id,
		keyguard: d.am.keyguard, awake: d.am.awake, lockWin: "91c910b", statusWin: "7547027", navWin: "e56b35e"}
}

func recordString(pkg, cls, hash string, task int) string {
	return fmt.Sprintf("ActivityRecord{%s u0 %s t%d}", hash, shortComponent(pkg, cls), task)
}

func windowString(hash, pkg, cls string) string {
	return fmt.Sprintf("Window{%s u0 %s/%s}", hash, pkg, cls)
}

// dumpsysWindow: `dumpsys window displays|windows|policy` or the whole dump
// (sections joined by the 79-dash separator WindowManagerService.doDump prints).
func dumpsysWindow(c *Ctx) int {
	d := c.Device
	sub := ""
	if len(c.Args) > 1 {
		sub = c.Args[1]
	}
	switch sub {
	case "displays", "d":
		d.dumpWindowDisplays(c.Stdout)
	case "windows", "w":
		d.dumpWindowWindows(c.Stdout)
	case "policy", "p":
		d.dumpWindowPolicy(c.Stdout)
	case "":
		d.dumpWindowPolicy(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpWindowDisplays(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpWindowWindows(c.Stdout)
	default:
		// WindowManagerService.doDump: an unknown argument is taken as a window name.
		fmt.Fprintln(c.Stdout, "WINDOW MANAGER WINDOWS (dumpsys window windows)")
	}
	return 0
}

const dumpSeparator = "-------------------------------------------------------------------------------"

// dumpWindowPolicy prints the PhoneWindowManager keyguard state Appium's
// isScreenLocked reads: "KeyguardServiceDelegate" with its
// "KeyguardStateMonitor" (mIsShowing, mInputRestricted) (AOSP
// KeyguardServiceDelegate.dump / KeyguardStateMonitor.dump field names).
func (d *Device) dumpWindowPolicy(w io.Writer) {
	d.mu.Lock()
	f := d.focusLocked()
	d.mu.Unlock()
	fmt.Fprintln(w, "WINDOW MANAGER POLICY STATE (dumpsys window policy)")
	fmt.Fprintf(w, "    mAwake=%t\n", f.awake)
	fmt.Fprintf(w, "    mKeyguardDrawComplete=true mWindowManagerDrawComplete=true\n")
	fmt.Fprintln(w, "    KeyguardServiceDelegate")
	fmt.Fprintf(w, "      showing=%t\n", f.keyguard)
	fmt.Fprintf(w, "      inputRestricted=%t\n", f.keyguard)
	fmt.Fprintln(w, "      occluded=false")
	fmt.Fprintln(w, "      secure=false")
	fmt.Fprintln(w, "      dreaming=false")
	fmt.Fprintln(w, "      systemIsReady=true")
	fmt.Fprintln(w, "      deviceHasKeyguard=true")
	fmt.Fprintln(w, "      enabled=true")
	fmt.Fprintln(w, "      KeyguardStateMonitor")
	fmt.Fprintf(w, "        mIsShowing=%t\n", f.keyguard)
	fmt.Fprintln(w, "        mSimSecure=false")
	fmt.Fprintf(w, "        mInputRestricted=%t\n", f.keyguard)
	fmt.Fprintln(w, "        mTrusted=false")
	fmt.Fprintln(w, "        mCurrentUserId=0")
}

// currentFocusLine is the mCurrentFocus value: the keyguard's
// NotificationShade (API 30+; StatusBar on 29) while locked, else the top
// activity's window; mCurrentFocus=null while the screen is off.
func (f focusView) currentFocus(api int) string {
	if !f.awake {
		return "null"
	}
	if f.keyguard {
		if api >= 30 {
			return "Window{" + f.lockWin + " u0 NotificationShade}"
		}
		return "Window{" + f.statusWin + " u0 StatusBar}"
	}
	return windowString(f.winHash, f.pkg, f.cls)
}

// focusedAppLine is mFocusedApp: "ActivityRecord{h u0 pkg/.Act tN}" on API 30+;
// on API 29 "AppWindowToken{h token=Token{h ActivityRecord{h u0 pkg/.Act tN}}}"
// (both forms: appium-adb test/unit/apk-utils.spec.ts, SOURCES.md).
func (f focusView) focusedApp(api int) string {
	rec := recordString(f.pkg, f.cls, f.recHash, f.taskID)
	if api <= 29 {
		return fmt.Sprintf("AppWindowToken{%s token=Token{%s %s}}", rev(f.recHash), rev(f.winHash), rec)
	}
	return rec
}

func rev(h string) string {
	b := []byte(h)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	if b[0] == '0' {
		b[0] = 'a'
	}
	return string(b)
}

// dumpWindowDisplays prints `dumpsys window displays` (API 29+): the header
// from RootWindowContainer.dumpDisplayContents and the DisplayContent.dump lines
// of the API 34 capture (dumpsys-activity-activities/api34.txt, section
// "ActivityTaskSupervisor state:"): Display line, init/cur/app/rng, focus, and
// the DisplayPolicy block (mShowingDream/mDreamingLockscreen/isKeyguardShowing,
// mScreenOnFully) Appium's lock check reads.
func (d *Device) dumpWindowDisplays(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	f := d.focusLocked()
	d.mu.Unlock()
	fmt.Fprintln(w, "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)")
	d.writeDisplayContent(w, api, g, f)
}

func (d *Device) writeDisplayContent(w io.Writer, api int, g winGeom, f focusView) {
	org, minSize := "", ""
	if api >= 33 {
		org = " (organized)"
		minSize = " mMinSizeOfResizeableTaskDp=220"
	}
	fmt.Fprintf(w, "  Display: mDisplayId=0%s\n", org)
	fmt.Fprintf(w, "    init=%dx%d %ddpi%s cur=%dx%d app=%dx%d rng=%dx%d-%dx%d\n",
		g.w, g.h, g.dpi, minSize, g.w, g.h, g.w, g.appH, g.rngA, g.rngB, g.rngC, g.rngD)
	fmt.Fprintf(w, "    deferred=false mLayoutNeeded=false mTouchExcludeRegion=SkRegion((0,0,%d,%d))\n", g.w, g.h)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mLayoutSeq=%d\n", 108)
	fmt.Fprintf(w, "  mCurrentFocus=%s\n", f.currentFocus(api))
	fmt.Fprintf(w, "  mFocusedApp=%s\n", f.focusedApp(api))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  mHoldScreenWindow=null")
	fmt.Fprintln(w, "  mLastWakeLockHoldingWindow=null")
	fmt.Fprintln(w, "  mLastWakeLockObscuringWindow=null")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayFrames w="+itoa(g.w)+" h="+itoa(g.h)+" r=0")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayPolicy")
	fmt.Fprintln(w, "    mCarDockEnablesAccelerometer=true mDeskDockEnablesAccelerometer=true")
	fmt.Fprintln(w, "    mDockMode=EXTRA_DOCK_STATE_UNDOCKED mLidState=LID_ABSENT")
	fmt.Fprintf(w, "    mAwake=%t mScreenOnEarly=%t mScreenOnFully=%t\n", f.awake, f.awake, f.awake)
	fmt.Fprintln(w, "    mKeyguardDrawComplete=true mWindowManagerDrawComplete=true")
	fmt.Fprintln(w, "    mHdmiPlugged=false")
	fmt.Fprintf(w, "    mShowingDream=false mDreamingLockscreen=%t\n", f.keyguard)
	fmt.Fprintf(w, "    mStatusBar=Window{%s u0 StatusBar}\n", f.statusWin)
	if api >= 30 {
		fmt.Fprintf(w, "    mExpandedPanel=Window{%s u0 NotificationShade}\n", f.lockWin)
	}
	fmt.Fprintf(w, "    isKeyguardShowing=%t\n", f.keyguard)
	fmt.Fprintf(w, "    mNavigationBar=Window{%s u0 NavigationBar0}\n", f.navWin)
	if cf := f.currentFocus(api); cf != "null" {
		fmt.Fprintf(w, "    mFocusedWindow=%s\n", cf)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayRotation")
	fmt.Fprintln(w, "    mCurrentAppOrientation=SCREEN_ORIENTATION_UNSPECIFIED")
	fmt.Fprintln(w, "    mLastOrientation=-1")
	fmt.Fprintln(w, "    mRotation=0 mDeferredRotationPauseCount=0")
}

func itoa(i int) string { return fmt.Sprint(i) }

// dumpWindowWindows prints `dumpsys window windows`: the window list (top
// first) in the shape of fixtures/captures/dumpsys-window-windows/api30.txt
// (API 29-30) and api31.txt (API 31+), then the global tail. Only the lines
// whose values the simulator knows are printed for each window.
func (d *Device) dumpWindowWindows(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	f := d.focusLocked()
	type win struct {
		hash, name, pkg string
		uid, pid        int
		rec             string
		ty              string
		frame           string
		visible         bool
	}
	var wins []win
	sysPid := d.am.procs[systemUIPackage].pid
	wins = append(wins, win{hash: f.navWin, name: "NavigationBar0", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
		ty: "NAVIGATION_BAR", frame: fmt.Sprintf("[0,%d][%d,%d]", g.appH, g.w, g.h), visible: true})
	if api >= 30 {
		wins = append(wins, win{hash: f.lockWin, name: "NotificationShade", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
			ty: "NOTIFICATION_SHADE", frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.h), visible: f.keyguard})
	}
	wins = append(wins, win{hash: f.statusWin, name: "StatusBar", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
		ty: "STATUS_BAR", frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.status), visible: true})
	for i, t := range d.am.tasks {
		for j := len(t.records) - 1; j >= 0; j-- {
			r := t.records[j]
			pid := 0
			if p, ok := d.am.procs[r.pkg]; ok {
				pid = p.pid
			}
			wins = append(wins, win{hash: r.winHash, name: r.pkg + "/" + r.cls, pkg: r.pkg, uid: d.uidOfLocked(r.pkg), pid: pid,
				rec: recordString(r.pkg, r.cls, r.hash, t.id), ty: "BASE_APPLICATION",
				frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.h), visible: i == 0 && j == len(t.records)-1})
		}
	}
	d.mu.Unlock()
	cfg := fmt.Sprintf("{1.0 310mcc260mnc [en_US] ldltr sw%ddp w%ddp h%ddp %ddpi nrml long port finger qwerty/v/v dpad/v winConfig={ mBounds=Rect(0, 0 - %d, %d) mAppBounds=Rect(0, 0 - %d, %d)",
		g.swdp, g.wdp, g.hdp, g.dpi, g.w, g.h, g.w, g.appH)
	if api >= 31 {
		cfg += fmt.Sprintf(" mMaxBounds=Rect(0, 0 - %d, %d)", g.w, g.h)
	}
	cfg += " mWindowingMode=fullscreen mDisplayWindowingMode=fullscreen mActivityType=undefined mAlwaysOnTop=undefined mRotation=ROTATION_0}"
	if api >= 31 {
		cfg += " as.2 s.70 fontWeightAdjustment=0}"
	} else {
		cfg += " s.8}"
	}
	fmt.Fprintln(w, "WINDOW MANAGER WINDOWS (dumpsys window windows)")
	for i, x := range wins {
		fmt.Fprintf(w, "  Window #%d Window{%s u0 %s}:\n", len(wins)-1-i, x.hash, x.name)
		fmt.Fprintf(w, "    mDisplayId=0 rootTaskId=1 mSession=Session{%s %d:u0a%d} mClient=android.os.BinderProxy@%s\n", rev(x.hash), x.pid, x.uid%100000-10000, x.hash)
		fmt.Fprintf(w, "    mOwnerUid=%d showForAllUsers=%t package=%s appop=NONE\n", x.uid, x.rec == "", x.pkg)
		if x.rec != "" {
			fmt.Fprintf(w, "    mActivityRecord=%s\n", x.rec)
		}
		fmt.Fprintf(w, "    mViewVisibility=0x%x mHaveFrame=true mObscured=false\n", map[bool]int{true: 0, false: 8}[x.visible])
		fmt.Fprintf(w, "    mFullConfiguration=%s\n", cfg)
		fmt.Fprintf(w, "    mHasSurface=%t isReadyForDisplay()=%t mWindowRemovalAllowed=false\n", x.visible, x.visible)
		fmt.Fprintf(w, "    mFrame=%s last=%s\n", x.frame, x.frame)
		fmt.Fprintf(w, "    isOnScreen=%t\n", x.visible)
		fmt.Fprintf(w, "    isVisible=%t\n", x.visible)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mGlobalConfiguration=%s\n", cfg)
	fmt.Fprintln(w, "  mHasPermanentDpad=false")
	fmt.Fprintln(w, "  mTopFocusedDisplayId=0")
	target := "null"
	if cf := f.currentFocus(api); cf != "null" {
		target = cf
	}
	if api >= 31 {
		fmt.Fprintf(w, "  imeLayeringTarget in display# 0 %s\n", target)
		fmt.Fprintf(w, "  imeInputTarget in display# 0 %s\n", target)
		fmt.Fprintf(w, "  imeControlTarget in display# 0 %s\n", target)
	} else {
		fmt.Fprintf(w, "  mInputMethodTarget in display# 0 %s\n", target)
		fmt.Fprintln(w, "  inputMethodControlTarget in display# 0 null")
	}
	fmt.Fprintln(w, "  mInTouchMode=true")
	fmt.Fprintln(w, "  mSystemBooted=true mDisplayEnabled=true")
	fmt.Fprintln(w, "  mDisplayFrozen=false windows=0 client=false apps=0  mRotation=0  mLastOrientation=5")
	fmt.Fprintln(w, " waitingForConfig=false")
	fmt.Fprintln(w, "  Animation settings: disabled=false window=1.0 transition=1.0 animator=1.0")
}

// uidOfLocked is uidOf for callers holding d.mu: it uses the running process's
// uid (known to the activity manager), else the fixed system uids.
func (d *Device) uidOfLocked(pkg string) int {
	if p, ok := d.am.procs[pkg]; ok && p.uid != 0 {
		return p.uid
	}
	switch pkg {
	case homePackage:
		return homeUID
	case systemUIPackage:
		return systemUIUID
	}
	return 10000
}

// --- dumpsys activity -----------------------------------------------------------------

// dumpsysActivity: `dumpsys activity activities|top|services [PKG]|processes`.
func dumpsysActivity(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "activities", "a":
		d.dumpActivities(c.Stdout)
	case "top":
		d.dumpActivityTop(c.Stdout)
	case "services", "s":
		pkg := ""
		if len(args) > 1 {
			pkg = args[1]
		}
		d.dumpServices(c.Stdout, pkg)
	case "processes", "p":
		d.dumpProcesses(c.Stdout)
	case "":
		d.dumpActivities(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpServices(c.Stdout, "")
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpProcesses(c.Stdout)
	default:
		d.dumpActivities(c.Stdout)
	}
	return 0
}

func procRecord(p *amProcess) string {
	return fmt.Sprintf("ProcessRecord{%x %d:%s/u0a%d}", 0x7863d74+p.pid, p.pid, p.pkg, p.uid-10000)
}

// dumpActivities prints `dumpsys activity activities`. API 31+: the Task form of
// fixtures/captures/dumpsys-activity-activities/api34.txt (topResumedActivity=
// in the resumed task, "Resumed activities in task display areas", "ResumedActivity:").
// API 29-30: the ActivityStack form of an Android 10 device quoted in SOURCES.md
// ("Stack #N: type=… mode=fullscreen", "* TaskRecord{…}", "mResumedActivity: …").
func (d *Device) dumpActivities(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	f := d.focusLocked()
	fmt.Fprintln(w, "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)")
	fmt.Fprintln(w, "Display #0 (activities from top to bottom):")
	top := d.am.topLocked()
	topTask := d.am.tasks[0]
	topRec := recordString(top.pkg, top.cls, top.hash, topTask.id)
	for ti, t := range d.am.tasks {
		typ := "standard"
		if t.home {
			typ = "home"
		}
		visible := ti == 0
		if api >= 31 {
			label := "A=" + itoa(d.uidOfLocked(t.pkg)) + ":" + t.pkg
			if t.home {
				label = "I=" + shortComponent(t.pkg, t.root)
			}
			fmt.Fprintf(w, "  * Task{%s #%d type=%s %s U=0 visible=%t visibleRequested=%t mode=fullscreen translucent=false sz=%d}\n",
				t.hash, t.id, typ, label, visible, visible, len(t.records))
			fmt.Fprintln(w, "    isSleeping=false")
			if ti == 0 && f.awake {
				fmt.Fprintf(w, "    topResumedActivity=%s\n", topRec)
			}
		} else {
			fmt.Fprintln(w)
			fmt.Fprintf(w, "  Stack #%d: type=%s mode=fullscreen\n", t.id, typ)
			fmt.Fprintln(w, "  isSleeping=false")
			fmt.Fprintln(w, "  mBounds=Rect(0, 0 - 0, 0)")
			fmt.Fprintln(w)
			fmt.Fprintf(w, "    Task id #%d\n", t.id)
			fmt.Fprintln(w, "    mBounds=Rect(0, 0 - 0, 0)")
			label := "A=" + t.pkg
			if t.home {
				label = "I=" + shortComponent(t.pkg, t.root)
			}
			fmt.Fprintf(w, "    * TaskRecord{%s #%d %s U=0 StackId=%d sz=%d}\n", t.hash, t.id, label, t.id, len(t.records))
			fmt.Fprintf(w, "      intent={%s}\n", strings.TrimSuffix(strings.TrimPrefix(t.intent.String(), "Intent { "), " }"))
		}
		proc := d.am.procs[t.pkg]
		for j := len(t.records) - 1; j >= 0; j-- {
			r := t.records[j]
			rs := recordString(r.pkg, r.cls, r.hash, t.id)
			indent := "    "
			if api < 31 {
				indent = "      "
			}
			if api >= 31 {
				fmt.Fprintf(w, "%s* Hist  #%d: %s\n", indent, j, rs)
			} else {
				fmt.Fprintf(w, "%s* Hist #%d: %s\n", indent, j, rs)
			}
			in := indent + "    "
			fmt.Fprintf(w, "%spackageName=%s processName=%s\n", in, r.pkg, r.pkg)
			if proc != nil {
				fmt.Fprintf(w, "%sapp=%s\n", in, procRecord(proc))
			}
			if j == 0 {
				fmt.Fprintf(w, "%s%s\n", in, t.intent.String())
			} else {
				fmt.Fprintf(w, "%sIntent { cmp=%s }\n", in, shortComponent(r.pkg, r.cls))
			}
			fmt.Fprintf(w, "%smActivityComponent=%s\n", in, shortComponent(r.pkg, r.cls))
			state := "STOPPED"
			if ti == 0 && j == len(t.records)-1 {
				state = "RESUMED"
			}
			fmt.Fprintf(w, "%sstate=%s delayedResume=false finishing=false\n", in, state)
			idle := !d.am.animatingLocked(r, now)
			fmt.Fprintf(w, "%skeysPaused=false inHistory=true idle=%t\n", in, idle)
			fmt.Fprintf(w, "%snowVisible=%t lastVisibleTime=-%s\n", in, state == "RESUMED", durShort(now.Sub(r.shownAt)))
		}
		if api < 31 {
			if ti == 0 && f.awake {
				fmt.Fprintf(w, "    mResumedActivity: %s\n", topRec)
			}
		}
		fmt.Fprintln(w)
	}
	if api >= 31 {
		fmt.Fprintln(w, "  Resumed activities in task display areas (from top to bottom):")
		fmt.Fprintf(w, "    Resumed: %s\n", topRec)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  ResumedActivity: %s\n", topRec)
	fmt.Fprintln(w)
	if api >= 31 {
		fmt.Fprintln(w, "ActivityTaskSupervisor state:")
		fmt.Fprintf(w, "  topDisplayFocusedRootTask=Task{%s #%d type=%s}\n", topTask.hash, topTask.id, map[bool]string{true: "home", false: "standard"}[topTask.home])
	} else {
		fmt.Fprintln(w, "ActivityStackSupervisor state:")
	}
	d.writeDisplayContent(w, api, g, f)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  KeyguardController:")
	fmt.Fprintf(w, "    mKeyguardShowing=%t\n", f.keyguard)
	fmt.Fprintln(w, "    mAodShowing=false")
	fmt.Fprintln(w, "    mKeyguardGoingAway=false")
	fmt.Fprintln(w, "    mDismissalRequested=false")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mCurTaskIdForUser={0=%d}\n", d.am.nextTask-1)
}

func durShort(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	ms := int64(d / time.Millisecond)
	s, ms := ms/1000, ms%1000
	m, s := s/60, s%60
	if m > 0 {
		return fmt.Sprintf("%dm%ds%dms", m, s, ms)
	}
	return fmt.Sprintf("%ds%dms", s, ms)
}

// dumpActivityTop prints `dumpsys activity top`: "TASK pkg id=N userId=0" and
// "  ACTIVITY pkg/.Act hash pid=N" for the resumed activity (the line adbutils
// parses: ACTIVITY pkg/act … pid=N; header "ACTIVITY MANAGER TOP ACTIVITIES"
// from ActivityManagerService.dumpActivity). The activity's view hierarchy
// is not dumped.
func (d *Device) dumpActivityTop(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.am.tasks[0]
	r := t.records[len(t.records)-1]
	pid := 0
	if p, ok := d.am.procs[r.pkg]; ok {
		pid = p.pid
	}
	fmt.Fprintf(w, "TASK %s id=%d userId=0\n", t.pkg, t.id)
	fmt.Fprintf(w, "  ACTIVITY %s %s pid=%d\n", shortComponent(r.pkg, r.cls), r.hash, pid)
}

// dumpServices prints `dumpsys activity services [PKG]` for the foreground
// services the simulator runs (the Appium Settings helper's): a ServiceRecord
// block with "isForeground=true foregroundId=N" (line forms from device
// captures quoted in SOURCES.md); nothing running → "  (nothing)".
func (d *Device) dumpServices(w io.Writer, pkg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(w, "ACTIVITY MANAGER SERVICES (dumpsys activity services)")
	var pkgs []string
	for p := range d.am.fgService {
		if pkg == "" || p == pkg {
			pkgs = append(pkgs, p)
		}
	}
	sort.Strings(pkgs)
	if len(pkgs) == 0 {
		fmt.Fprintln(w, "  (nothing)")
		return
	}
	fmt.Fprintln(w, "  User 0 active services:")
	for i, p := range pkgs {
		cls := d.am.fgService[p]
		comp := shortComponent(p, cls)
		fmt.Fprintf(w, "  * ServiceRecord{%x u0 %s}\n", 0x9f2f9f2+i, comp)
		fmt.Fprintf(w, "    intent={cmp=%s}\n", comp)
		fmt.Fprintf(w, "    packageName=%s\n", p)
		fmt.Fprintf(w, "    processName=%s\n", p)
		if proc, ok := d.am.procs[p]; ok {
			fmt.Fprintf(w, "    app=%s\n", procRecord(proc))
		}
		fmt.Fprintln(w, "    isForeground=true foregroundId=1 types=0x00000000")
	}
}

// dumpProcesses prints the "ACTIVITY MANAGER RUNNING PROCESSES (dumpsys
// activity processes)" header and one "*APP* UID N ProcessRecord{…}" line per
// app process.
func (d *Device) dumpProcesses(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(w, "ACTIVITY MANAGER RUNNING PROCESSES (dumpsys activity processes)")
	procs := d.am.sortedProcsLocked()
	for _, p := range procs {
		fmt.Fprintf(w, "  *APP* UID %d %s\n", p.uid, procRecord(p))
		fmt.Fprintf(w, "    user #0 uid=%d\n", p.uid)
		fmt.Fprintf(w, "    pid=%d\n", p.pid)
	}
}

func (am *activityManager) sortedProcsLocked() []*amProcess {
	var ps []*amProcess
	for _, p := range am.procs {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	return ps
}
