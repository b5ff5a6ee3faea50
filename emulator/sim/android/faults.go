package android

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// App faults (Profile.Faults.AppCrash / AppNotResponding / SystemUINotResponding)
// and the error dialogs a device shows for them. Every output follows what
// AOSP prints; sources in fixtures/captures/SOURCES.md ("Crash and ANR").
//
// Faults are due at a device time; they are applied lazily by advance(),
// which every observer (shell commands, Foreground, Click, streaming logcat)
// calls first, so a fake clock drives them as well as the real one.

// AppCrashFault makes an app's process die of an uncaught exception.
type AppCrashFault struct {
	// Package is the app whose process crashes.
	Package string `yaml:"package"`
	// Activity (fully qualified class), when set, limits the crash to launches
	// of that activity; empty means any launch of the package.
	Activity string `yaml:"activity"`
	// Exception is the thrown class ("java.lang.IllegalStateException");
	// empty means java.lang.RuntimeException.
	Exception string `yaml:"exception"`
	// Message is the exception's message (may be empty).
	Message string `yaml:"message"`
	// AfterMillis is the delay from the launch to the crash, in milliseconds.
	AfterMillis int `yaml:"afterMillis"`
	// Times limits the fault to the first Times crashes of the device's life
	// (a crash that does not repeat: Times 1); 0 means every launch.
	Times int `yaml:"times"`
}

// AppANRFault makes an app stop responding AfterMillis after each launch: an
// input event waits 5 s, then the ANR is reported (dialog if the app is in
// front, else killed silently).
type AppANRFault struct {
	Package     string `yaml:"package"`
	AfterMillis int    `yaml:"afterMillis"`
}

// SystemUIANRFault shows "System UI isn't responding" AfterMillis after
// start-up, over whatever app is in front.
type SystemUIANRFault struct {
	AfterMillis int `yaml:"afterMillis"`
}

// Limits of fault fields (profile input).
const (
	maxFaultDelayMillis = 3600 * 1000
	maxFaultMessage     = 1024
	maxFaultTimes       = 1 << 20
)

var javaClassRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*$`)

func checkFaults(f Faults) error {
	if c := f.AppCrash; c != nil {
		if !javaPackageRE.MatchString(c.Package) {
			return fmt.Errorf("faults.appCrash.package %q is not a package name", c.Package)
		}
		if c.Exception != "" && (len(c.Exception) > 256 || !javaClassRE.MatchString(c.Exception)) {
			return fmt.Errorf("faults.appCrash.exception %q is not a Java class name", c.Exception)
		}
		if c.Activity != "" && (len(c.Activity) > 256 || !javaClassRE.MatchString(c.Activity)) {
			return fmt.Errorf("faults.appCrash.activity %q is not a Java class name", c.Activity)
		}
		if len(c.Message) > maxFaultMessage || strings.ContainsAny(c.Message, "\n\r\x00") {
			return fmt.Errorf("faults.appCrash.message: at most %d bytes, one line", maxFaultMessage)
		}
		if c.AfterMillis < 0 || c.AfterMillis > maxFaultDelayMillis {
			return fmt.Errorf("faults.appCrash.afterMillis %d outside 0..%d", c.AfterMillis, maxFaultDelayMillis)
		}
		if c.Times < 0 || c.Times > maxFaultTimes {
			return fmt.Errorf("faults.appCrash.times %d outside 0..%d", c.Times, maxFaultTimes)
		}
	}
	if a := f.AppNotResponding; a != nil {
		if !javaPackageRE.MatchString(a.Package) {
			return fmt.Errorf("faults.appNotResponding.package %q is not a package name", a.Package)
		}
		if a.AfterMillis < 0 || a.AfterMillis > maxFaultDelayMillis {
			return fmt.Errorf("faults.appNotResponding.afterMillis %d outside 0..%d", a.AfterMillis, maxFaultDelayMillis)
		}
	}
	if s := f.SystemUINotResponding; s != nil && (s.AfterMillis < 0 || s.AfterMillis > maxFaultDelayMillis) {
		return fmt.Errorf("faults.systemUINotResponding.afterMillis %d outside 0..%d", s.AfterMillis, maxFaultDelayMillis)
	}
	return nil
}

var javaPackageRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$`)

