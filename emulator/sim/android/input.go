package android

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Input injection (`input`, `wm dismiss-keyguard`) and the view the UiAutomator2
// server reads: the focused activity's hierarchy and clicks on it.

func init() {
	registerCommand("input", cmdInput)
	registerWindowCommand("dismiss-keyguard", func(c *Ctx) int {
		c.Device.DismissKeyguard()
		return 0
	})
}

// Key codes (android.view.KeyEvent) the simulator acts on.
const (
	keyHome      = 3
	keyBack      = 4
	keyPower     = 26
	keyMenu      = 82
	keySleep     = 223
	keyWakeup    = 224
	keyAppSwitch = 187
	keyDpadUp    = 19
	keyDpadDown  = 20
	keyDpadCtr   = 23
	keyTab       = 61
	keyEnter     = 66
)

var keyNames = map[string]int{
	"KEYCODE_HOME": keyHome, "KEYCODE_BACK": keyBack, "KEYCODE_POWER": keyPower,
	"KEYCODE_MENU": keyMenu, "KEYCODE_SLEEP": keySleep, "KEYCODE_WAKEUP": keyWakeup,
	"KEYCODE_APP_SWITCH": keyAppSwitch,
	"KEYCODE_DPAD_UP":    keyDpadUp, "KEYCODE_DPAD_DOWN": keyDpadDown, "KEYCODE_DPAD_CENTER": keyDpadCtr,
	"KEYCODE_TAB": keyTab, "KEYCODE_ENTER": keyEnter,
}

// keyCode is KeyEvent.keyCodeFromString as InputShellCommand uses it: a number,
// "KEYCODE_X", or "X"; anything else is KEYCODE_UNKNOWN (0), sent silently.
func keyCode(s string) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	u := strings.ToUpper(s)
	if k, ok := keyNames[u]; ok {
		return k
	}
	if k, ok := keyNames["KEYCODE_"+u]; ok {
		return k
	}
	return 0
}

// cmdInput is `input [SOURCE] keyevent|tap|swipe|text|press …`. Unknown
// commands print "Error: Unknown command: X" on stderr and exit 1; missing
// arguments exit 1.
func cmdInput(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	// Optional source ("touchscreen", "keyboard", …) and -d DISPLAY.
	for len(args) > 0 {
		switch {
		case args[0] == "-d" && len(args) > 1:
			args = args[2:]
			continue
		case isInputSource(args[0]):
			args = args[1:]
			continue
		}
		break
	}
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Error: No command specified")
		return 1
	}
	switch args[0] {
	case "keyevent", "keycombination":
		keys := args[1:]
		for len(keys) > 0 && strings.HasPrefix(keys[0], "--") {
			keys = keys[1:]
		}
		if len(keys) == 0 {
			fmt.Fprintln(c.Stderr, "Error: No key specified")
			return 1
		}
		for _, k := range keys {
			d.pressKey(keyCode(k))
		}
		return 0
	case "tap":
		if len(args) < 3 {
			fmt.Fprintln(c.Stderr, "Error: Invalid arguments for command: tap")
			return 1
		}
		x, err1 := strconv.ParseFloat(args[1], 64)
		y, err2 := strconv.ParseFloat(args[2], 64)
		if err1 != nil || err2 != nil {
			fmt.Fprintf(c.Stderr, "Error: Invalid arguments for command: tap\n")
			return 1
		}
		d.tap(int(x), int(y))
		return 0
	case "swipe", "draganddrop":
		if len(args) < 5 {
			fmt.Fprintf(c.Stderr, "Error: Invalid arguments for command: %s\n", args[0])
			return 1
		}
		var v [4]float64
		for i := range v {
			f, err := strconv.ParseFloat(args[1+i], 64)
			if err != nil {
				fmt.Fprintf(c.Stderr, "Error: Invalid arguments for command: %s\n", args[0])
				return 1
			}
			v[i] = f
		}
		// An upward swipe on the keyguard dismisses it (no credential set),
		// the gesture appium-adb's unlock uses.
		if v[3] < v[1] {
			d.mu.Lock()
			if d.am.awake {
				d.am.keyguard = false
			}
			d.mu.Unlock()
		}
		return 0
	case "text", "press", "roll", "motionevent", "scroll":
		return 0
	}
	fmt.Fprintf(c.Stderr, "Error: Unknown command: %s\n", args[0])
	return 1
}

