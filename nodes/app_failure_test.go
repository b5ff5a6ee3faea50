package nodes

import (
	"context"
	"encoding/json"
	"github.com/screengraph/screengraph-agent/adb/parse"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

func crashModel(t *testing.T, after, times int) *modelDevice {
	return newModelWith(t, func(p *android.Profile) {
		p.Faults.AppCrash = &android.AppCrashFault{Package: demoPkg, Exception: "java.lang.IllegalStateException",
			Message: "boom", AfterMillis: after, Times: times}
	})
}

func validOutput(t *testing.T, node string, out any) {
	t.Helper()
	b, _ := json.Marshal(out)
	if _, err := ValidateOutput(node, b, ModeStrict); err != nil {
		t.Errorf("%s output %s: %v", node, b, err)
	}
}

// A crash at launch (the sim's appCrash fault: FATAL EXCEPTION in the crash
// buffer, the process dies, no dialog for a first crash) is app_crashed,
// retryable, named with exception, message and the app's top frame.
func TestLaunchOrAttachCrashAtLaunchOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := crashModel(t, 0, 0)
		out, err := LaunchOrAttach(context.Background(), launchIn(LaunchOrAttachMode, ""), Ports{Device: d})
		e := wantID(t, err, agent.ErrAppCrashed, true)
		want := "com.example.app crashed: java.lang.IllegalStateException: boom at com.example.app.HomeActivity$1.run(HomeActivity.java:42)"
		if e.Msg != want || out.HumanReadableFailureSummary == nil || *out.HumanReadableFailureSummary != want {
			t.Errorf("summary %q, want %q", e.Msg, want)
		}
		checkFailureCommon(t, out.Common, agent.ErrAppCrashed)
		f := out.AppFailure
		if f == nil || f.Kind != "crash" || f.Source != SourceCrashBuffer || f.PID <= 0 || f.Process != demoPkg ||
			f.Exception != "java.lang.IllegalStateException" || f.Message != "boom" || f.LogTime == "" {
			t.Fatalf("appFailure %+v", f)
		}
		if out.ApplicationForegroundContext != nil {
			t.Errorf("foreground context on failure: %+v", out.ApplicationForegroundContext)
		}
		// The crash buffer was read from the launch on, not whole.
		if d.count("logcat -d -b crash -v threadtime -t '") != 1 {
			t.Errorf("crash buffer reads: %q", d.calls)
		}
		validOutput(t, NodeLaunchOrAttach, out)
	})
}

// faults.appCrash.times 1: the first launch crashes; the retry (attempt 2)
// starts a fresh process (am start -S) and succeeds.
func TestLaunchOrAttachRetryAfterCrashStartsFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := crashModel(t, 0, 1)
		in := launchIn(LaunchOrAttachMode, "")
		in.Attempt = 1
		if _, err := LaunchOrAttach(context.Background(), in, Ports{Device: d}); agent.Classify(err).ID != agent.ErrAppCrashed {
			t.Fatalf("attempt 1: %v", err)
		}
		if d.count("am start-activity -W -S ") != 0 {
			t.Errorf("attempt 1 force-stopped: %q", d.calls)
		}
		time.Sleep(time.Second) // the policy's backoff
		in.Attempt = 2
		out, err := LaunchOrAttach(context.Background(), in, Ports{Device: d})
		if err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if out.ApplicationForegroundContext.CurrentPackageID != demoPkg || out.AppFailure != nil {
			t.Errorf("attempt 2: %+v", out)
		}
		if d.count("am start-activity -W -S ") != 1 {
			t.Errorf("attempt 2 did not start a fresh process: %q", d.calls)
		}
		// The first attempt's crash (a second earlier) is not blamed on the second.
		time.Sleep(5 * time.Second)
		if pidof(t, d) == "" {
			t.Error("app not running after the retry")
		}
	})
}

