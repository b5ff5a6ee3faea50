package android

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// What a device reports about an app's crash or ANR. What a device
// prints, and where, is in ../shared/notes/crash-anr-evidence.md (AOSP
// RuntimeInit, AppErrors, DropBoxManagerService; the captures cited in
// fixtures/captures/SOURCES.md).

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

// OwnProcess reports whether proc is the app's process (the package, or
// "pkg:name" for a secondary one).
func OwnProcess(proc, pkg string) bool {
	return proc == pkg || strings.HasPrefix(proc, pkg+":")
}

// logcatSince is logcat's -t argument for sinceMillis ('sssss.mmm').
func logcatSince(sinceMillis int64) string {
	if sinceMillis <= 0 {
		return ""
	}
	return fmt.Sprintf(" -t '%d.%03d'", sinceMillis/1000, sinceMillis%1000)
}

// CrashEvidence describes the crash of pkg (its pids seen: pids): the newest FATAL EXCEPTION of
// its process in `logcat -d -b crash -v threadtime [-t 'EPOCH.mmm']` (since
// the node began), else the newest data_app_crash dropbox entry of one of
// the pids seen, else only the fact that the process is gone.
func CrashEvidence(ctx context.Context, dev device.Device, pkg string, pids []int, sinceMillis int64) (*AppFailure, error) {
	f := &AppFailure{Kind: "crash", Package: pkg, Process: pkg, Source: SourceProcessGone}
	if n := len(pids); n > 0 {
		f.PID = pids[n-1]
	}
	cmd := "logcat -d -b crash -v threadtime" + logcatSince(sinceMillis)
	r, err := dev.Shell(ctx, cmd)
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return nil, e
		}
	} else {
		var pick *parse.JavaCrash
		for _, c := range parse.ParseFatalExceptions(r.Stdout, pkg) {
			if OwnProcess(c.Process, pkg) {
				pick = &c
			}
		}
		if pick != nil {
			f.Source, f.Process, f.PID, f.LogTime = SourceCrashBuffer, pick.Process, pick.PID, pick.Time
			f.Exception, f.Message, f.TopFrame = pick.Exception, pick.Message, pick.TopFrame
			return f, nil
		}
	}
	if len(pids) == 0 {
		return f, nil
	}
	r, err = dev.Shell(ctx, "dumpsys dropbox --print data_app_crash")
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return nil, e
		}
		return f, nil
	}
	dropboxCrash(f, r.Stdout, pkg, pids)
	return f, nil
}

// dropboxCrash fills f from the newest data_app_crash entry of `dumpsys
// dropbox --print data_app_crash` output (out) of one of the pids seen.
func dropboxCrash(f *AppFailure, out, pkg string, pids []int) {
	es := parse.ParseDropbox(out)
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if !OwnProcess(e.Process(), pkg) || !slices.Contains(pids, e.PID()) {
			continue
		}
		f.Source, f.Process, f.PID, f.LogTime = SourceDropbox, e.Process(), e.PID(), e.Time
		exc, msg, _ := strings.Cut(e.Exception(), ": ")
		f.Exception, f.Message = exc, msg
		for _, l := range strings.Split(e.Body, "\n") {
			if fr, ok := strings.CutPrefix(strings.TrimSpace(l), "at "); ok && strings.HasPrefix(fr, pkg+".") {
				f.TopFrame = fr
				break
			}
		}
		return
	}
}

// ANREvidence describes the ANR of pkg shown by dialog d: the reason from
// ActivityManager's "ANR in PROC" entry of the system buffer since the node
// began, else the Subject of the newest data_app_anr dropbox entry of the
// process stamped since then. Reading errors leave the dialog as the only evidence.
func ANREvidence(ctx context.Context, dev device.Device, pkg string, d parse.ErrorDialog, sinceMillis int64) *AppFailure {
	f := &AppFailure{Kind: "anr", Package: pkg, Process: d.Process, Source: SourceDialog, Dialog: d.Title}
	cmd := "logcat -d -b system -v threadtime" + logcatSince(sinceMillis)
	if r, err := dev.Shell(ctx, cmd); err == nil {
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
	if r, err := dev.Shell(ctx, "dumpsys dropbox --print --file data_app_anr"); err == nil {
		es := parse.ParseDropbox(r.Stdout)
		for i := len(es) - 1; i >= 0; i-- {
			// An entry from before the node (another run's ANR of the same
			// package) is not this one's.
			if sinceMillis > 0 && es[i].Millis > 0 && es[i].Millis < sinceMillis {
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