type faultKind int

const (
	faultCrash faultKind = iota
	faultANR
	faultSystemUIANR
	faultDialogTimeout
)

// pendingFault is a fault due at a device time, bound to the process (pid)
// it was scheduled for: a process that died or restarted meanwhile escapes it.
type pendingFault struct {
	at   time.Time
	kind faultKind
	pkg  string
	pid  int
	cls  string // activity launched
}

// dialogKind tells the error dialogs apart.
type dialogKind int

const (
	dialogCrash dialogKind = iota
	dialogANR
)

// errDialog is an error dialog window of system_server (package "android").
type errDialog struct {
	kind      dialogKind
	proc      string // process name (= package here)
	pid       int
	label     string
	repeating bool // "keeps stopping"
	winHash   string
	shownAt   time.Time
	// focus is the key-focused button (-1: touch mode, none).
	focus int
}

type dialogButton struct{ id, text string }

// buttons are the dialog's buttons, top first.
func (e *errDialog) buttons() []dialogButton {
	if e.kind == dialogANR {
		return []dialogButton{{actClose, "Close app"}, {actWait, "Wait"}}
	}
	return []dialogButton{{actAppInfo, "App info"}, {actClose, "Close app"}}
}

// title is the window title dumpsys window shows (AppErrorDialog /
// AppNotRespondingDialog attrs.setTitle).
func (e *errDialog) title() string {
	if e.kind == dialogCrash {
		return "Application Error: " + e.proc
	}
	return "Application Not Responding: " + e.proc
}

// text is the dialog's title text (strings aerr_application,
// aerr_application_repeated, anr_application_process…).
func (e *errDialog) text() string {
	switch {
	case e.kind == dialogANR:
		return e.label + " isn't responding"
	case e.repeating:
		return e.label + " keeps stopping"
	}
	return e.label + " has stopped"
}

// Dialog actions carried by the dialog's buttons (Element.action).
const (
	actClose   = "aerr_close"
	actAppInfo = "aerr_app_info"
	actWait    = "aerr_wait"
)

// crashDialogTimeout is AppErrorDialog's DISMISS_TIMEOUT: unanswered, it
// force-quits the app after 5 minutes.
const crashDialogTimeout = 5 * time.Minute

// minCrashInterval is ProcessList.MIN_CRASH_INTERVAL.
const minCrashInterval = 60 * time.Second

// anrInputTimeout is the default input dispatching timeout (5 s).
const anrInputTimeout = 5 * time.Second

// faultState is the device's fault and error-dialog state (guarded by d.mu).
type faultState struct {
	pending []pendingFault
	dialogs []*errDialog // bottom first; the last one has focus
	// crashTimes is AppErrors.mProcessCrashTimes (reset when the user starts
	// the process in the foreground); crashTimesPersistent is
	// mProcessCrashTimesPersistent (never reset).
	crashTimes           map[string]time.Time
	crashTimesPersistent map[string]time.Time
	dropbox              []dropboxEntry
	anrCount             int
	// crashes counts the AppCrash faults applied (AppCrashFault.Times).
	crashes int
}

func newFaultState() *faultState {
	return &faultState{crashTimes: map[string]time.Time{}, crashTimesPersistent: map[string]time.Time{}}
}

// scheduleStartupFaultsLocked schedules the SystemUI ANR of the profile.
func (d *Device) scheduleStartupFaultsLocked() {
	if s := d.profile.Faults.SystemUINotResponding; s != nil {
		d.faults.pending = append(d.faults.pending, pendingFault{
			at: d.started.Add(time.Duration(s.AfterMillis) * time.Millisecond), kind: faultSystemUIANR, pkg: systemUIPackage})
	}
}