// A crash while waiting for idle ends WaitIdle as app_crashed (not idle, not
// idle_timeout), not retryable.
func TestWaitIdleCrashWhileWaitingOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := crashModel(t, 300, 0)
		if _, err := LaunchOrAttach(context.Background(), launchIn(LaunchOrAttachMode, ""), Ports{Device: d}); err != nil {
			t.Fatalf("launch: %v", err)
		}
		in := idleIn(400, 5000)
		out, err := WaitIdle(context.Background(), in, Ports{Device: d})
		e := wantID(t, err, agent.ErrAppCrashed, false)
		if !strings.Contains(e.Msg, "java.lang.IllegalStateException: boom at com.example.app.HomeActivity$1.run(") {
			t.Errorf("summary %q", e.Msg)
		}
		if f := out.AppFailure; f == nil || f.Source != SourceCrashBuffer || f.TopFrame != "com.example.app.HomeActivity$1.run(HomeActivity.java:42)" {
			t.Errorf("appFailure %+v", f)
		}
		if out.UIStabilityAssessment != nil {
			t.Errorf("assessment on a crash: %+v", out.UIStabilityAssessment)
		}
		validOutput(t, NodeWaitIdle, out)
	})
}

// The app's ANR dialog (5 s after a hung launch) ends WaitIdle as
// app_not_responding with ActivityManager's reason; a LaunchOrAttach that
// finds it up attaches to nothing: app_not_responding too.
func TestANRDetectedOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModelWith(t, func(p *android.Profile) {
			p.Faults.AppNotResponding = &android.AppANRFault{Package: demoPkg}
		})
		startActivity(t, d, ".SpinnerActivity")
		out, err := WaitIdle(context.Background(), idleIn(400, 8000), Ports{Device: d})
		e := wantID(t, err, agent.ErrAppNotResponding, false)
		if !strings.HasPrefix(e.Msg, "com.example.app is not responding (ANR): Input dispatching timed out (") {
			t.Errorf("summary %q", e.Msg)
		}
		if f := out.AppFailure; f == nil || f.Kind != "anr" || f.Source != SourceActivityManager || f.PID <= 0 ||
			f.Dialog != "Application Not Responding: com.example.app" {
			t.Errorf("appFailure %+v", f)
		}
		validOutput(t, NodeWaitIdle, out)
		lout, err := LaunchOrAttach(context.Background(), launchIn(LaunchOrAttachMode, ""), Ports{Device: d})
		wantID(t, err, agent.ErrAppNotResponding, false)
		if lout.AppFailure == nil || lout.AppFailure.Kind != "anr" {
			t.Errorf("LaunchOrAttach appFailure %+v", lout.AppFailure)
		}
	})
}

// "System UI isn't responding" over a healthy app is not the app's: both
// nodes dismiss it (Wait, by keys without a session) and succeed.
func TestSystemUIANRDismissedOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModel(t)
		if _, err := LaunchOrAttach(context.Background(), launchIn(LaunchOrAttachMode, ""), Ports{Device: d}); err != nil {
			t.Fatal(err)
		}
		d.ShowSystemUIANR()
		out, err := LaunchOrAttach(context.Background(), launchIn(LaunchOrAttachMode, ""), Ports{Device: d})
		if err != nil {
			t.Fatalf("attach under a SystemUI ANR: %v", err)
		}
		if ds := out.DismissedSystemDialogs; len(ds) != 1 || ds[0].Title != "Application Not Responding: com.android.systemui" ||
			ds[0].Kind != "anr" || ds[0].Action != "keyevent KEYCODE_DPAD_DOWN KEYCODE_DPAD_DOWN KEYCODE_ENTER" {
			t.Errorf("dismissed %+v", ds)
		}
		validOutput(t, NodeLaunchOrAttach, out)
		if w, _ := d.Shell(context.Background(), "dumpsys window displays"); strings.Contains(w.Stdout, "Application Not Responding") {
			t.Error("dialog still up")
		}

		d.ShowSystemUIANR()
		in := idleIn(400, 5000)
		wout, err := WaitIdle(context.Background(), in, Ports{Device: d})
		if err != nil {
			t.Fatalf("WaitIdle under a SystemUI ANR: %v", err)
		}
		if len(wout.DismissedSystemDialogs) != 1 || wout.DismissedSystemDialogs[0].Process != "com.android.systemui" {
			t.Errorf("dismissed %+v", wout.DismissedSystemDialogs)
		}
		validOutput(t, NodeWaitIdle, wout)
	})
}

