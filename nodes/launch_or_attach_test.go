package nodes

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	droid "github.com/screengraph/screengraph-agent/device/android"
)

const demoPkg = "com.example.app"

func launchIn(mode LaunchAttachMode, activity string) LaunchOrAttachInput {
	return LaunchOrAttachInput{RunID: "01JRUN", LaunchAttachMode: mode, LaunchTimeoutMillis: 5000,
		ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{AndroidPackageID: demoPkg, AndroidLaunchActivityName: activity}}
}

func pidof(t *testing.T, d device.Device) string {
	t.Helper()
	r, err := d.Shell(context.Background(), "pidof "+demoPkg)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(r.Stdout)
}

// On the in-process device model: every mode, real dumpsys/am/pm formats.
func TestLaunchOrAttachModesOnModel(t *testing.T) {
	ctx := context.Background()
	d := newModel(t)
	p := Ports{Device: d}

	// Cold launch: the launcher activity is resolved with cmd package resolve-activity.
	out, err := LaunchOrAttach(ctx, launchIn("", ""), p)
	if err != nil {
		t.Fatal(err)
	}
	checkSuccessCommon(t, out.Common, NodeLaunchOrAttach)
	fc := out.ApplicationForegroundContext
	if fc.CurrentPackageID != demoPkg || fc.CurrentActivityName != "com.example.app.HomeActivity" {
		t.Fatalf("foreground %+v", fc)
	}
	if _, err := time.Parse(time.RFC3339Nano, fc.AppBroughtToForegroundTimestamp); err != nil || !strings.HasSuffix(fc.AppBroughtToForegroundTimestamp, "Z") {
		t.Errorf("timestamp %q", fc.AppBroughtToForegroundTimestamp)
	}
	if d.count("cmd package resolve-activity") != 1 || d.count("am start-activity -W -n com.example.app/com.example.app.HomeActivity") != 1 {
		t.Errorf("calls %q", d.calls)
	}
	b, _ := json.Marshal(out)
	if _, err := ValidateOutput(NodeLaunchOrAttach, b, ModeStrict); err != nil {
		t.Errorf("output %s: %v", b, err)
	}
	pid := pidof(t, d)
	if pid == "" {
		t.Fatal("app not running after launch")
	}

	// Already in front: attach, no am start, same process.
	starts := d.count("am start")
	if _, err := LaunchOrAttach(ctx, launchIn(LaunchOrAttachMode, ""), p); err != nil {
		t.Fatal(err)
	}
	if d.count("am start") != starts || pidof(t, d) != pid {
		t.Errorf("attach started an activity or changed the pid")
	}

	// In the background (HOME): brought forward, same process.
	if r, _ := d.Shell(ctx, "input keyevent 3"); r.ExitCode != 0 {
		t.Fatalf("HOME: %+v", r)
	}
	if fg, _, _ := droid.ForegroundActivity(ctx, d); fg.Package == demoPkg {
		t.Fatalf("still in front after HOME: %v", fg)
	}
	if _, err := ATTACHONLY(ctx, p); agent.Classify(err).Code != NotInForeground {
		t.Errorf("ATTACH_ONLY with the app in the background: %v", err)
	}
	out, err = LaunchOrAttach(ctx, launchIn(LaunchOrAttachMode, ".HomeActivity"), p)
	if err != nil {
		t.Fatal(err)
	}
	if out.ApplicationForegroundContext.CurrentPackageID != demoPkg || pidof(t, d) != pid {
		t.Errorf("brought forward: %+v, pid %s -> %s", out.ApplicationForegroundContext, pid, pidof(t, d))
	}

	// ATTACH_ONLY with the app in front.
	if out, err := ATTACHONLY(ctx, p); err != nil || out.ApplicationForegroundContext.CurrentPackageID != demoPkg {
		t.Errorf("ATTACH_ONLY: %v %+v", err, out.ApplicationForegroundContext)
	}

	// FORCE_RESTART: a new process.
	if _, err := LaunchOrAttach(ctx, launchIn(ForceRestart, ""), p); err != nil {
		t.Fatal(err)
	}
	if d.count("am start-activity -W -S ") != 1 {
		t.Errorf("no -S launch: %q", d.calls)
	}
	if np := pidof(t, d); np == "" || np == pid {
		t.Errorf("FORCE_RESTART kept pid %s (now %q)", pid, np)
	}

	// Errors, with am's real wording.
	_, err = LaunchOrAttach(ctx, launchIn(ForceRestart, "com.example.app.MissingActivity"), p)
	wantID(t, err, agent.ErrActivityNotFound, false)
	_, err = LaunchOrAttach(ctx, launchIn(ForceRestart, "com.example.app.DetailsActivity"), p)
	wantID(t, err, agent.ErrPermission, false) // not exported: SecurityException
	in := launchIn(LaunchOrAttachMode, "")
	in.ApplicationUnderTestDescriptor.AndroidPackageID = "com.example.absent"
	out, err = LaunchOrAttach(ctx, in, p)
	wantID(t, err, agent.ErrActivityNotFound, false)
	checkFailureCommon(t, out.Common, agent.ErrActivityNotFound)
	if out.ApplicationForegroundContext != nil {
		t.Error("foreground context on failure")
	}
	_, err = LaunchOrAttach(ctx, launchIn("SOMETIMES", ""), p)
	wantID(t, err, agent.ErrInvalidRequest, false)
	in.ApplicationUnderTestDescriptor.AndroidPackageID = ""
	_, err = LaunchOrAttach(ctx, in, p)
	wantID(t, err, agent.ErrInvalidRequest, false)
}

func ATTACHONLY(ctx context.Context, p Ports) (LaunchOrAttachOutput, error) {
	return LaunchOrAttach(ctx, launchIn(AttachOnly, ""), p)
}