// onLaunchLocked schedules the app faults of a launch of pkg/cls by process
// pid. inApp marks an activity the app started itself (a click): only faults
// bound to that activity follow it.
func (d *Device) onLaunchLocked(pkg, cls string, pid int, now time.Time, inApp bool) {
	if d.dialogOfLocked(pkg, pid) != nil {
		return
	}
	for _, f := range d.faults.pending {
		if f.pid == pid && f.pkg == pkg && f.kind != faultDialogTimeout {
			return // one fault at a time per process
		}
	}
	if c := d.profile.Faults.AppCrash; c != nil && c.Package == pkg && (c.Activity == "" && !inApp || c.Activity == cls) &&
		(c.Times == 0 || d.faults.crashes < c.Times) {
		d.faults.pending = append(d.faults.pending, pendingFault{
			at: now.Add(time.Duration(c.AfterMillis) * time.Millisecond), kind: faultCrash, pkg: pkg, pid: pid, cls: cls})
	}
	if a := d.profile.Faults.AppNotResponding; a != nil && a.Package == pkg && !inApp {
		d.faults.pending = append(d.faults.pending, pendingFault{
			at: now.Add(time.Duration(a.AfterMillis)*time.Millisecond + anrInputTimeout), kind: faultANR, pkg: pkg, pid: pid, cls: cls})
	}
}

// advance applies the faults due by now, oldest first.
func (d *Device) advance() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
}

func (d *Device) advanceLocked() {
	now := d.now()
	for {
		idx := -1
		for i, f := range d.faults.pending {
			if !f.at.After(now) && (idx < 0 || f.at.Before(d.faults.pending[idx].at)) {
				idx = i
			}
		}
		if idx < 0 {
			return
		}
		f := d.faults.pending[idx]
		d.faults.pending = append(d.faults.pending[:idx], d.faults.pending[idx+1:]...)
		switch f.kind {
		case faultCrash:
			d.crashLocked(f)
		case faultANR:
			d.anrLocked(f)
		case faultSystemUIANR:
			if p, ok := d.am.procs[systemUIPackage]; ok {
				f.pid = p.pid
				d.anrLocked(f)
			}
		case faultDialogTimeout:
			if dl := d.dialogOfLocked(f.pkg, f.pid); dl != nil {
				d.dialogActionLocked(dl, actClose, f.at)
			}
		}
	}
}

// faultTick is closed (fires) when the next pending fault is due, for readers
// that wait (streaming logcat); nil when nothing is pending.
func (d *Device) faultTick() <-chan time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	var next time.Time
	for _, f := range d.faults.pending {
		if next.IsZero() || f.at.Before(next) {
			next = f.at
		}
	}
	if next.IsZero() {
		return nil
	}
	wait := next.Sub(d.now())
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return time.After(wait)
}

func (d *Device) labelLocked(pkg string) string {
	if pkg == systemUIPackage {
		return "System UI"
	}
	if p, ok := d.pm.pkgs[pkg]; ok && p.Label != "" {
		return p.Label
	}
	return pkg
}

func (d *Device) settingLocked(ns, key string) string { return d.settings[ns][key] }

