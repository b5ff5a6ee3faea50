package nodes

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
)

// Crash and ANR detection shared by LaunchOrAttach and WaitIdle. What a
// device prints, and where, is in ../shared/notes/crash-anr-evidence.md
// (AOSP RuntimeInit, AppErrors, DropBoxManagerService; the captures cited in
// fixtures/captures/SOURCES.md): the FATAL EXCEPTION block goes to the crash
// buffer only, a first crash shows no dialog (the process just dies), a
// repeated one shows "Application Error: PROC", an ANR in front shows
// "Application Not Responding: PROC".

// Sources of AppFailure.Source.
const (
	// SourceCrashBuffer: the AndroidRuntime FATAL EXCEPTION block of
	// `logcat -b crash`.
	SourceCrashBuffer = "crash_buffer"
	// SourceDropbox: a data_app_crash / data_app_anr entry of `dumpsys dropbox`.
	SourceDropbox = "dropbox"
	// SourceProcessGone: the process died and neither the crash buffer nor
	// dropbox said why (a native crash, a kill).
	SourceProcessGone = "process_gone"
	// SourceActivityManager: ActivityManager's "ANR in PROC" log entry.
	SourceActivityManager = "activity_manager_log"
	// SourceDialog: only the error dialog window told.
	SourceDialog = "error_dialog"
)

// AppFailure is the structured crash / ANR block of a LaunchOrAttach or
// WaitIdle output (appFailure): what the device reported about the app
// under test when the node failed with app_crashed or app_not_responding.
type AppFailure struct {
	// Kind is "crash" or "anr".
	Kind string `json:"kind"`
	// Package is the app under test; Process the process the report names
	// (the package, or "pkg:service" for a secondary process).
	Package string `json:"package"`
	Process string `json:"process,omitempty"`
	// PID is the crashed / hung process id (0 when not known).
	PID int `json:"pid,omitempty"`
	// Exception is the thrown class ("java.lang.IllegalStateException"),
	// Message its message, TopFrame the first stack frame in the app's own
	// package ("com.x.HomeActivity.onCreate(HomeActivity.java:42)"); crash only.
	Exception string `json:"exception,omitempty"`
	Message   string `json:"message,omitempty"`
	TopFrame  string `json:"topFrame,omitempty"`
	// Reason is the ANR's annotation ("Input dispatching timed out (…)").
	Reason string `json:"reason,omitempty"`
	// Source says which evidence described it (SourceCrashBuffer, …).
	Source string `json:"source"`
	// LogTime is the device timestamp of the report as printed (logcat
	// "MM-DD HH:MM:SS.mmm", dropbox "yyyy-MM-dd HH:mm:ss"); "" when none.
	LogTime string `json:"logTime,omitempty"`
	// Dialog is the error dialog's window title when one shows.
	Dialog string `json:"dialog,omitempty"`
}

// Summary is the humanReadableFailureSummary of f: "com.x crashed:
// java.lang.IllegalStateException: boom at com.x.HomeActivity.onCreate(…)",
// "com.x is not responding (ANR): Input dispatching timed out (…)".
func (f *AppFailure) Summary() string {
	if f.Kind == "anr" {
		s := f.Package + " is not responding (ANR)"
		if f.Reason != "" {
			s += ": " + f.Reason
		} else if f.Dialog != "" {
			s += ": " + f.Dialog
		}
		return s
	}
	if f.Exception == "" {
		s := f.Package + " crashed: its process"
		if f.PID > 0 {
			s += fmt.Sprintf(" (pid %d)", f.PID)
		}
		if f.Dialog != "" {
			return s + " shows the crash dialog (" + f.Dialog + ")"
		}
		return s + " died without a Java crash report (a native crash or a kill)"
	}
	s := f.Package + " crashed: " + f.Exception
	if f.Message != "" {
		s += ": " + firstLine(f.Message)
	}
	if f.TopFrame != "" {
		s += " at " + f.TopFrame
	}
	return s
}