// With a session the Wait button is tapped where the page source puts it.
func TestDismissTapsTheButtonOfThePageSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModel(t)
		startActivity(t, d, ".HomeActivity")
		d.ShowSystemUIANR()
		drv := &fakeDriver{source: func(string, int) (string, error) {
			return `<hierarchy rotation="0"><node index="0" text="Close app" resource-id="android:id/aerr_close" class="android.widget.Button" bounds="[74,1000][1006,1147]" />` +
				`<node index="1" text="Wait" resource-id="android:id/aerr_wait" class="android.widget.Button" bounds="[74,1147][1006,1294]" /></hierarchy>`, nil
		}}
		in := launchIn(LaunchOrAttachMode, "")
		in.DeviceRuntimeContext = &DeviceRuntimeContext{DriverSessionID: "s1"}
		out, err := LaunchOrAttach(context.Background(), in, Ports{Device: d, Driver: drv})
		if err != nil {
			t.Fatal(err)
		}
		if ds := out.DismissedSystemDialogs; len(ds) != 1 || ds[0].Action != "tap android:id/aerr_wait (540,1220)" {
			t.Errorf("dismissed %+v", ds)
		}
		if d.count("input tap 540 1220") != 1 {
			t.Errorf("calls %q", d.calls)
		}
	})
}

func TestCrashEvidenceParsing(t *testing.T) {
	if got := parse.ParseEpochMillis("1795248000.123456789\n"); got != 1795248000123 {
		t.Errorf("parseEpochMillis %d", got)
	}
	if got := parse.ParseEpochMillis("1795248000.N\n"); got != 1795248000000 {
		t.Errorf("without %%N: %d", got)
	}
	if got := parse.ParseEpochMillis("date: bad format\n"); got != 0 {
		t.Errorf("garbage: %d", got)
	}
	if ps := parse.ParsePIDs("1234 5678\n"); len(ps) != 2 || ps[1] != 5678 {
		t.Errorf("pids %v", ps)
	}
	if !ownProcess("com.example.app:remote", demoPkg) || ownProcess("com.example.apple", demoPkg) {
		t.Error("ownProcess")
	}
	f := &AppFailure{Kind: "crash", Package: demoPkg, PID: 42}
	if s := f.Summary(); s != "com.example.app crashed: its process (pid 42) died without a Java crash report (a native crash or a kill)" {
		t.Errorf("summary %q", s)
	}
}

