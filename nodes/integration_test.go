package nodes_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// TestSetupChainOnSimulator runs EnsureDevice, LaunchOrAttach (every mode)
// and WaitIdle against a simulated emulator through the REAL adb server and
// the REAL Appium 3 server with the uiautomator2 driver. Inputs go through
// the schemas in coerce mode, as the daemon will submit them.
func TestSetupChainOnSimulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv := simtest.StartADBServer(t)
	prof := simtest.Profile(t, "default")
	emu, _ := simtest.Launch(t, srv, prof)
	serial := emu.Serial()
	srv.WaitState(t, serial, "device", 10*time.Second)

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
	var progress []string
	p := nodes.Ports{
		Driver:   drv,
		Resolve:  adbdevice.NewResolver(ac, adbdevice.ReconnectGrace),
		Progress: func(l string) { progress = append(progress, l); t.Log(l) },
		Capabilities: func(serial string, port int) (map[string]any, error) {
			return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: port})
		},
	}
	mem := &nodes.MemorySessions{}

	// EnsureDevice: creates a session; the port arrives as a string and the
	// policy in lower case (coerced).
	var ein nodes.EnsureDeviceInput
	cs, err := nodes.DecodeInput(nodes.NodeEnsureDevice, []byte(fmt.Sprintf(`{"runId":"01JRUN","deviceConfiguration":
		{"platformName":"Android","deviceName":%q,"adbServerPort":"%d","bootTimeoutMillis":20000},"driverReusePolicy":"reuse_or_create"}`,
		serial, srv.Port)), nodes.ModeCoerce, &ein)
	if err != nil || len(cs) != 3 {
		t.Fatalf("decode: %v %v", cs, err)
	}
	start := time.Now()
	eout, err := nodes.EnsureDevice(ctx, ein, p, mem)
	if err != nil {
		t.Fatalf("EnsureDevice: %v\n%s", err, ap.LogTail(60))
	}
	t.Logf("EnsureDevice (new session) took %v", time.Since(start).Round(time.Millisecond))
	drc := eout.DeviceRuntimeContext
	if drc.DeviceID != serial || drc.DriverSessionID == "" || drc.HealthProbeStatus != device.Healthy {
		t.Fatalf("context %+v", drc)
	}
	if drc.CapabilitiesEcho["udid"] != serial {
		t.Errorf("capabilitiesEcho %v", drc.CapabilitiesEcho)
	}
	// Appium used our adb server and did not restart it.
	if _, err := ac.ServerVersion(ctx); err != nil {
		t.Errorf("adb server gone after session creation: %v", err)
	}
	if n := len(ap.LogLines("kill-server")); n != 0 {
		t.Errorf("Appium ran kill-server %d times", n)
	}
	ein.DriverReusePolicy = nodes.ReuseOnly
	start = time.Now()
	again, err := nodes.EnsureDevice(ctx, ein, p, mem)
	if err != nil || again.DeviceRuntimeContext.DriverSessionID != drc.DriverSessionID {
		t.Fatalf("REUSE_ONLY: %v %+v", err, again.DeviceRuntimeContext)
	}
	t.Logf("EnsureDevice (reuse) took %v", time.Since(start).Round(time.Millisecond))
	// By model name, through the resolver.
	ein.DeviceConfiguration.DeviceName = prof.Model
	if prof.Model == "" {
		ein.DeviceConfiguration.DeviceName = "sdk_gphone64_x86_64"
	}
	if byName, err := nodes.EnsureDevice(ctx, ein, p, mem); err != nil || byName.DeviceRuntimeContext.DeviceID != serial {
		t.Errorf("by model name %q: %v", ein.DeviceConfiguration.DeviceName, err)
	}

	dev := adbdevice.NewADBDevice(ac, serial)
	lp := p
	lp.Device = dev
	pid := func() string {
		out, err := ac.ShellOutput(ctx, serial, "pidof com.example.app")
		if err != nil && adb.IDOf(err) != adb.IDProcessError {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	launch := func(mode nodes.LaunchAttachMode, act string) (nodes.LaunchOrAttachOutput, error) {
		return nodes.LaunchOrAttach(ctx, nodes.LaunchOrAttachInput{RunID: "01JRUN", DeviceRuntimeContext: drc, LaunchAttachMode: mode,
			LaunchTimeoutMillis:            10000,
			ApplicationUnderTestDescriptor: nodes.ApplicationUnderTestDescriptor{AndroidPackageID: "com.example.app", AndroidLaunchActivityName: act}}, lp)
	}
	if _, err := launch(nodes.AttachOnly, ""); agent.Classify(err).Code != nodes.NotInForeground {
		t.Errorf("ATTACH_ONLY before launch: %v", err)
	}
	lout, err := launch(nodes.LaunchOrAttachMode, "")
	if err != nil {
		t.Fatal(err)
	}
	if fc := lout.ApplicationForegroundContext; fc.CurrentActivityName != "com.example.app.HomeActivity" {
		t.Errorf("foreground %+v", fc)
	}
	pid1 := pid()
	if pid1 == "" {
		t.Fatal("no process after launch")
	}
	if _, err := ac.ShellOutput(ctx, serial, "input keyevent 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := launch(nodes.LaunchOrAttachMode, ""); err != nil {
		t.Fatal(err)
	}
	if got := pid(); got != pid1 {
		t.Errorf("LAUNCH_OR_ATTACH of a running app: pid %s -> %s", pid1, got)
	}
	if out, err := launch(nodes.AttachOnly, ""); err != nil || out.ApplicationForegroundContext.CurrentPackageID != "com.example.app" {
		t.Errorf("ATTACH_ONLY: %v", err)
	}
	if _, err := launch(nodes.ForceRestart, ""); err != nil {
		t.Fatal(err)
	}
	pid2 := pid()
	if pid2 == "" || pid2 == pid1 {
		t.Errorf("FORCE_RESTART: pid %s -> %s", pid1, pid2)
	}
	if _, err := launch(nodes.ForceRestart, ".NoSuchActivity"); agent.Classify(err).ID != agent.ErrActivityNotFound {
		t.Errorf("missing activity: %v", err)
	}

	// WaitIdle on HomeActivity (busy 600 ms after launch), with the hierarchy
	// from the real Appium session.
	if _, err := launch(nodes.ForceRestart, ""); err != nil {
		t.Fatal(err)
	}
	var win nodes.WaitIdleInput
	if _, err := nodes.DecodeInput(nodes.NodeWaitIdle, []byte(`{"runId":"01JRUN",
		"idleHeuristicsConfiguration":{"minQuietMillis":"400","maxWaitMillis":8000}}`), nodes.ModeCoerce, &win); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.DecodeInput(nodes.NodeWaitIdle, []byte(`{"runId":"r","idleHeuristicsConfiguration":{"maxWaitMillis":"soon"}}`),
		nodes.ModeCoerce, &win); err == nil || !strings.Contains(err.Error(), `/idleHeuristicsConfiguration/maxWaitMillis: expected integer, received "soon"`) {
		t.Errorf("impossible input: %v", err)
	}
	win.DeviceRuntimeContext = drc
	win.ApplicationUnderTestDescriptor = &nodes.ApplicationUnderTestDescriptor{AndroidPackageID: "com.example.app"}
	start = time.Now()
	wout, err := nodes.WaitIdle(ctx, win, lp)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("WaitIdle on HomeActivity: %v", err)
	}
	t.Logf("HomeActivity idle after %v: %+v", took.Round(time.Millisecond), wout.UIStabilityAssessment)
	if a := wout.UIStabilityAssessment; a.QuietWindowObservedMillis < 400 || a.NetworkInFlightStatus == nodes.NetworkUnknown {
		t.Errorf("assessment %+v", a)
	}
	if took < 600*time.Millisecond {
		t.Errorf("idle after %v, before the 600 ms busy period ended", took)
	}

	// SpinnerActivity never settles: idle_timeout, returned promptly.
	if _, err := launch(nodes.ForceRestart, ".SpinnerActivity"); err != nil {
		t.Fatal(err)
	}
	maxWait := int64(2000)
	win.IdleHeuristicsConfiguration.MaxWaitMillis = &maxWait
	start = time.Now()
	wout, err = nodes.WaitIdle(ctx, win, lp)
	took = time.Since(start)
	if agent.Classify(err).ID != agent.ErrIdleTimeout {
		t.Fatalf("Spinner: %v", err)
	}
	t.Logf("SpinnerActivity idle_timeout after %v", took.Round(time.Millisecond))
	// Ends at maxWait plus at most the probe in flight (page source + one
	// shell round trip): well before a second maxWait, which a loop that did
	// not watch its budget would take. How close to maxWait it ends is a
	// timing figure, not asserted on a shared machine.
	if took < 2*time.Second || took >= 4*time.Second {
		t.Errorf("idle_timeout after %v, want within [2s, 4s)", took)
	}
	if wout.UIStabilityAssessment == nil || *wout.ErrorID != agent.ErrIdleTimeout {
		t.Errorf("output %+v", wout)
	}
}
