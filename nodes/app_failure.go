package nodes

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/device/android"
)

// Crash and ANR detection shared by LaunchOrAttach and WaitIdle: a first
// crash shows no dialog (the process just dies), a repeated one shows
// "Application Error: PROC", an ANR in front "Application Not Responding:
// PROC" (crash-anr-evidence.md; the device's reports: device/android).

// AppFailure is the structured crash / ANR block of a LaunchOrAttach or
// WaitIdle output (appFailure; android.AppFailure).
type AppFailure = android.AppFailure

// Sources of AppFailure.Source (android.Source*).
const (
	SourceCrashBuffer     = android.SourceCrashBuffer
	SourceDropbox         = android.SourceDropbox
	SourceProcessGone     = android.SourceProcessGone
	SourceActivityManager = android.SourceActivityManager
	SourceDialog          = android.SourceDialog
)

func ownProcess(proc, pkg string) bool { return android.OwnProcess(proc, pkg) }

// crashEvidence describes the app's crash since the node began
// (android.CrashEvidence).
func (w *appWatch) crashEvidence(ctx context.Context, p Ports) (*AppFailure, error) {
	return android.CrashEvidence(ctx, p.Device, w.pkg, w.pids, w.sinceMillis)
}

// anrEvidence describes the app's ANR shown by dialog d (android.ANREvidence).
func (w *appWatch) anrEvidence(ctx context.Context, p Ports, d parse.ErrorDialog) *AppFailure {
	return android.ANREvidence(ctx, p.Device, w.pkg, d, w.sinceMillis)
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
			if x, y, ok := parse.ElementCenter(src, button); ok {
				cmd = fmt.Sprintf("input tap %d %d", x, y)
				dd.Action = fmt.Sprintf("tap %s (%d,%d)", button, x, y)
			}
		}
	}
	if _, err := android.ShellOut(ctx, p.Device, cmd); err != nil {
		return dd, err
	}
	dd.At = Timestamp(p.Now())
	return dd, nil
}