// Detection on real captures (fixtures/captures/SOURCES.md, "Crash and ANR
// evidence"): the crash buffer of an Android 11 crash, a data_app_crash
// dropbox entry when the crash buffer has nothing, and the focused dialog
// lines of a SystemUI ANR and of the app's own crash dialog.
func TestAppWatchOnCaptures(t *testing.T) {
	ctx := context.Background()
	logcat := capture(t, "logcat/api30-threadtime-crash-no-dialog.txt")
	dropbox := capture(t, "dumpsys-dropbox/api34plus-print-data_app_crash-trimmed.txt")
	answer := map[string]string{}
	dev := &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
		for prefix, out := range answer {
			if strings.HasPrefix(cmd, prefix) {
				return device.ShellResult{Stdout: out}, nil
			}
		}
		return device.ShellResult{}, nil
	}}
	p := Ports{Device: dev}

	answer["logcat -d -b crash"] = logcat
	w := &appWatch{pkg: "com.example.safsumple", sinceMillis: 1_700_000_000_000}
	f, err := w.crashEvidence(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if f.Source != SourceCrashBuffer || f.PID != 10130 || f.Exception != "android.content.ActivityNotFoundException" ||
		f.TopFrame != "com.example.safsumple.FirstFragment.openSAF(FirstFragment.kt:63)" || f.LogTime != "12-05 14:51:57.082" {
		t.Errorf("crash buffer evidence %+v", f)
	}
	if want := "com.example.safsumple crashed: android.content.ActivityNotFoundException: No Activity found to handle Intent { act=android.intent.action.CREATE_DOCUMENT typ=text/* (has extras) } at com.example.safsumple.FirstFragment.openSAF(FirstFragment.kt:63)"; f.Summary() != want {
		t.Errorf("summary %q", f.Summary())
	}
	if !slices.Contains(dev.calls, "logcat -d -b crash -v threadtime -t '1700000000.000'") {
		t.Errorf("calls %q", dev.calls)
	}
	// Another app's crash in the buffer is not this app's.
	w = &appWatch{pkg: "com.example.other"}
	if f, _ := w.crashEvidence(ctx, p); f.Source != SourceProcessGone || f.Exception != "" {
		t.Errorf("another app's crash blamed: %+v", f)
	}

	// Nothing in the crash buffer: the dropbox entry of a pid seen.
	answer["logcat -d -b crash"] = ""
	answer["dumpsys dropbox --print data_app_crash"] = dropbox
	w = &appWatch{pkg: "com.harnessplayground", pids: []int{586}}
	if f, _ = w.crashEvidence(ctx, p); f.Source != SourceDropbox || f.PID != 586 || f.Exception != "java.lang.RuntimeException" ||
		f.Message != "Intentional asynchronous Kotlin crash" ||
		f.TopFrame != "com.harnessplayground.PlaygroundCrashModule.crashFromKotlinAsync(PlaygroundCrashModule.kt:44)" {
		t.Errorf("dropbox evidence %+v", f)
	}
	// A dropbox entry of a pid never seen (an older run) is not blamed.
	w = &appWatch{pkg: "com.harnessplayground", pids: []int{587}}
	if f, _ = w.crashEvidence(ctx, p); f.Source != SourceProcessGone {
		t.Errorf("stale dropbox entry blamed: %+v", f)
	}

	// "System UI isn't responding" focused: dismissed with keys, no failure.
	w = &appWatch{pkg: "com.example.app"}
	dev.calls = nil
	f, dismissed, err := w.dialogs(ctx, p, "", capture(t, "dumpsys-window-dialogs/api28-focus-anr-systemui.txt"))
	if err != nil || f != nil || !dismissed || len(w.dismissed) != 1 || w.dismissed[0].Process != "com.android.systemui" {
		t.Errorf("SystemUI ANR: %+v %v %v %+v", f, dismissed, err, w.dismissed)
	}
	if !slices.Contains(dev.calls, "input keyevent KEYCODE_DPAD_DOWN KEYCODE_DPAD_DOWN KEYCODE_ENTER") {
		t.Errorf("calls %q", dev.calls)
	}
	// Still listed right after: left to go away (DismissSettle), not answered twice.
	if f, dismissed, err := w.dialogs(ctx, p, "", capture(t, "dumpsys-window-dialogs/api28-focus-anr-systemui.txt")); f != nil || dismissed || err != nil ||
		len(w.dismissed) != 1 {
		t.Errorf("dismissed again at once: %v %v %+v", dismissed, err, w.dismissed)
	}
	// The app's own crash dialog is its crash.
	w = &appWatch{pkg: "com.huanhailiuxin.jet2020"}
	f, dismissed, err = w.dialogs(ctx, p, "", capture(t, "dumpsys-window-dialogs/focus-application-error.txt"))
	if err != nil || dismissed || f == nil || f.Kind != "crash" || f.Dialog != "Application Error: com.huanhailiuxin.jet2020" {
		t.Errorf("own crash dialog: %+v %v %v", f, dismissed, err)
	}
	// After maxDismissals the dialog is left alone.
	w = &appWatch{pkg: "com.example.app", dismissed: make([]DismissedDialog, maxDismissals)}
	if _, dismissed, _ := w.dialogs(ctx, p, "", capture(t, "dumpsys-window-dialogs/api28-focus-anr-systemui.txt")); dismissed {
		t.Error("dismissed beyond maxDismissals")
	}
}
