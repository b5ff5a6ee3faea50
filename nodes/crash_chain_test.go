package nodes_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
)

// TestSetupChainCrashAndANR runs the setup graph through the engine against
// simulated emulators behind the REAL adb server, with the REAL Appium 3
// server (uiautomator2) for the sessions, one emulator per case:
//   - appCrash at launch, every launch: FAILED app_crashed after one retry
//     (the default policy), retryable on the first attempt and not on the
//     second, the summary naming exception, message and top frame;
//   - appCrash at launch once (times 1): the retry, in a fresh process, finishes;
//   - appNotResponding on a screen that never settles: FAILED
//     app_not_responding in WaitIdle (not idle_timeout);
//   - "System UI isn't responding" over the healthy app: dismissed (Wait
//     tapped where Appium's page source puts it), FINISHED.
func TestSetupChainCrashAndANR(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short (setup chains through a real Appium to a crash and an ANR); make test runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	srv := simtest.StartADBServer(t)
	ap, err := appium.StartServer(ctx, appium.ServerConfig{ADBServerPort: srv.Port, LogFile: filepath.Join(t.TempDir(), "appium.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Stop()
	drv, err := appium.New(ap.URL, appium.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ac := adb.New(srv.Addr())
	pol := policy.Default()
	pol.Retries.InitialBackoff, pol.Retries.MaxBackoff = policy.Duration(time.Second), policy.Duration(time.Second)
	pol.Idle.MaxWaitMillis = 9000
	pol.InstallationPolicy = policy.InstallNever // com.example.app is preinstalled
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}

	type finished struct {
		node      string
		attempt   int
		errorID   agent.ErrorID
		retryable bool
		summary   string
		output    string
	}
	run := func(t *testing.T, edit func(*android.Profile), activity string, before func(*android.Device)) (agent.RunStatus, []finished) {
		t.Helper()
		prof := simtest.Profile(t, "default")
		if edit != nil {
			edit(&prof)
		}
		emu, dev := simtest.Launch(t, srv, prof)
		serial := emu.Serial()
		srv.WaitState(t, serial, "device", 10*time.Second)
		if before != nil {
			before(dev)
		}
		g, err := nodes.NewSetupGraph(nodes.SetupDeps{
			Ports: nodes.Ports{Driver: drv, Resolve: adbdevice.NewResolver(ac, adbdevice.ReconnectGrace), ADBServerPort: srv.Port,
				Capabilities: func(serial string, port int) (map[string]any, error) {
					return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: port})
				}},
			DeviceFor: func(s string) device.Device { return adbdevice.NewADBDevice(ac, s) },
			Sessions:  &nodes.MemorySessions{},
			Progress:  func(node, line string) { t.Logf("%s: %s", node, line) },
		})
		if err != nil {
			t.Fatal(err)
		}
		app := map[string]any{"androidPackageId": "com.example.app"}
		if activity != "" {
			app["androidLaunchActivityName"] = activity
		}
		input, _ := json.Marshal(map[string]any{
			"ensureDevice":   map[string]any{"deviceConfiguration": map[string]any{"platformName": "Android", "deviceName": serial}},
			"provisionApp":   map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app"}},
			"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": app},
			"waitIdle":       map[string]any{},
		})
		st := agenttest.NewStore()
		r := agent.Run{RunID: "01JCRASH" + strings.Repeat("0", 18), TenantID: "t", Graph: nodes.SetupGraphName, Serial: serial,
			PolicyVersion: pol.PolicyVersion, Input: input}
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		eng := &agent.Engine{Store: st, Policies: onePolicy{pol}, AbandonGrace: time.Second}
		status, err := eng.Run(ctx, r.RunID, g)
		if err != nil {
			t.Fatalf("engine: %v\n%s", err, ap.LogTail(40))
		}
		var fs []finished
		for _, p := range nodeFinished(t, st, r.RunID) {
			f := finished{node: p.NodeName, attempt: p.Attempt, output: string(p.Output)}
			if p.ErrorID != nil {
				f.errorID, f.retryable, f.summary = *p.ErrorID, *p.Retryable, *p.HumanReadableFailureSummary
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			t.Logf("finished %s attempt %d: %q %q", f.node, f.attempt, f.errorID, f.summary)
		}
		return status, fs
	}
	crash := func(times int) func(*android.Profile) {
		return func(p *android.Profile) {
			p.Faults.AppCrash = &android.AppCrashFault{Package: "com.example.app", Exception: "java.lang.IllegalStateException",
				Message: "boom", Times: times}
		}
	}

	t.Run("crash at every launch", func(t *testing.T) {
		status, fs := run(t, crash(0), "", nil)
		var launches []finished
		for _, f := range fs {
			if f.node == nodes.NodeLaunchOrAttach {
				launches = append(launches, f)
			}
		}
		if status != agent.RunFailed || len(launches) != 2 {
			t.Fatalf("status %s, %d LaunchOrAttach attempts (want FAILED after 2)", status, len(launches))
		}
		want := "com.example.app crashed: java.lang.IllegalStateException: boom at com.example.app.HomeActivity$1.run(HomeActivity.java:42)"
		for i, f := range launches {
			// Retryable on the first attempt, not on the last.
			if f.errorID != agent.ErrAppCrashed || f.summary != want || f.retryable != (i == 0) {
				t.Errorf("attempt %d: %s retryable %v %q", i+1, f.errorID, f.retryable, f.summary)
			}
		}
		var out nodes.LaunchOrAttachOutput
		if err := json.Unmarshal([]byte(launches[1].output), &out); err != nil {
			t.Fatal(err)
		}
		if f := out.AppFailure; f == nil || f.Source != nodes.SourceCrashBuffer || f.Exception != "java.lang.IllegalStateException" ||
			f.Message != "boom" || f.TopFrame == "" || f.PID <= 0 {
			t.Errorf("appFailure %+v", f)
		}
	})
	t.Run("crash at the first launch only", func(t *testing.T) {
		status, fs := run(t, crash(1), "", nil)
		if status != agent.RunFinished {
			t.Fatalf("status %s", status)
		}
		var attempts []string
		for _, f := range fs {
			if f.node == nodes.NodeLaunchOrAttach {
				attempts = append(attempts, string(f.errorID))
			}
		}
		if len(attempts) != 2 || attempts[0] != string(agent.ErrAppCrashed) || attempts[1] != "" {
			t.Errorf("LaunchOrAttach attempts %q, want app_crashed then success", attempts)
		}
	})
	t.Run("ANR while waiting for idle", func(t *testing.T) {
		status, fs := run(t, func(p *android.Profile) {
			p.Faults.AppNotResponding = &android.AppANRFault{Package: "com.example.app"}
		}, ".SpinnerActivity", nil)
		last := fs[len(fs)-1]
		if status != agent.RunFailed || last.node != nodes.NodeWaitIdle || last.errorID != agent.ErrAppNotResponding || last.retryable {
			t.Fatalf("status %s, last %+v", status, last)
		}
		if !strings.HasPrefix(last.summary, "com.example.app is not responding (ANR): Input dispatching timed out (") {
			t.Errorf("summary %q", last.summary)
		}
	})
	t.Run("SystemUI ANR over a healthy app", func(t *testing.T) {
		status, fs := run(t, nil, "", func(d *android.Device) { d.ShowSystemUIANR() })
		if status != agent.RunFinished {
			t.Fatalf("status %s", status)
		}
		var dismissed []nodes.DismissedDialog
		for _, f := range fs {
			var o struct {
				D []nodes.DismissedDialog `json:"dismissedSystemDialogs"`
			}
			_ = json.Unmarshal([]byte(f.output), &o)
			dismissed = append(dismissed, o.D...)
		}
		if len(dismissed) != 1 || dismissed[0].Title != "Application Not Responding: com.android.systemui" ||
			!strings.HasPrefix(dismissed[0].Action, "tap android:id/aerr_wait (") {
			t.Errorf("dismissed %+v", dismissed)
		}
	})
}