func isInputSource(s string) bool {
	switch s {
	case "keyboard", "mouse", "joystick", "touchnavigation", "touchpad", "trackball", "stylus", "dpad", "gamepad", "touchscreen", "rotaryencoder":
		return true
	}
	return false
}

// pressKey applies one key press: HOME shows the launcher, BACK finishes the
// top activity, POWER toggles the screen (turning it off locks the keyguard),
// WAKEUP/SLEEP set it, MENU dismisses a keyguard without credential.
func (d *Device) pressKey(code int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
	am := d.am
	if dl := d.topDialogLocked(); dl != nil && am.awake && !am.keyguard {
		switch code {
		case keyBack:
			// The crash dialog is cancelable (CANCEL = force quit); the ANR
			// dialog is not (setCancelable(false)): back does nothing.
			if dl.kind == dialogCrash {
				d.dialogActionLocked(dl, actClose, d.now())
			}
			return
		case keyDpadUp, keyDpadDown, keyTab, keyEnter, keyDpadCtr:
			d.dialogKeyLocked(dl, code)
			return
		}
	}
	switch code {
	case keyPower:
		if am.awake {
			am.awake, am.keyguard = false, true
		} else {
			am.awake = true
		}
	case keyWakeup:
		am.awake = true
	case keySleep:
		am.awake, am.keyguard = false, true
	case keyMenu:
		if am.awake {
			am.keyguard = false
		}
	case keyHome:
		if am.awake && !am.keyguard {
			d.closeSystemDialogsLocked()
			am.goHomeLocked()
		}
	case keyBack:
		if am.awake && !am.keyguard {
			am.backLocked()
		}
	}
}

// closeSystemDialogsLocked is ACTION_CLOSE_SYSTEM_DIALOGS, which HOME sends
// (PhoneWindowManager.startDockOrHome: sendCloseSystemWindows(
// SYSTEM_DIALOG_REASON_HOME_KEY)) before the launcher comes up. Every error
// dialog receives it (BaseErrorDialog registers for it in onStart) and
// calls closeDialog: the crash dialog is cancelable, so cancel, which force
// quits its app; the ANR dialog's closeDialog presses Close app on current
// Android (AppNotRespondingDialog overrides it with FORCE_CLOSE; older
// copies only dismiss the window, kept here below API 33, boundary
// unverified). Sources in fixtures/captures/SOURCES.md.
func (d *Device) closeSystemDialogsLocked() {
	now := d.now()
	for _, dl := range append([]*errDialog(nil), d.faults.dialogs...) {
		if dl.kind == dialogANR && d.APILevel() < 33 {
			d.closeDialogLocked(dl)
			continue
		}
		d.dialogActionLocked(dl, actClose, now)
	}
}

// DismissKeyguard is `wm dismiss-keyguard`: wakes nothing, removes a keyguard
// without credential (the emulator has none).
func (d *Device) DismissKeyguard() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.am.awake {
		d.am.keyguard = false
	}
}

// tap clicks the deepest element of the focused screen whose bounds contain
// (x, y) and follows its OnClick.
func (d *Device) tap(x, y int) {
	d.mu.Lock()
	d.advanceLocked()
	if !d.am.awake || d.am.keyguard {
		d.mu.Unlock()
		return
	}
	rec := d.am.topLocked()
	root := rec.root
	if dl := d.topDialogLocked(); dl != nil {
		// The dialog window has focus and takes the touch.
		root = d.dialogRootLocked(dl)
	}
	d.mu.Unlock()
	if el := hit(root, x, y); el != nil {
		_ = d.Click(el)
	}
}

func hit(e *Element, x, y int) *Element {
	if e == nil {
		return nil
	}
	b := e.Bounds
	if x < b[0] || x >= b[2] || y < b[1] || y >= b[3] {
		return nil
	}
	for i := len(e.Children) - 1; i >= 0; i-- {
		if h := hit(e.Children[i], x, y); h != nil && (h.Clickable || h.OnClick != "") {
			return h
		}
	}
	return e
}