// crashLocked is an uncaught exception on the main thread of f.pid
// (RuntimeInit.LoggingHandler + KillApplicationHandler, AppErrors).
func (d *Device) crashLocked(f pendingFault) {
	am := d.am
	p, ok := am.procs[f.pkg]
	if !ok || p.pid != f.pid {
		return
	}
	c := d.profile.Faults.AppCrash
	if c.Times > 0 && d.faults.crashes >= c.Times {
		return
	}
	d.faults.crashes++
	now := d.now()
	exc := c.Exception
	if exc == "" {
		exc = "java.lang.RuntimeException"
	}
	throwable := exc
	if c.Message != "" {
		throwable += ": " + c.Message
	}
	stack := crashStack(f.cls)
	// One AndroidRuntime entry in the crash buffer (Log.printlns packs the lines).
	d.logAt(now, bufCrash, p.pid, p.pid, 'E', "AndroidRuntime",
		fmt.Sprintf("FATAL EXCEPTION: main\nProcess: %s, PID: %d\n%s\n%s", f.pkg, p.pid, throwable, stack))
	api := d.APILevel()
	atmTag := "ActivityTaskManager"
	if api < 29 {
		atmTag = "ActivityManager"
	}
	fs := d.faults
	last, hadLast := fs.crashTimes[f.pkg]
	lastP, hadLastP := fs.crashTimesPersistent[f.pkg]
	fs.crashTimes[f.pkg], fs.crashTimesPersistent[f.pkg] = now, now
	for _, r := range am.recordsOfLocked(f.pkg) {
		d.logAt(now.Add(4*time.Millisecond), bufSystem, pidSystemSrv, tidBinder, 'W', atmTag, "  Force finishing activity "+shortComponent(r.pkg, r.cls))
	}
	d.addDropboxLocked(now, "data_app_crash", d.dropboxHeaderLocked(p, now)+"\n"+throwable+"\n"+stack+"\n")
	am.removeTasksLocked(f.pkg)
	if hadLast && now.Sub(last) < minCrashInterval {
		d.logAt(now.Add(5*time.Millisecond), bufSystem, pidSystemSrv, tidBinder, 'W', "ActivityManager",
			fmt.Sprintf("Process %s has crashed too many times: killing!", f.pkg))
		d.killProcessLocked(p, now.Add(6*time.Millisecond), "crash", false)
		return
	}
	repeating := hadLastP && now.Sub(lastP) < minCrashInterval
	show := repeating || d.settingLocked("global", "show_first_crash_dialog") == "1" ||
		d.settingLocked("secure", "show_first_crash_dialog_dev_option") == "1"
	if d.settingLocked("global", "hide_error_dialogs") == "1" || !am.awake {
		show = false
	}
	if !show {
		// CANT_SHOW: the app's KillApplicationHandler kills itself.
		d.logAt(now.Add(9*time.Millisecond), bufMain, p.pid, p.pid, 'I', "Process", fmt.Sprintf("Sending signal. PID: %d SIG: 9", p.pid))
		d.killProcessLocked(p, now.Add(11*time.Millisecond), "", true)
		return
	}
	d.logAt(now.Add(7*time.Millisecond), bufSystem, pidSystemSrv, tidUIThread, 'I', "ActivityManager",
		fmt.Sprintf("Showing crash dialog for package %s u0", f.pkg))
	dl := &errDialog{kind: dialogCrash, proc: f.pkg, pid: p.pid, label: d.labelLocked(f.pkg), repeating: repeating, winHash: am.hash(), shownAt: now, focus: -1}
	fs.dialogs = append(fs.dialogs, dl)
	fs.pending = append(fs.pending, pendingFault{at: now.Add(crashDialogTimeout), kind: faultDialogTimeout, pkg: f.pkg, pid: p.pid})
}

// crashStack is the stack of the exception: the top frame in the crashing
// activity's class (a Runnable posted from it), then the framework frames of
// Android 14's main looper (Handler/Looper/ActivityThread/ZygoteInit).
func crashStack(cls string) string {
	simple := cls[strings.LastIndexByte(cls, '.')+1:]
	frames := []string{
		fmt.Sprintf("%s$1.run(%s.java:42)", cls, simple),
		"android.os.Handler.handleCallback(Handler.java:958)",
		"android.os.Handler.dispatchMessage(Handler.java:99)",
		"android.os.Looper.loopOnce(Looper.java:205)",
		"android.os.Looper.loop(Looper.java:294)",
		"android.app.ActivityThread.main(ActivityThread.java:8177)",
		"java.lang.reflect.Method.invoke(Native Method)",
		"com.android.internal.os.RuntimeInit$MethodAndArgsCaller.run(RuntimeInit.java:552)",
		"com.android.internal.os.ZygoteInit.main(ZygoteInit.java:971)",
	}
	return "\tat " + strings.Join(frames, "\n\tat ")
}