// Error is the node error of f: app_crashed (retryable as given) or
// app_not_responding (not retryable).
func (f *AppFailure) Error(retryable bool) *agent.Error {
	if f.Kind == "anr" {
		return &agent.Error{ID: agent.ErrAppNotResponding, Msg: f.Summary()}
	}
	return &agent.Error{ID: agent.ErrAppCrashed, Retryable: retryable, Msg: f.Summary()}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// DismissedDialog is a system error dialog (not the app's) a node dismissed
// and carried on: "System UI isn't responding", "Process system isn't
// responding", another app's crash dialog. Listed in the node output's
// dismissedSystemDialogs and logged.
type DismissedDialog struct {
	// Title is the dialog window's title ("Application Not Responding:
	// com.android.systemui"); Process the process it is about.
	Title   string `json:"title"`
	Process string `json:"process"`
	// Kind is "anr" or "crash".
	Kind string `json:"kind"`
	// Action is what was sent: "tap android:id/aerr_wait (540,1210)" or
	// "keyevent KEYCODE_DPAD_DOWN KEYCODE_DPAD_DOWN KEYCODE_ENTER".
	Action string `json:"action"`
	// At is when (ISO-8601 UTC, milliseconds).
	At string `json:"at"`
}

// maxDismissals bounds the dialogs one node dismisses: a dialog that comes
// back every time is left alone after that (the node then ends as it would
// with the dialog up).
const maxDismissals = 4

// DismissSettle is how long a dismissed dialog may still be listed (the
// window manager removes it after the click is handled) before the node
// answers it again: a second tap at the button's place after the dialog
// went would land on the app.
const DismissSettle = time.Second

// appWatch follows the app under test during a node.
type appWatch struct {
	pkg string
	// sinceMillis is the device time (epoch milliseconds) from which crash
	// reports count; 0 = unknown (the whole crash buffer is read).
	sinceMillis int64
	// pids are the app's pids seen during the node.
	pids []int
	// dismissed are the system dialogs dismissed.
	dismissed []DismissedDialog
	gaveUp    bool
	// lastTitle / lastAt: the last dialog dismissed, and when (DismissSettle).
	lastTitle string
	lastAt    time.Time
}

// ownProcess reports whether proc is the app's process (the package, or
// "pkg:name" for a secondary one).
func ownProcess(proc, pkg string) bool {
	return proc == pkg || strings.HasPrefix(proc, pkg+":")
}

// parsePIDs reads `pidof` output ("1234 5678").
func parsePIDs(out string) []int {
	var ps []int
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 && len(ps) < 64 {
			ps = append(ps, n)
		}
	}
	return ps
}

