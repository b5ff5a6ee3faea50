package parse

import (
	"strings"
	"time"
)

// IDPermissionError is the standard error id for a SecurityException from `am`.
const IDPermissionError = "permission_error"

// AmStart is the outcome of `am start [-W] …` / `am start-activity -W …`.
type AmStart struct {
	// Status is "ok", "timeout" … (-W only; "" without -W).
	Status string
	// LaunchState is COLD, WARM, HOT, UNKNOWN (visible) or RELAUNCH (-W, API >= 29).
	LaunchState string
	// Activity is the activity on top when the wait ended: not necessarily the one
	// started (see fixtures/captures/am-start-W/api29plus-cold-encapp.txt).
	Activity Component
	// TotalTime and WaitTime are the -W timings; -1 when absent.
	TotalTime time.Duration
	WaitTime  time.Duration
	// Warning holds "Warning: …" lines (e.g. "Activity not started, its current
	// task has been brought to the front"), which are not failures.
	Warning string
	// Complete is true when the output ended with "Complete" (-W).
	Complete bool
}

// ParseAmStart parses `am start` output. It returns an *Error when am printed one:
// "Error: Activity class {…} does not exist." / "Error type 3" / "unable to
// resolve Intent" → activity_not_found; "SecurityException" → permission_error;
// any other "Error:" / "Exception" line → process_error. Sources: -W fields from
// fixtures/captures/am-start-W; error wording "Error type 3" + "Error: Activity
// class {…} does not exist." as noted in fixtures/captures/SOURCES.md.
func ParseAmStart(out string) (AmStart, error) {
	r := AmStart{TotalTime: -1, WaitTime: -1}
	var errLines []string
	for _, l := range lines(out) {
		t := strings.TrimSpace(l)
		switch {
		case t == "Complete":
			r.Complete = true
		case r.setField(t): // a "Name: value" line of -W
		case strings.HasPrefix(t, "Error"), strings.Contains(t, "Exception"):
			errLines = append(errLines, t)
		}
	}
	if len(errLines) == 0 {
		return r, nil
	}
	return r, amStartError(errLines)
}

// amStartFields are the "Name: value" lines of `am start -W`, each with what
// it sets; the first whose prefix a line has wins.
var amStartFields = []struct {
	prefix string
	set    func(r *AmStart, v string)
}{
	{"Status: ", func(r *AmStart, v string) { r.Status = v }},
	{"LaunchState: ", func(r *AmStart, v string) {
		// "UNKNOWN (0)" on API 29+ when the launch was not observed: keep the word.
		if f := strings.Fields(v); len(f) > 0 {
			r.LaunchState = f[0]
		}
	}},
	{"Activity: ", func(r *AmStart, v string) { r.Activity, _ = ParseComponent(v) }},
	{"TotalTime: ", func(r *AmStart, v string) { r.TotalTime = msField(v) }},
	{"WaitTime: ", func(r *AmStart, v string) { r.WaitTime = msField(v) }},
	{"Warning: ", func(r *AmStart, v string) { r.Warning = v }},
}

// setField sets the field a trimmed "Name: value" line names; false when the
// line is none of amStartFields.
func (r *AmStart) setField(t string) bool {
	for _, f := range amStartFields {
		if v, ok := strings.CutPrefix(t, f.prefix); ok {
			f.set(r, v)
			return true
		}
	}
	return false
}

// amStartError classifies the error lines of `am start` (see ParseAmStart):
// its message is the first "Error: …" or "…Exception:" line, else the last line.
func amStartError(errLines []string) *Error {
	all := strings.Join(errLines, "\n")
	msg := errLines[len(errLines)-1]
	for _, e := range errLines {
		if strings.HasPrefix(e, "Error: ") || strings.Contains(e, "Exception:") {
			msg = e
			break
		}
	}
	switch {
	case strings.Contains(all, "does not exist"), strings.Contains(all, "Error type 3"),
		strings.Contains(all, "unable to resolve Intent"):
		return &Error{ID: IDActivityNotFound, Msg: msg}
	case strings.Contains(all, "SecurityException"), strings.Contains(all, "Permission Denial"):
		return &Error{ID: IDPermissionError, Msg: msg}
	}
	return &Error{ID: IDProcessError, Msg: msg}
}

func msField(s string) time.Duration {
	n, ok := atoi64(s)
	if !ok {
		return -1
	}
	return time.Duration(n) * time.Millisecond
}