// anrLocked reports an ANR of f.pid (ProcessErrorStateRecord.appNotResponding):
// the ANR log entry, a data_app_anr dropbox entry with the traces, the trace
// file under /data/anr, then the dialog if the app is in front (or is
// SystemUI), else a silent kill ("bg anr"). App ANRs are due when the input
// event has waited the 5 s timeout.
func (d *Device) anrLocked(f pendingFault) {
	am := d.am
	p, ok := am.procs[f.pkg]
	if !ok || p.pid != f.pid || d.dialogOfLocked(f.pkg, f.pid) != nil {
		return
	}
	now := f.at
	fs := d.faults
	fs.anrCount++
	cls := f.cls
	var win, parent, reason string
	if f.kind == faultSystemUIANR {
		win = "NotificationShade"
		reason = "Input dispatching timed out (" + "91c910b NotificationShade (server) is not responding. Waited 5001ms for MotionEvent)"
	} else {
		if top := am.topLocked(); top.pkg == f.pkg {
			cls = top.cls
		}
		win = f.pkg + "/" + cls
		parent = shortComponent(f.pkg, cls)
		reason = fmt.Sprintf("Input dispatching timed out (%s %s (server) is not responding. Waited 5001ms for KeyEvent)", am.hash(), win)
	}
	subject := "ANR in " + f.pkg
	if parent != "" {
		subject += " (" + parent + ")"
	}
	var b strings.Builder
	b.WriteString(subject + "\n")
	fmt.Fprintf(&b, "PID: %d\n", p.pid)
	fmt.Fprintf(&b, "Reason: %s\n", reason)
	if parent != "" {
		fmt.Fprintf(&b, "Parent: %s\n", parent)
	}
	fmt.Fprintf(&b, "ErrorId: %s\n", d.uuidLocked())
	b.WriteString("Frozen: false\n")
	b.WriteString("Load: 0.92 / 0.71 / 0.54\n")
	b.WriteString("----- Output from /proc/pressure/memory -----\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n----- End output from /proc/pressure/memory -----\n")
	fmt.Fprintf(&b, "CPU usage from 0ms to 5010ms later:\n  12%% %d/%s: 10%% user + 2%% kernel\n", p.pid, f.pkg)
	d.logAt(now.Add(-7*time.Millisecond), bufSystem, pidSystemSrv, tidBinder, 'I', "WindowManager",
		fmt.Sprintf("ANR in Window{%s u0 %s}. Reason:%s", am.hash(), win, strings.TrimPrefix(reason, "Input dispatching timed out")))
	d.logAt(now, bufSystem, pidSystemSrv, tidAnr, 'E', "ActivityManager", strings.TrimSuffix(b.String(), "\n"))
	traces := anrTraces(p, now)
	class := "data_app"
	if f.kind == faultSystemUIANR {
		class = "system_app"
	}
	hdr := d.dropboxHeaderLocked(p, now)
	if parent != "" {
		hdr += "Activity: " + parent + "\n"
	}
	hdr += "Subject: " + reason + "\n"
	d.addDropboxLocked(now, class+"_anr", hdr+"\n"+traces)
	tracePath := "/data/anr/anr_" + now.UTC().Format("2006-01-02-15-04-05.000")
	tracePath = tracePath[:len(tracePath)-4] + "-" + tracePath[len(tracePath)-3:]
	// /data/anr is system-owned: the shell user cannot list or read it (as on a user build).
	_ = d.fs.mkdirAll("/data/anr", 0o775, ownerSystem, now, false)
	_ = d.putSystemFileLocked(tracePath, []byte(traces), 0o600, ownerSystem)
	front := f.kind == faultSystemUIANR || am.topLocked().pkg == f.pkg
	if !front || d.settingLocked("global", "hide_error_dialogs") == "1" || !am.awake {
		d.killProcessLocked(p, now.Add(30*time.Millisecond), "bg anr", false)
		return
	}
	fs.dialogs = append(fs.dialogs, &errDialog{kind: dialogANR, proc: f.pkg, pid: p.pid, label: d.labelLocked(f.pkg), winHash: am.hash(), shownAt: now, focus: -1})
}

// anrTraces is the head of the ART SIGQUIT dump written to /data/anr and
// attached to the dropbox entry ("----- pid N at DATE -----", "Cmd line:",
// the main thread's stack; Runtime::DumpForSigQuit / Thread::Dump).
func anrTraces(p *amProcess, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n----- pid %d at %s -----\n", p.pid, now.UTC().Format("2006-01-02 15:04:05.000000000+0000"))
	fmt.Fprintf(&b, "Cmd line: %s\n", p.pkg)
	b.WriteString("Build fingerprint: 'google/sdk_gphone64_x86_64/emu64xa:14/UE1A.230829.036.A2/11228894:userdebug/dev-keys'\nABI: 'x86_64'\n\n")
	fmt.Fprintf(&b, "\"main\" prio=5 tid=1 Sleeping\n  | group=\"main\" sCount=1 ucsCount=0 flags=1 obj=0x72a3f2d0 self=0x7b6c0d8c7be0\n  | sysTid=%d nice=-10 cgrp=top-app sched=0/0 handle=0x7b6df3e4a4f8\n", p.pid)
	b.WriteString("  at java.lang.Thread.sleep(Native method)\n  at java.lang.Thread.sleep(Thread.java:450)\n  at java.lang.Thread.sleep(Thread.java:355)\n")
	fmt.Fprintf(&b, "  at %s.MainLoop.block(MainLoop.java:17)\n", p.pkg)
	b.WriteString("  at android.os.Handler.handleCallback(Handler.java:958)\n  at android.os.Looper.loop(Looper.java:294)\n  at android.app.ActivityThread.main(ActivityThread.java:8177)\n\n")
	fmt.Fprintf(&b, "----- end %d -----\n", p.pid)
	return b.String()
}