// parseEpochMillis reads `date +%s.%N` output (toybox: epoch seconds, a
// dot, nanoseconds) as epoch milliseconds; a date without %N (printing "N"
// or nothing after the dot) gives whole seconds; 0 when it is not a
// plausible epoch.
func parseEpochMillis(out string) int64 {
	sec, frac, _ := strings.Cut(strings.TrimSpace(out), ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n <= 0 || n > 1e11 {
		return 0
	}
	ms := n * 1000
	if len(frac) >= 3 {
		if f, err := strconv.Atoi(frac[:3]); err == nil && f >= 0 {
			ms += int64(f)
		}
	}
	return ms
}

// logcatSince is logcat's -t argument for sinceMillis ('sssss.mmm').
func (w *appWatch) logcatSince() string {
	if w.sinceMillis <= 0 {
		return ""
	}
	return fmt.Sprintf(" -t '%d.%03d'", w.sinceMillis/1000, w.sinceMillis%1000)
}

func (w *appWatch) notePIDs(ps []int) {
	for _, p := range ps {
		if !slices.Contains(w.pids, p) && len(w.pids) < 64 {
			w.pids = append(w.pids, p)
		}
	}
}

// dialogs looks at the error dialogs of a `dumpsys window` output: the app's
// own ANR / crash dialog is a failure (returned); a focused dialog of another
// process is dismissed (dismissed true: the caller looks again).
func (w *appWatch) dialogs(ctx context.Context, p Ports, sessionID, windowOut string) (f *AppFailure, dismissed bool, err error) {
	for _, d := range parse.ParseErrorDialogs(windowOut) {
		if ownProcess(d.Process, w.pkg) {
			if d.ANR {
				return w.anrEvidence(ctx, p, d), false, nil
			}
			f, err := w.crashEvidence(ctx, p)
			if err != nil {
				return nil, false, err
			}
			f.Dialog = d.Title
			return f, false, nil
		}
	}
	for _, d := range parse.ParseErrorDialogs(windowOut) {
		if ownProcess(d.Process, w.pkg) || !d.Focused {
			continue
		}
		if d.Title == w.lastTitle && p.Now().Sub(w.lastAt) < DismissSettle {
			return nil, false, nil // still going away
		}
		if len(w.dismissed) >= maxDismissals {
			if !w.gaveUp {
				w.gaveUp = true
				p.Logf("%q is up again after %d dismissals: leaving it", d.Title, maxDismissals)
			}
			return nil, false, nil
		}
		dd, err := dismissDialog(ctx, p, sessionID, d)
		if err != nil {
			return nil, false, err
		}
		w.dismissed = append(w.dismissed, dd)
		w.lastTitle, w.lastAt = d.Title, p.Now()
		p.Logf("dismissed the system dialog %q (%s): not the app's", d.Title, dd.Action)
		return nil, true, nil
	}
	return nil, false, nil
}

// crashEvidence describes the app's crash: the newest FATAL EXCEPTION of
// its process in `logcat -d -b crash -v threadtime [-t 'EPOCH.mmm']` (since
// the node began), else the newest data_app_crash dropbox entry of one of
// the pids seen, else only the fact that the process is gone.
func (w *appWatch) crashEvidence(ctx context.Context, p Ports) (*AppFailure, error) {
	f := &AppFailure{Kind: "crash", Package: w.pkg, Process: w.pkg, Source: SourceProcessGone}
	if n := len(w.pids); n > 0 {
		f.PID = w.pids[n-1]
	}
	cmd := "logcat -d -b crash -v threadtime" + w.logcatSince()
	r, err := p.Device.Shell(ctx, cmd)
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return nil, e
		}
	} else {
		var pick *parse.JavaCrash
		for _, c := range parse.ParseFatalExceptions(r.Stdout, w.pkg) {
			if ownProcess(c.Process, w.pkg) {
				pick = &c
			}
		}
		if pick != nil {
			f.Source, f.Process, f.PID, f.LogTime = SourceCrashBuffer, pick.Process, pick.PID, pick.Time
			f.Exception, f.Message, f.TopFrame = pick.Exception, pick.Message, pick.TopFrame
			return f, nil
		}
	}
	if len(w.pids) == 0 {
		return f, nil
	}
	r, err = p.Device.Shell(ctx, "dumpsys dropbox --print data_app_crash")
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return nil, e
		}
		return f, nil
	}
	w.dropboxCrash(f, r.Stdout)
	return f, nil
}

// dropboxCrash fills f from the newest data_app_crash entry of `dumpsys
// dropbox --print data_app_crash` output (out) of one of the pids seen.
func (w *appWatch) dropboxCrash(f *AppFailure, out string) {
	es := parse.ParseDropbox(out)
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if !ownProcess(e.Process(), w.pkg) || !slices.Contains(w.pids, e.PID()) {
			continue
		}
		f.Source, f.Process, f.PID, f.LogTime = SourceDropbox, e.Process(), e.PID(), e.Time
		exc, msg, _ := strings.Cut(e.Exception(), ": ")
		f.Exception, f.Message = exc, msg
		for _, l := range strings.Split(e.Body, "\n") {
			if fr, ok := strings.CutPrefix(strings.TrimSpace(l), "at "); ok && strings.HasPrefix(fr, w.pkg+".") {
				f.TopFrame = fr
				break
			}
		}
		return
	}
}