// A device that starts the activity but never shows it: launch_timeout at the bound.
func TestLaunchOrAttachTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		launcher := capture(t, "dumpsys-activity-activities/api34.txt") // launcher3 resumed
		dev := &scriptDevice{serial: "emulator-5554", shell: func(cmd string) (device.ShellResult, error) {
			switch {
			case strings.HasPrefix(cmd, "am start-activity"):
				return device.ShellResult{Stdout: capture(t, "am-start-W/api29plus-cold-encapp.txt")}, nil
			case cmd == "dumpsys activity activities":
				return device.ShellResult{Stdout: launcher}, nil
			}
			return device.ShellResult{}, nil // dumpsys window/top: nothing focused
		}}
		start := time.Now()
		out, err := LaunchOrAttach(context.Background(), launchIn(ForceRestart, ".HomeActivity"), Ports{Device: dev})
		e := wantID(t, err, agent.ErrLaunchTimeout, true)
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("gave up after %v, want the 5 s bound", d)
		}
		if !strings.Contains(e.Error(), "com.android.launcher3/com.android.launcher3.uioverrides.QuickstepLauncher") {
			t.Errorf("message does not name the foreground: %v", e)
		}
		checkFailureCommon(t, out.Common, agent.ErrLaunchTimeout)
		// Polled about every 250 ms.
		if n := dev.count("dumpsys window displays"); n < 18 || n > 22 {
			t.Errorf("%d foreground polls in 5 s", n)
		}
	})
}

// am's own "Error type 3" output (no -W fields) maps to activity_not_found,
// and a shell that cannot run am to process_error.
func TestLaunchOrAttachAmErrors(t *testing.T) {
	for _, c := range []struct {
		out  device.ShellResult
		want agent.ErrorID
	}{
		{device.ShellResult{Stdout: "Starting: Intent { act=android.intent.action.MAIN cat=[android.intent.category.LAUNCHER] cmp=com.example.app/.Nope }\n" +
			"Error type 3\nError: Activity class {com.example.app/com.example.app.Nope} does not exist.\n"}, agent.ErrActivityNotFound},
		{device.ShellResult{Stdout: capture(t, "am-start-errors/api30-not-exported.txt")}, agent.ErrPermission},
		{device.ShellResult{Stderr: "/system/bin/sh: am: inaccessible or not found\n", ExitCode: 127}, agent.ErrProcess},
	} {
		dev := &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
			if strings.HasPrefix(cmd, "am ") {
				return c.out, nil
			}
			return device.ShellResult{}, nil
		}}
		_, err := LaunchOrAttach(context.Background(), launchIn(ForceRestart, ".Nope"), Ports{Device: dev})
		wantID(t, err, c.want, false)
	}
}

// The fallback chain: window focus null -> dumpsys activity activities.
func TestForegroundFallbackChain(t *testing.T) {
	acts := capture(t, "dumpsys-activity-activities/api34.txt")
	dev := &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
		switch cmd {
		case "dumpsys window displays":
			return device.ShellResult{Stdout: "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n  Display: mDisplayId=0\n    mCurrentFocus=null\n"}, nil
		case "dumpsys activity activities":
			return device.ShellResult{Stdout: acts}, nil
		}
		return device.ShellResult{}, nil
	}}
	c, src, err := droid.ForegroundActivity(context.Background(), dev)
	if err != nil || c.Package != "com.android.launcher3" || src != "dumpsys activity activities" {
		t.Errorf("got %v from %q, %v", c, src, err)
	}
	if dev.count("dumpsys activity top") != 0 {
		t.Error("went past a source that answered")
	}
	// Nothing anywhere: zero component, no error.
	empty := &scriptDevice{serial: "s", shell: func(string) (device.ShellResult, error) { return device.ShellResult{}, nil }}
	if c, _, err := droid.ForegroundActivity(context.Background(), empty); err != nil || !c.IsZero() {
		t.Errorf("empty device: %v %v", c, err)
	}
	if empty.count("dumpsys window windows") != 1 || empty.count("dumpsys activity top") != 1 {
		t.Errorf("chain incomplete: %q", empty.calls)
	}
}

func TestParseLauncher(t *testing.T) {
	c, ok := parse.ParseLauncherActivity(capture(t, "dumpsys-package/api34-emulator-adb-installed.txt"), "com.example.foodies")
	if !ok || c != (parse.Component{Package: "com.example.foodies", Activity: "com.example.foodies.MainActivity"}) {
		t.Errorf("got %v %v", c, ok)
	}
	if _, ok := parse.ParseLauncherActivity(capture(t, "dumpsys-package/api34-emulator-adb-installed.txt"), "com.other"); ok {
		t.Error("found a launcher for another package")
	}
	c, ok = parse.ParseResolveActivity("priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=false\ncom.example.app/.HomeActivity\n")
	if !ok || c.String() != "com.example.app/com.example.app.HomeActivity" {
		t.Errorf("got %v", c)
	}
	if _, ok := parse.ParseResolveActivity("No activity found\n"); ok {
		t.Error("parsed No activity found")
	}
	// The dumpsys fallback when resolve-activity is missing (API < 24).
	dump := capture(t, "dumpsys-package/api34-emulator-adb-installed.txt")
	dev := &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
		if strings.HasPrefix(cmd, "cmd package") {
			return device.ShellResult{Stderr: "/system/bin/sh: cmd: not found\n", ExitCode: 127}, nil
		}
		return device.ShellResult{Stdout: dump}, nil
	}}
	c, err := droid.ResolveLauncherActivity(context.Background(), dev, "com.example.foodies")
	if err != nil || c.Activity != "com.example.foodies.MainActivity" {
		t.Errorf("fallback: %v %v", c, err)
	}
}
