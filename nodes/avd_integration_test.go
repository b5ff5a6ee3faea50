package nodes_test

import (
	"context"
	"encoding/json"
	"os"
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
	"github.com/screengraph/screengraph-agent/emulator"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
)

// avdHost is a host whose emulator binary is the simulated emulator (built
// into <sdk>/emulator/emulator), behind the REAL adb server and the REAL
// Appium 3 server with the uiautomator2 driver; the setup graph gets the
// emulator lifecycle as Ports.Emulators, as the daemon wires it.
type avdHost struct {
	t       *testing.T
	srv     *simtest.ADBServer
	avdHome string
	mgr     *emulator.Manager
	graph   *agent.Graph
	store   *agenttest.Store
	pol     *policy.Policy
	n       int
}

func newAVDHost(t *testing.T) *avdHost {
	ctx := context.Background()
	h := &avdHost{t: t, srv: simtest.StartADBServer(t), avdHome: t.TempDir(), store: agenttest.NewStore(), pol: policy.Default()}
	sdk := simtest.BuildEmulator(t)
	env := append(h.srv.EmulatorEnv(t.TempDir(), h.avdHome), "ANDROID_SDK_ROOT="+sdk, "ANDROID_HOME="+sdk, emulator.EnvCommand+"=")
	h.mgr = emulator.New(emulator.Config{ADBServer: h.srv.Addr(), Env: env, StateDir: t.TempDir()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ins, _ := h.mgr.Instances(ctx)
		for _, in := range ins {
			h.mgr.Stop(ctx, in.Serial)
		}
	})
	ap, err := appium.StartServer(ctx, appium.ServerConfig{ADBServerPort: h.srv.Port, LogFile: filepath.Join(t.TempDir(), "appium.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ap.Stop() })
	drv, err := appium.New(ap.URL, appium.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ac := adb.New(h.srv.Addr())
	h.graph, err = nodes.NewSetupGraph(nodes.SetupDeps{
		Ports: nodes.Ports{Driver: drv, Resolve: adbdevice.NewResolver(ac, adbdevice.ReconnectGrace), Emulators: h.mgr, ADBServerPort: h.srv.Port,
			Capabilities: func(serial string, port int) (map[string]any, error) {
				return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: port})
			}},
		DeviceFor: func(s string) device.Device { return adbdevice.NewADBDevice(ac, s) },
		Sessions:  &nodes.MemorySessions{},
		Progress:  func(node, line string) { t.Logf("%-14s %s", node, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// chainRun is what a run of the setup chain ended with.
type chainRun struct {
	status agent.RunStatus
	ensure nodes.EnsureDeviceOutput
	// failed is EnsureDevice's last node.finished when it failed.
	failed   *agent.NodeFinishedPayload
	attempts int
	nodes    []string
	took     time.Duration
}

// run runs the setup chain naming deviceName under driverReusePolicy
// (NEVER_INSTALL: the AVD's profile preinstalls com.example.app).
func (h *avdHost) run(deviceName string, reuse nodes.DriverReusePolicy) chainRun {
	t := h.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app := map[string]any{"androidPackageId": "com.example.app"}
	input, _ := json.Marshal(map[string]any{
		"ensureDevice": map[string]any{"deviceConfiguration": map[string]any{"platformName": "Android", "deviceName": deviceName,
			"adbServerPort": h.srv.Port, "bootTimeoutMillis": 60000}, "driverReusePolicy": string(reuse)},
		"provisionApp":   map[string]any{"applicationUnderTestDescriptor": app, "installationPolicy": "NEVER_INSTALL"},
		"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": app},
		"waitIdle":       map[string]any{"idleHeuristicsConfiguration": map[string]any{"maxWaitMillis": 10000}},
	})
	h.n++
	run := agent.Run{RunID: "01JAVDRUN" + strings.Repeat("0", 16) + string(rune('A'+h.n)), TenantID: "t", Graph: nodes.SetupGraphName,
		PolicyVersion: h.pol.PolicyVersion, Input: input}
	if err := h.store.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: h.store, Policies: onePolicy{h.pol}, AbandonGrace: time.Second}
	start := time.Now()
	status, err := eng.Run(ctx, run.RunID, h.graph)
	if err != nil {
		t.Fatal(err)
	}
	r := chainRun{status: status, took: time.Since(start)}
	for _, ev := range h.store.AllEvents(run.RunID) {
		if ev.Kind != agent.KindNodeFinished {
			continue
		}
		var p agent.NodeFinishedPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		r.nodes = append(r.nodes, p.NodeName)
		if p.NodeName != nodes.NodeEnsureDevice {
			continue
		}
		r.attempts++
		if err := json.Unmarshal(p.Output, &r.ensure); err != nil {
			t.Fatalf("EnsureDevice output: %v\n%s", err, p.Output)
		}
		if _, err := nodes.ValidateOutput(nodes.NodeEnsureDevice, p.Output, nodes.ModeStrict); err != nil {
			t.Errorf("EnsureDevice output against its schema: %v\n%s", err, p.Output)
		}
		if p.NodeExecutionOutcomeStatus == agent.OutcomeFailure {
			pp := p
			r.failed = &pp
		}
	}
	return r
}

func (h *avdHost) wantFinished(r chainRun, what string) *nodes.EmulatorLifecycle {
	h.t.Helper()
	if r.status != agent.RunFinished {
		sum := ""
		if r.failed != nil {
			sum = deref(r.failed.HumanReadableFailureSummary).(string)
		}
		h.t.Fatalf("%s: run %s after %v (nodes %v): %s", what, r.status, r.took, r.nodes, sum)
	}
	if len(r.nodes) != 4 {
		h.t.Errorf("%s: nodes %v, want the four of the chain", what, r.nodes)
	}
	lc := r.ensure.EmulatorLifecycle
	if lc == nil || r.ensure.DeviceRuntimeContext == nil || lc.Serial != r.ensure.DeviceRuntimeContext.DeviceID {
		h.t.Fatalf("%s: emulatorLifecycle %+v, context %+v", what, lc, r.ensure.DeviceRuntimeContext)
	}
	h.t.Logf("%s: %s in %v: booted=%v mode=%v bootMillis=%v reason=%q", what, lc.Serial, r.took.Round(time.Millisecond),
		lc.Booted, deref(lc.BootMode), deref(lc.BootMillis), lc.ColdBootReason)
	return lc
}

// TestSetupChainBootsAVD: a run naming an AVD that is not running boots it
// (quick boot from default_boot) and runs the chain; the next run reuses it;
// an AVD whose snapshot fails to load is booted cold (reason reported);
// REUSE_ONLY on a stopped AVD fails with device_not_found AVD_NOT_RUNNING,
// once; two CREATE_NEW runs get two -read-only instances; the console's kill
// ends an emulator and it leaves `adb devices`.
func TestSetupChainBootsAVD(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short (a setup chain through a real Appium that boots an AVD); make test runs it")
	}
	h := newAVDHost(t)
	ctx := context.Background()
	simtest.CreateAVD(t, h.avdHome, simtest.AVD{Name: "Pixel_7", Profile: "quickboot"})
	flaky := simtest.CreateAVD(t, h.avdHome, simtest.AVD{Name: "Flaky", Profile: "snapshot-fails"})
	os.MkdirAll(filepath.Join(flaky, "snapshots", "default_boot"), 0o755)
	simtest.CreateAVD(t, h.avdHome, simtest.AVD{Name: "Stopped"})

	// Give Pixel_7 a default_boot snapshot, as a CI cache would: one cold
	// boot with snapshot saving, then the console's kill (which saves it).
	prime, err := h.mgr.Boot(ctx, device.BootRequest{AVD: "Pixel_7", SaveSnapshot: true, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.Stop(ctx, prime.Serial); err != nil {
		t.Fatal(err)
	}

	first := h.wantFinished(h.run("Pixel_7", nodes.ReuseOrCreate), "not running")
	if !first.Booted || deref(first.BootMode) != device.BootQuick || first.ColdBootReason != "" || first.ReadOnly {
		t.Errorf("first run: %+v, want a quick boot", first)
	}
	second := h.wantFinished(h.run("Pixel_7", nodes.ReuseOrCreate), "running")
	if second.Booted || second.Serial != first.Serial || second.BootMode != nil || second.BootMillis != nil {
		t.Errorf("second run: %+v, want %s reused", second, first.Serial)
	}

	cold := h.wantFinished(h.run("Flaky", nodes.ReuseOrCreate), "snapshot fails")
	if !cold.Booted || deref(cold.BootMode) != device.BootCold || !strings.Contains(cold.ColdBootReason, "snapshot failed to load") {
		t.Errorf("snapshot that fails to load: %+v, want a cold boot with the reason", cold)
	}

	r := h.run("Stopped", nodes.ReuseOnly)
	if r.status != agent.RunFailed || r.failed == nil || deref(r.failed.ErrorID) != agent.ErrDeviceNotFound ||
		r.failed.ErrorCode != nodes.AVDNotRunning || deref(r.failed.Retryable) != false || r.attempts != 1 {
		t.Fatalf("REUSE_ONLY on a stopped AVD: %s %+v (attempts %d)", r.status, r.failed, r.attempts)
	}
	if lc := r.ensure.EmulatorLifecycle; lc == nil || lc.Booted || lc.Serial != "" {
		t.Errorf("REUSE_ONLY lifecycle %+v", lc)
	}
	if run, _ := h.mgr.Running(ctx, "Stopped"); len(run) != 0 {
		t.Errorf("REUSE_ONLY booted %q", run)
	}
	t.Logf("REUSE_ONLY: %s", deref(r.failed.HumanReadableFailureSummary))

	a := h.wantFinished(h.run("Pixel_7", nodes.CreateNew), "CREATE_NEW 1")
	b := h.wantFinished(h.run("Pixel_7", nodes.CreateNew), "CREATE_NEW 2")
	if !a.Booted || !b.Booted || !a.ReadOnly || !b.ReadOnly || a.Serial == b.Serial || a.Serial == first.Serial || b.Serial == first.Serial {
		t.Errorf("CREATE_NEW twice: %+v and %+v beside %s", a, b, first.Serial)
	}
	if run, _ := h.mgr.Running(ctx, "Pixel_7"); len(run) != 3 {
		t.Errorf("Pixel_7 instances %q, want 3", run)
	}

	// The console's kill ends one; it leaves `adb devices`.
	c, err := h.mgr.Console(ctx, a.Serial)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.AVDName(ctx); err != nil || n != "Pixel_7" {
		t.Errorf("avd name of %s: %q %v", a.Serial, n, err)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	h.srv.WaitState(t, a.Serial, "", 10*time.Second)
	if out, _, _ := h.srv.Run(t, "devices"); strings.Contains(out, a.Serial) || !strings.Contains(out, b.Serial) {
		t.Errorf("after kill of %s:\n%s", a.Serial, out)
	}
}

// stampDriver is an instant Appium stand-in that records when EnsureDevice
// asked for a session: the moment it had judged the device boot-ready.
type stampDriver struct {
	device.Driver
	at time.Time
}

func (d *stampDriver) CreateSession(context.Context, map[string]any) (device.Session, error) {
	d.at = time.Now()
	return device.Session{ID: "bench", Capabilities: map[string]any{}}, nil
}

func (d *stampDriver) Probe(context.Context, string) (device.Health, map[string]any, error) {
	return device.Healthy, map[string]any{}, nil
}

func (d *stampDriver) DeleteSession(context.Context, string) error { return nil }

// BenchmarkEnsureDeviceBootWait: EnsureDevice booting an AVD (quick and cold,
// as the quickboot profile models them: 400 ms and 4 s to sys.boot_completed=1)
// and the boot wait's overhead: the time from sys.boot_completed=1 (emulator
// start + the profile's boot time; the start is taken when the boot is
// logged, just before the process is spawned, so process start-up counts
// against us) to EnsureDevice having judged the device ready (its
// CreateSession call). The simulator stops the boot animation a tenth of the
// boot later and readiness waits for it; probe-overhead subtracts that.
func BenchmarkEnsureDeviceBootWait(b *testing.B) {
	ctx := context.Background()
	srv := simtest.StartADBServer(b)
	avdHome := b.TempDir()
	sdk := simtest.BuildEmulator(b)
	env := append(srv.EmulatorEnv(b.TempDir(), avdHome), "ANDROID_SDK_ROOT="+sdk, emulator.EnvCommand+"=")
	mgr := emulator.New(emulator.Config{ADBServer: srv.Addr(), Env: env, StateDir: b.TempDir()})
	simtest.CreateAVD(b, avdHome, simtest.AVD{Name: "Bench", Profile: "quickboot"})
	prime, err := mgr.Boot(ctx, device.BootRequest{AVD: "Bench", SaveSnapshot: true, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if err := mgr.Stop(ctx, prime.Serial); err != nil {
		b.Fatal(err)
	}
	ac := adb.New(srv.Addr())
	type sample struct{ took, lag time.Duration }
	res := map[bool][]sample{}
	for i := 0; i < b.N; i++ {
		for _, cold := range []bool{false, true} {
			drv := &stampDriver{}
			var launched time.Time
			p := nodes.Ports{Driver: drv, Resolve: adbdevice.NewResolver(ac, adbdevice.ReconnectGrace), Emulators: mgr, ADBServerPort: srv.Port,
				Progress: func(l string) {
					if strings.HasPrefix(l, "booting AVD") {
						launched = time.Now()
					}
				}}
			in := nodes.EnsureDeviceInput{RunID: "01JBENCH", DriverReusePolicy: nodes.CreateNew,
				DeviceConfiguration: nodes.DeviceConfiguration{DeviceName: "Bench", BootTimeoutMillis: 60000},
				Emulator:            nodes.EmulatorOptions{ColdBoot: cold}}
			start := time.Now()
			out, err := nodes.EnsureDevice(ctx, in, p, &nodes.MemorySessions{})
			if err != nil {
				b.Fatal(err)
			}
			bootTime := 400 * time.Millisecond
			if cold {
				bootTime = 4 * time.Second
			}
			res[cold] = append(res[cold], sample{took: drv.at.Sub(start), lag: drv.at.Sub(launched.Add(bootTime))})
			if err := mgr.Stop(ctx, out.EmulatorLifecycle.Serial); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, cold := range []bool{false, true} {
		name := map[bool]string{false: "quick", true: "cold"}[cold]
		anim := map[bool]time.Duration{false: 40 * time.Millisecond, true: 400 * time.Millisecond}[cold]
		var took, lag, worst time.Duration
		for _, s := range res[cold] {
			took += s.took
			lag += s.lag
			worst = max(worst, s.lag-anim)
		}
		n := time.Duration(len(res[cold]))
		b.ReportMetric(float64((took / n).Milliseconds()), name+"-ensure-ms")
		b.ReportMetric(float64((lag/n).Microseconds())/1000, name+"-ready-lag-ms")
		b.ReportMetric(float64((lag/n-anim).Microseconds())/1000, name+"-probe-overhead-ms")
		b.ReportMetric(float64(worst.Microseconds())/1000, name+"-max-probe-overhead-ms")
	}
}