// anrEvidence describes the app's ANR shown by dialog d: the reason from
// ActivityManager's "ANR in PROC" entry of the system buffer since the node
// began, else the Subject of the newest data_app_anr dropbox entry of the
// process stamped since then. Reading errors leave the dialog as the only evidence.
func (w *appWatch) anrEvidence(ctx context.Context, p Ports, d parse.ErrorDialog) *AppFailure {
	f := &AppFailure{Kind: "anr", Package: w.pkg, Process: d.Process, Source: SourceDialog, Dialog: d.Title}
	cmd := "logcat -d -b system -v threadtime" + w.logcatSince()
	if r, err := p.Device.Shell(ctx, cmd); err == nil {
		var pick *parse.ANRReport
		for _, a := range parse.ParseANRs(r.Stdout) {
			if a.Process == d.Process {
				pick = &a
			}
		}
		if pick != nil {
			f.Source, f.PID, f.Reason, f.LogTime = SourceActivityManager, pick.PID, pick.Reason, pick.Time
			return f
		}
	}
	if r, err := p.Device.Shell(ctx, "dumpsys dropbox --print --file data_app_anr"); err == nil {
		es := parse.ParseDropbox(r.Stdout)
		for i := len(es) - 1; i >= 0; i-- {
			// An entry from before the node (another run's ANR of the same
			// package) is not this one's.
			if w.sinceMillis > 0 && es[i].Millis > 0 && es[i].Millis < w.sinceMillis {
				continue
			}
			if es[i].Process() == d.Process {
				f.Source, f.PID, f.Reason, f.LogTime = SourceDropbox, es[i].PID(), es[i].Headers["Subject"], es[i].Time
				break
			}
		}
	}
	return f
}

var boundsRe = regexp.MustCompile(`bounds="\[(\d+),(\d+)\]\[(\d+),(\d+)\]"`)

// buttonCenter finds the element with resource-id id in a uiautomator page
// source and returns the centre of its bounds.
func buttonCenter(src, id string) (int, int, bool) {
	i := strings.Index(src, `resource-id="`+id+`"`)
	if i < 0 {
		return 0, 0, false
	}
	start := strings.LastIndexByte(src[:i], '<')
	end := strings.IndexByte(src[i:], '>')
	if start < 0 || end < 0 {
		return 0, 0, false
	}
	m := boundsRe.FindStringSubmatch(src[start : i+end])
	if m == nil {
		return 0, 0, false
	}
	var v [4]int
	for k := range v {
		v[k], _ = strconv.Atoi(m[k+1])
	}
	return (v[0] + v[2]) / 2, (v[1] + v[3]) / 2, true
}

// dismissDialog answers a system error dialog the way a user would: "Wait"
// (android:id/aerr_wait) on an ANR dialog, "Close app" (android:id/aerr_close)
// on a crash dialog. With a session, the button is found in the page source
// and tapped (`input tap X Y`, which reaches the focused dialog window on
// any device). Without one, keys: the ANR dialog is not cancelable, so the
// first DPAD key leaves touch mode onto the first button (Close app), the
// second moves to Wait, ENTER presses it (app_anr_dialog.xml order); a crash
// dialog is cancelable, so BACK closes it (CANCEL = force quit of that
// process).
func dismissDialog(ctx context.Context, p Ports, sessionID string, d parse.ErrorDialog) (DismissedDialog, error) {
	dd := DismissedDialog{Title: d.Title, Process: d.Process, Kind: "crash"}
	button := "android:id/aerr_close"
	keys := "KEYCODE_BACK"
	if d.ANR {
		dd.Kind, button, keys = "anr", "android:id/aerr_wait", "KEYCODE_DPAD_DOWN KEYCODE_DPAD_DOWN KEYCODE_ENTER"
	}
	cmd := "input keyevent " + keys
	dd.Action = "keyevent " + keys
	if sessionID != "" && p.Driver != nil {
		if src, err := p.Driver.PageSource(ctx, sessionID); err == nil {
			if x, y, ok := buttonCenter(src, button); ok {
				cmd = fmt.Sprintf("input tap %d %d", x, y)
				dd.Action = fmt.Sprintf("tap %s (%d,%d)", button, x, y)
			}
		}
	}
	if _, err := shellOut(ctx, p.Device, cmd); err != nil {
		return dd, err
	}
	dd.At = Timestamp(p.Now())
	return dd, nil
}
