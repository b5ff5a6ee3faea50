package android

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/device"
)

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

// DismissDialog answers a system error dialog the way a user would: "Wait"
// (android:id/aerr_wait) on an ANR dialog, "Close app" (android:id/aerr_close)
// on a crash dialog. With a session, the button is found in the page source
// and tapped (`input tap X Y`, which reaches the focused dialog window on
// any device). Without one, keys: the ANR dialog is not cancelable, so the
// first DPAD key leaves touch mode onto the first button (Close app), the
// second moves to Wait, ENTER presses it (app_anr_dialog.xml order); a crash
// dialog is cancelable, so BACK closes it (CANCEL = force quit of that
// process). Errors are the shell's; At is left for the caller to stamp.
func DismissDialog(ctx context.Context, dev device.Device, drv device.Driver, sessionID string, d parse.ErrorDialog) (DismissedDialog, error) {
	dd := DismissedDialog{Title: d.Title, Process: d.Process, Kind: "crash"}
	button := "android:id/aerr_close"
	keys := "KEYCODE_BACK"
	if d.ANR {
		dd.Kind, button, keys = "anr", "android:id/aerr_wait", "KEYCODE_DPAD_DOWN KEYCODE_DPAD_DOWN KEYCODE_ENTER"
	}
	cmd := "input keyevent " + keys
	dd.Action = "keyevent " + keys
	if sessionID != "" && drv != nil {
		if src, err := drv.PageSource(ctx, sessionID); err == nil {
			if x, y, ok := parse.ElementCenter(src, button); ok {
				cmd = fmt.Sprintf("input tap %d %d", x, y)
				dd.Action = fmt.Sprintf("tap %s (%d,%d)", button, x, y)
			}
		}
	}
	if _, err := ShellOut(ctx, dev, cmd); err != nil {
		return dd, err
	}
	return dd, nil
}