// killProcessLocked ends process p: AM's kill ("Killing PID:PROC/UID (adj N):
// REASON") or, with self, the process's own death seen by AM ("Process PROC
// (pid N) has died: fg  TOP"). Its windows die, its tasks go, its dialogs close.
func (d *Device) killProcessLocked(p *amProcess, t time.Time, reason string, self bool) {
	am := d.am
	if !self {
		adj := 0
		if reason == "crash" {
			adj = 900
		}
		d.logAt(t, bufSystem, pidSystemSrv, tidAMHandler, 'I', "ActivityManager",
			fmt.Sprintf("Killing %d:%s/u0a%d (adj %d): %s", p.pid, p.pkg, p.uid%100000-10000, adj, reason))
	}
	d.logAt(t.Add(time.Millisecond), bufMain, pidZygote64, pidZygote64, 'I', "Zygote", fmt.Sprintf("Process %d exited due to signal 9 (Killed)", p.pid))
	if self {
		d.logAt(t.Add(2*time.Millisecond), bufSystem, pidSystemSrv, tidAMHandler, 'I', "ActivityManager",
			fmt.Sprintf("Process %s (pid %d) has died: fg  TOP", p.pkg, p.pid))
	}
	for _, r := range am.recordsOfLocked(p.pkg) {
		d.logAt(t.Add(2*time.Millisecond), bufSystem, pidSystemSrv, tidBinder, 'I', "WindowManager",
			fmt.Sprintf("WIN DEATH: Window{%s u0 %s/%s}", r.winHash, r.pkg, r.cls))
	}
	d.closeDialogsOfLocked(p.pkg)
	if p.pkg == systemUIPackage || p.pkg == homePackage {
		// Persistent / home processes are restarted at once with a new pid.
		np := am.startProcessLocked(p.pkg, p.uid, t)
		np.started = t
		return
	}
	am.forceStopLocked(p.pkg)
}

// recordsOfLocked lists pkg's activity records, top task first, top record first.
func (am *activityManager) recordsOfLocked(pkg string) []*amRecord {
	var out []*amRecord
	for _, t := range am.tasks {
		if t.home || t.pkg != pkg {
			continue
		}
		for j := len(t.records) - 1; j >= 0; j-- {
			out = append(out, t.records[j])
		}
	}
	return out
}

// removeTasksLocked finishes pkg's activities (the crashed process keeps running).
func (am *activityManager) removeTasksLocked(pkg string) {
	kept := am.tasks[:0]
	for _, t := range am.tasks {
		if t.home || t.pkg != pkg {
			kept = append(kept, t)
		}
	}
	am.tasks = kept
	if top := am.topLocked(); top != nil {
		top.shownAt = am.d.now()
	}
}

func (d *Device) dialogOfLocked(pkg string, pid int) *errDialog {
	for _, dl := range d.faults.dialogs {
		if dl.proc == pkg && dl.pid == pid {
			return dl
		}
	}
	return nil
}

func (d *Device) closeDialogsOfLocked(pkg string) {
	kept := d.faults.dialogs[:0]
	for _, dl := range d.faults.dialogs {
		if dl.proc != pkg {
			kept = append(kept, dl)
		}
	}
	d.faults.dialogs = kept
}

// topDialogLocked is the focused error dialog, nil when none shows.
func (d *Device) topDialogLocked() *errDialog {
	if n := len(d.faults.dialogs); n > 0 {
		return d.faults.dialogs[n-1]
	}
	return nil
}

