package parse

import (
	"regexp"
	"strconv"
	"strings"
)

// DisplayFocus is the focus state of one display in `dumpsys window displays`.
type DisplayFocus struct {
	DisplayID int // -1 when the output has no display header (dumpsys window windows)
	// CurrentFocus is the focused window's component; zero when
	// "mCurrentFocus=null" or when the focused window is not an activity window
	// (e.g. "Window{… u0 StatusBar}").
	CurrentFocus Component
	// CurrentFocusNull is true for an explicit "mCurrentFocus=null" (nothing
	// focused; also transient during animations: retry briefly).
	CurrentFocusNull bool
	// CurrentFocusWindow is the raw window title ("StatusBar", "pkg/act",
	// "Application Not Responding: pkg").
	CurrentFocusWindow string
	FocusedApp         Component
}

var (
	displayHdrRe = regexp.MustCompile(`^\s*Display: mDisplayId=(\d+)`)
	curFocusRe   = regexp.MustCompile(`mCurrentFocus=(null|Window\{[0-9a-f]+ (?:u\d+ )?([^}]*)\})`)
	focusedAppRe = regexp.MustCompile(`mFocusedApp=(.*)$`)
)

// ParseWindowFocus parses `dumpsys window displays` (API >= 29: one "Display:
// mDisplayId=N" block per display, each with mCurrentFocus / mFocusedApp) and
// `dumpsys window windows` (older, or the global tail of it: mCurrentFocus and
// mFocusedApp without a display header). mFocusedApp forms: "ActivityRecord{h u0
// pkg/act tN}" (Q+) and "AppWindowToken{h token=Token{h ActivityRecord{h u0
// pkg/act tN}}}" (pre-Q). Sources: fixtures/captures/dumpsys-window-windows/*,
// dumpsys-activity-activities/api34.txt (the same DisplayContent.dump text).
func ParseWindowFocus(out string) []DisplayFocus {
	var res []DisplayFocus
	cur := -1 // index in res
	for _, l := range lines(out) {
		if m := displayHdrRe.FindStringSubmatch(l); m != nil {
			id, _ := strconv.Atoi(m[1])
			res = append(res, DisplayFocus{DisplayID: id})
			cur = len(res) - 1
			continue
		}
		cf := curFocusRe.FindStringSubmatch(l)
		fa := focusedAppRe.FindStringSubmatch(strings.TrimSpace(l))
		if cf == nil && fa == nil {
			continue
		}
		if cur < 0 {
			res = append(res, DisplayFocus{DisplayID: -1})
			cur = len(res) - 1
		}
		d := &res[cur]
		if cf != nil {
			if cf[1] == "null" {
				d.CurrentFocusNull = true
			} else {
				d.CurrentFocusWindow = cf[2]
				if c, ok := ParseComponent(cf[2]); ok {
					d.CurrentFocus = c
				}
			}
		}
		if fa != nil {
			if c, ok := componentInRecord(fa[1]); ok {
				d.FocusedApp = c
			}
		}
	}
	return res
}

// Foreground picks the foreground activity from ParseWindowFocus results: the
// first display whose focused window and focused app agree on the package (the
// multi-display intersection); else the first display with a focused activity
// window; else the first focused app. ok is false when nothing is focused
// (mCurrentFocus=null everywhere and no focused app).
func Foreground(ds []DisplayFocus) (Component, bool) {
	for _, d := range ds {
		if !d.CurrentFocus.IsZero() && d.CurrentFocus.Package == d.FocusedApp.Package {
			return d.CurrentFocus, true
		}
	}
	for _, d := range ds {
		if !d.CurrentFocus.IsZero() {
			return d.CurrentFocus, true
		}
	}
	for _, d := range ds {
		if !d.FocusedApp.IsZero() && !d.CurrentFocusNull {
			return d.FocusedApp, true
		}
	}
	return Component{}, false
}

var resumedRe = regexp.MustCompile(`^\s*(?:mResumedActivity|ResumedActivity|topResumedActivity)[:=]\s*(ActivityRecord\{.*)$`)

// ParseResumedActivity parses `dumpsys activity activities` and returns the
// resumed activity: "mResumedActivity: ActivityRecord{…}" (older),
// "ResumedActivity: ActivityRecord{…}" and "topResumedActivity=ActivityRecord{…}"
// (Android 10+; API 34 capture in fixtures/captures/dumpsys-activity-activities).
// The first match from the top wins (the top task is dumped first).
func ParseResumedActivity(out string) (Component, bool) {
	for _, l := range lines(out) {
		if m := resumedRe.FindStringSubmatch(l); m != nil {
			if c, ok := componentInRecord(m[1]); ok {
				return c, true
			}
		}
	}
	return Component{}, false
}

// TopActivity is one "ACTIVITY pkg/act hash pid=N" header of `dumpsys activity top`.
type TopActivity struct {
	Component Component
	PID       int // 0 when the process is not running ("pid=(not running)")
}

var topRe = regexp.MustCompile(`^\s*ACTIVITY (\S+/\S+) [0-9a-f]+ pid=(\d+|\(not running\))`)

// ParseActivityTop parses `dumpsys activity top`; the last ACTIVITY is the top one
// (the output lists tasks bottom to top).
func ParseActivityTop(out string) []TopActivity {
	var res []TopActivity
	for _, l := range lines(out) {
		m := topRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		c, ok := ParseComponent(m[1])
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		res = append(res, TopActivity{Component: c, PID: pid})
	}
	return res
}