// Foreground returns the focused activity (package id and fully qualified
// class) and a copy of its view hierarchy. While the activity is in its busy
// animation (Busy.AnimateFor, or forever with NeverIdle) the copy carries an
// extra progress text node whose text changes every 100 ms. root is nil for a
// screen without a modelled hierarchy (the launcher).
func (d *Device) Foreground() (pkg, activity string, root *Element) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advanceLocked()
	if dl := d.topDialogLocked(); dl != nil && d.am.awake && !d.am.keyguard {
		// An error dialog (package "android") is the active window.
		return "android", "", d.dialogRootLocked(dl)
	}
	rec := d.am.topLocked()
	now := d.now()
	root = cloneElement(rec.root)
	if root == nil && rec.pkg == homePackage {
		root = d.homeScreenLocked()
	}
	if root != nil && d.am.animatingLocked(rec, now) {
		tick := int(now.Sub(rec.shownAt) / (100 * time.Millisecond))
		w, _, _ := d.displaySizeLocked()
		root.Children = append(root.Children, &Element{
			Class: "android.widget.TextView", ResourceID: "android:id/progress",
			Text:   fmt.Sprintf("Loading %d%%", tick%100),
			Bounds: [4]int{0, root.Bounds[3] - 120, w, root.Bounds[3] - 60},
		})
	}
	return rec.pkg, rec.cls, root
}

func cloneElement(e *Element) *Element {
	if e == nil {
		return nil
	}
	c := *e
	c.Children = make([]*Element, len(e.Children))
	for i, ch := range e.Children {
		c.Children[i] = cloneElement(ch)
	}
	return &c
}

// Click performs el's OnClick: it starts that activity of the focused app
// (pushed onto its task, like startActivity from the app). An element without
// OnClick does nothing. Errors: the activity does not exist (the profile
// validated OnClick targets, so only a removed package triggers it).
func (d *Device) Click(el *Element) error {
	if el != nil && el.action != "" {
		d.mu.Lock()
		defer d.mu.Unlock()
		if dl := d.topDialogLocked(); dl != nil {
			d.dialogActionLocked(dl, el.action, d.now())
		}
		return nil
	}
	if el == nil || el.OnClick == "" {
		return nil
	}
	d.mu.Lock()
	pkg := d.am.topLocked().pkg
	d.mu.Unlock()
	act, _, found := d.activityInfo(pkg, el.OnClick)
	if !found {
		return fmt.Errorf("click: activity %s/%s not found", pkg, el.OnClick)
	}
	uid := d.uidOf(pkg)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.am.topLocked().pkg != pkg {
		return nil // the screen changed meanwhile
	}
	am := d.am
	now := d.now()
	p, ok := am.procs[pkg]
	if !ok {
		p = am.startProcessLocked(pkg, uid, now)
	}
	rec := am.newRecordLocked(pkg, el.OnClick, act, now)
	t := am.tasks[0]
	t.records = append(t.records, rec)
	am.onShownLocked(rec, now, false)
	s := strings.TrimSuffix(strings.TrimPrefix(amIntent{cmpPkg: pkg, cls: el.OnClick, explicit: true}.String(), "Intent { "), " }")
	d.logAt(now, bufSystem, pidSystemSrv, tidBinder, 'I', d.atmTag(), fmt.Sprintf("START u0 {%s} from uid %d", s, uid))
	d.logDisplayedLocked(rec, 210+nodeCount(act.Root)*3, now)
	d.onLaunchLocked(pkg, el.OnClick, p.pid, now, true)
	return nil
}

// DisplaySize is the display in pixels and its density in dpi (`wm size`,
// `wm density`), from the profile.
func (d *Device) DisplaySize() (width, height, densityDpi int) {
	return d.displaySizeLocked()
}

func (d *Device) displaySizeLocked() (int, int, int) {
	return d.profile.DisplayWidth, d.profile.DisplayHeight, d.profile.Density
}