// dialogActionLocked applies a dialog button (or back / timeout): Close app
// and App info kill the process (AppErrors FORCE_QUIT / APP_INFO;
// killAppAtUsersRequest for an ANR); Wait dismisses the ANR dialog.
func (d *Device) dialogActionLocked(dl *errDialog, action string, t time.Time) {
	p, ok := d.am.procs[dl.proc]
	switch action {
	case actWait:
		d.closeDialogLocked(dl)
	case actClose, actAppInfo:
		d.closeDialogLocked(dl)
		if ok && p.pid == dl.pid {
			reason := "crash"
			if dl.kind == dialogANR {
				reason = "user request after error"
			}
			d.killProcessLocked(p, t, reason, false)
		}
	}
}

// dialogKeyLocked moves the dialog's key focus over its buttons and presses
// the focused one. The first key leaves touch mode and focuses the first
// button without pressing it (hence "KEYCODE_ENTER twice" to dismiss a
// dialog from a script); DPAD_DOWN / TAB then move down, DPAD_UP up, ENTER
// and DPAD_CENTER press.
func (d *Device) dialogKeyLocked(dl *errDialog, code int) {
	buttons := dl.buttons()
	if dl.focus < 0 {
		dl.focus = 0
		return
	}
	switch code {
	case keyDpadDown, keyTab:
		if dl.focus < len(buttons)-1 {
			dl.focus++
		}
	case keyDpadUp:
		if dl.focus > 0 {
			dl.focus--
		}
	case keyEnter, keyDpadCtr:
		d.dialogActionLocked(dl, buttons[dl.focus].id, d.now())
	}
}

func (d *Device) closeDialogLocked(dl *errDialog) {
	kept := d.faults.dialogs[:0]
	for _, x := range d.faults.dialogs {
		if x != dl {
			kept = append(kept, x)
		}
	}
	d.faults.dialogs = kept
}

// ShowSystemUIANR shows the "System UI isn't responding" dialog now, over
// the app in front (what a cold-booted emulator often shows). It is
// dismissed by its buttons: Wait (aerr_wait) or Close app (aerr_close).
func (d *Device) ShowSystemUIANR() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
	d.faults.pending = append(d.faults.pending, pendingFault{at: d.now(), kind: faultSystemUIANR, pkg: systemUIPackage})
	d.advanceLocked()
}

// dialogRoot is the dialog's view hierarchy as uiautomator dumps it (package
// "android"): a centred card with android:id/alertTitle and the buttons of
// app_error_dialog.xml / app_anr_dialog.xml (ids aerr_app_info, aerr_close,
// aerr_wait; texts "App info", "Close app", "Wait").
func (d *Device) dialogRootLocked(dl *errDialog) *Element {
	w, h, dpi := d.displaySizeLocked()
	px := func(n int) int { return (n*dpi + 210) / 420 }
	left, right := px(74), w-px(74)
	rowH := px(147)
	buttons := dl.buttons()
	cardH := px(160) + rowH*len(buttons) + px(40)
	top := (h - cardH) / 2
	title := &Element{Class: "android.widget.TextView", ResourceID: "android:id/alertTitle", Text: dl.text(),
		Bounds: [4]int{left + px(63), top + px(60), right - px(63), top + px(140)}}
	card := &Element{Class: "android.widget.LinearLayout", ResourceID: "android:id/parentPanel",
		Bounds: [4]int{left, top, right, top + cardH}, Children: []*Element{title}}
	y := top + px(160)
	for _, b := range buttons {
		card.Children = append(card.Children, &Element{Class: "android.widget.Button", ResourceID: "android:id/" + b.id, Text: b.text,
			Bounds: [4]int{left, y, right, y + rowH}, Clickable: true, Focusable: true, action: b.id})
		y += rowH
	}
	content := &Element{Class: "android.widget.FrameLayout", ResourceID: "android:id/content",
		Bounds: [4]int{left, top, right, top + cardH}, Children: []*Element{card}}
	return &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{left, top, right, top + cardH}, Children: []*Element{content}}
}

// uuidLocked is a random-looking, deterministic per-device UUID (ErrorId).
func (d *Device) uuidLocked() string {
	a, b, c := d.am.hash(), d.am.hash(), d.am.hash()
	s := fmt.Sprintf("%08s%08s%08s%08s", a, b, c, a)
	return s[:8] + "-" + s[8:12] + "-4" + s[13:16] + "-a" + s[17:20] + "-" + s[20:32]
}
