package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	droid "github.com/screengraph/screengraph-agent/device/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// bootedDevice answers the boot probe like a booted API 33 emulator: the
// combined getprop form prints "1\n1\nstopped" (android-recipes.md), then the
// marker line, then `service list` (a real capture). bootAfter > 0 keeps
// sys.boot_completed empty and the boot animation running for that many
// probes; bootAfter < 0 never boots.
func bootedDevice(t *testing.T, bootAfter int) *scriptDevice {
	services := capture(t, "service-list/api33-emulator.txt")
	probes := 0
	d := &scriptDevice{serial: "emulator-5554"}
	d.shell = func(cmd string) (device.ShellResult, error) {
		if cmd != droid.BootProbe {
			t.Errorf("unexpected shell %q", cmd)
			return device.ShellResult{ExitCode: 127}, nil
		}
		probes++
		props := "1\n1\nstopped\n"
		if bootAfter < 0 || probes <= bootAfter {
			props = "\n\nrunning\n"
		}
		return device.ShellResult{Stdout: props + droid.BootSplit + "\n" + services}, nil
	}
	return d
}

func ensureIn(policy DriverReusePolicy) EnsureDeviceInput {
	return EnsureDeviceInput{RunID: "01JRUN", DeviceConfiguration: DeviceConfiguration{PlatformName: "android",
		DeviceName: "emulator-5554", ADBServerPort: 5038, BootTimeoutMillis: 3000}, DriverReusePolicy: policy}
}

func TestEnsureDeviceCreatesSessionWithSharedADBCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := bootedDevice(t, 3)
		drv := &fakeDriver{}
		mem := &MemorySessions{}
		var lines []string
		p := Ports{Device: dev, Driver: drv, Progress: func(l string) { lines = append(lines, l) },
			Capabilities: func(serial string, port int) (map[string]any, error) {
				// A builder that tries to override what EnsureDevice must control.
				return map[string]any{"appium:udid": "other", "appium:suppressKillServer": false, "appium:noReset": true,
					"appium:systemPort": 8201}, nil
			}}
		start := time.Now()
		out, err := EnsureDevice(context.Background(), ensureIn(""), p, mem)
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 3*BootPollInterval {
			t.Errorf("boot wait %v, want 3 polls of %v", waited, BootPollInterval)
		}
		checkSuccessCommon(t, out.Common, NodeEnsureDevice)
		drc := out.DeviceRuntimeContext
		if drc.DriverSessionID != "session-a" || drc.DeviceID != "emulator-5554" || drc.HealthProbeStatus != device.Healthy {
			t.Errorf("context %+v", drc)
		}
		if len(drv.created) != 1 {
			t.Fatalf("created %d sessions", len(drv.created))
		}
		c := drv.created[0]
		if c["appium:udid"] != "emulator-5554" || c["appium:suppressKillServer"] != true || c["appium:adbPort"] != 5038 ||
			c["appium:noReset"] != true || c["appium:systemPort"] != 8201 || c["platformName"] != "Android" ||
			c["appium:automationName"] != "UiAutomator2" {
			t.Errorf("capabilities %v", c)
		}
		if drc.CapabilitiesEcho["udid"] != "emulator-5554" {
			t.Errorf("capabilitiesEcho %v", drc.CapabilitiesEcho)
		}
		if id, _ := mem.Get(context.Background(), "emulator-5554"); id != "session-a" {
			t.Errorf("memory holds %q", id)
		}
		if len(lines) == 0 {
			t.Error("no progress lines")
		}
		// The output validates against its schema.
		b, _ := json.Marshal(out)
		if _, err := ValidateOutput(NodeEnsureDevice, b, ModeStrict); err != nil {
			t.Errorf("output %s: %v", b, err)
		}
	})
}

func TestEnsureDeviceReusePolicies(t *testing.T) {
	ctx := context.Background()
	setup := func(h device.Health, udid string) (*fakeDriver, *MemorySessions) {
		drv := &fakeDriver{live: map[string]map[string]any{"old": {"udid": udid, "platformName": "Android"}},
			health: map[string]device.Health{"old": h}, next: 1}
		mem := &MemorySessions{}
		mem.Put(ctx, "emulator-5554", "old")
		return drv, mem
	}
	t.Run("REUSE_OR_CREATE healthy", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5554")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "old" || len(drv.created) != 0 {
			t.Fatalf("err %v, out %+v, created %d", err, out.DeviceRuntimeContext, len(drv.created))
		}
		if out.DeviceRuntimeContext.CapabilitiesEcho["udid"] != "emulator-5554" {
			t.Errorf("echo %v", out.DeviceRuntimeContext.CapabilitiesEcho)
		}
	})
	t.Run("REUSE_OR_CREATE degraded is reused", func(t *testing.T) {
		drv, mem := setup(device.Degraded, "emulator-5554")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "old" || out.DeviceRuntimeContext.HealthProbeStatus != device.Degraded {
			t.Fatalf("err %v, out %+v", err, out.DeviceRuntimeContext)
		}
	})
	t.Run("REUSE_OR_CREATE unhealthy is replaced", func(t *testing.T) {
		drv, mem := setup(device.Unhealthy, "emulator-5554")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "session-b" || len(drv.created) != 1 {
			t.Fatalf("err %v, out %+v", err, out.DeviceRuntimeContext)
		}
		if id, _ := mem.Get(ctx, "emulator-5554"); id != "session-b" {
			t.Errorf("memory %q", id)
		}
	})
	t.Run("REUSE_OR_CREATE gone session is replaced", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5554")
		delete(drv.live, "old")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "session-b" {
			t.Fatalf("err %v, out %+v", err, out.DeviceRuntimeContext)
		}
	})
	t.Run("session of another device is not reused", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5556")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "session-b" {
			t.Fatalf("err %v, out %+v", err, out.DeviceRuntimeContext)
		}
	})
	t.Run("CREATE_NEW deletes the remembered one", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5554")
		out, err := EnsureDevice(ctx, ensureIn(CreateNew), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "session-b" || len(drv.deleted) != 1 || drv.deleted[0] != "old" {
			t.Fatalf("err %v, out %+v, deleted %v", err, out.DeviceRuntimeContext, drv.deleted)
		}
	})
	t.Run("REUSE_ONLY live", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5554")
		out, err := EnsureDevice(ctx, ensureIn(ReuseOnly), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if err != nil || out.DeviceRuntimeContext.DriverSessionID != "old" {
			t.Fatalf("err %v, out %+v", err, out.DeviceRuntimeContext)
		}
	})
	t.Run("REUSE_ONLY nothing remembered", func(t *testing.T) {
		drv := &fakeDriver{}
		out, err := EnsureDevice(ctx, ensureIn(ReuseOnly), Ports{Device: bootedDevice(t, 0), Driver: drv}, &MemorySessions{})
		e := wantID(t, err, agent.ErrInvalidRequest, false)
		if e.Code != NoReusableSession || len(drv.created) != 0 || out.DeviceRuntimeContext != nil {
			t.Errorf("err %v created %d", e, len(drv.created))
		}
		checkFailureCommon(t, out.Common, agent.ErrInvalidRequest)
	})
	t.Run("REUSE_ONLY dead session", func(t *testing.T) {
		drv, mem := setup(device.Unhealthy, "emulator-5554")
		_, err := EnsureDevice(ctx, ensureIn(ReuseOnly), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		if e := wantID(t, err, agent.ErrInvalidRequest, false); e.Code != NoReusableSession || len(drv.created) != 0 {
			t.Errorf("err %v", e)
		}
		if id, _ := mem.Get(ctx, "emulator-5554"); id != "" {
			t.Errorf("dead session still remembered: %q", id)
		}
	})
	t.Run("Appium unreachable while probing", func(t *testing.T) {
		drv, mem := setup(device.Healthy, "emulator-5554")
		drv.probeErr = agent.Errorf(agent.ErrAppiumUnreachable, "connection refused")
		_, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, mem)
		wantID(t, err, agent.ErrAppiumUnreachable, true)
	})
	t.Run("session_create_failed", func(t *testing.T) {
		drv := &fakeDriver{createErr: &agent.Error{ID: agent.ErrSessionCreateFailed, Code: "session not created", Retryable: true}}
		out, err := EnsureDevice(ctx, ensureIn(ReuseOrCreate), Ports{Device: bootedDevice(t, 0), Driver: drv}, &MemorySessions{})
		wantID(t, err, agent.ErrSessionCreateFailed, true)
		checkFailureCommon(t, out.Common, agent.ErrSessionCreateFailed)
	})
	t.Run("unknown policy", func(t *testing.T) {
		_, err := EnsureDevice(ctx, ensureIn("SOMETIMES"), Ports{Device: bootedDevice(t, 0), Driver: &fakeDriver{}}, &MemorySessions{})
		wantID(t, err, agent.ErrInvalidRequest, false)
	})
}

func TestEnsureDeviceDeviceErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("device_not_found", func(t *testing.T) {
		dev := bootedDevice(t, 0)
		dev.state = func() (string, error) {
			return "", &agent.Error{ID: agent.ErrDeviceNotFound, Msg: "device 'emulator-5554' not found"}
		}
		out, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		wantID(t, err, agent.ErrDeviceNotFound, false)
		checkFailureCommon(t, out.Common, agent.ErrDeviceNotFound)
	})
	t.Run("resolve fails", func(t *testing.T) {
		p := Ports{Driver: &fakeDriver{}, Resolve: resolveFunc(func(context.Context, string) (device.Device, error) {
			return nil, agent.Errorf(agent.ErrDeviceNotFound, "no device named Pixel_7_Emu")
		})}
		_, err := EnsureDevice(ctx, ensureIn(""), p, &MemorySessions{})
		wantID(t, err, agent.ErrDeviceNotFound, false)
	})
	t.Run("device_unauthorized", func(t *testing.T) {
		dev := bootedDevice(t, 0)
		dev.state = func() (string, error) { return "unauthorized", nil }
		_, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		wantID(t, err, agent.ErrDeviceUnauthorized, false)
	})
	t.Run("bootloader", func(t *testing.T) {
		dev := bootedDevice(t, 0)
		dev.state = func() (string, error) { return "bootloader", nil }
		_, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		wantID(t, err, agent.ErrDeviceOffline, false)
	})
	t.Run("device_offline after the grace", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			dev := bootedDevice(t, 0)
			dev.state = func() (string, error) {
				return "", &agent.Error{ID: agent.ErrDeviceOffline, Retryable: true, Msg: "device offline"}
			}
			start := time.Now()
			_, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
			wantID(t, err, agent.ErrDeviceOffline, true)
			// bootTimeoutMillis 3000 < OfflineGrace: the smaller bound applies.
			if d := time.Since(start); d != 3*time.Second {
				t.Errorf("gave up after %v", d)
			}
		})
	})
	t.Run("offline then online", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			dev := bootedDevice(t, 0)
			n := 0
			dev.state = func() (string, error) {
				if n++; n < 3 {
					return "authorizing", nil
				}
				return "device", nil
			}
			if _, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{}); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("boot_timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			dev := bootedDevice(t, -1)
			start := time.Now()
			out, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
			e := wantID(t, err, agent.ErrBootTimeout, false)
			if d := time.Since(start); d != 3*time.Second {
				t.Errorf("boot_timeout after %v, want the 3 s bound", d)
			}
			if !strings.Contains(e.Error(), "sys.boot_completed") {
				t.Errorf("message does not say what is missing: %v", e)
			}
			checkFailureCommon(t, out.Common, agent.ErrBootTimeout)
		})
	})
	t.Run("services missing keeps waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			dev := bootedDevice(t, 0)
			dev.shell = func(cmd string) (device.ShellResult, error) {
				return device.ShellResult{Stdout: "1\n1\nstopped\n" + droid.BootSplit + "\nFound 1 services:\n0\tactivity: [android.app.IActivityManager]\n"}, nil
			}
			_, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
			if e := wantID(t, err, agent.ErrBootTimeout, false); !strings.Contains(e.Error(), "package,window") {
				t.Errorf("message %v", e)
			}
		})
	})
	t.Run("shell transport error is not retried", func(t *testing.T) {
		dev := bootedDevice(t, 0)
		dev.shell = func(string) (device.ShellResult, error) {
			return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceUnauthorized, Msg: "device unauthorized."}
		}
		_, err := EnsureDevice(ctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		wantID(t, err, agent.ErrDeviceUnauthorized, false)
	})
	t.Run("canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		dev := bootedDevice(t, -1)
		_, err := EnsureDevice(cctx, ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		if e := agent.Classify(err); e.ID != agent.ErrInterrupted || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v", err)
		}
	})
}

// The boot readiness probe is one shell round trip (getprop and `service
// list` together), also while the device is still booting.
func TestEnsureDeviceBootProbeIsOneShell(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := bootedDevice(t, 0)
		out, err := EnsureDevice(context.Background(), ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{})
		if err != nil {
			t.Fatal(err)
		}
		checkSuccessCommon(t, out.Common, NodeEnsureDevice)
		if len(dev.calls) != 1 {
			t.Errorf("booted device: %d shells %q, want 1", len(dev.calls), dev.calls)
		}
		dev = bootedDevice(t, 2)
		if _, err := EnsureDevice(context.Background(), ensureIn(""), Ports{Device: dev, Driver: &fakeDriver{}}, &MemorySessions{}); err != nil {
			t.Fatal(err)
		}
		if len(dev.calls) != 3 {
			t.Errorf("booted on the 3rd probe: %d shells, want 3", len(dev.calls))
		}
	})
}

// bootStatus judges the combined output as the two separate commands were
// judged: the getprop part first, then the service list; no marker is an
// empty service list; the exit status is not looked at.
func TestBootStatusCombinedOutput(t *testing.T) {
	services := capture(t, "service-list/api33-emulator.txt")
	for _, c := range []struct {
		name   string
		res    device.ShellResult
		ready  bool
		reason string
	}{
		{"booted", device.ShellResult{Stdout: "1\n1\nstopped\n" + droid.BootSplit + "\n" + services}, true, ""},
		{"booting", device.ShellResult{Stdout: "\n\nrunning\n" + droid.BootSplit + "\n" + services}, false, "sys.boot_completed is not 1"},
		{"animation", device.ShellResult{Stdout: "1\n1\nrunning\n" + droid.BootSplit + "\n" + services}, false, "boot animation running"},
		{"services missing", device.ShellResult{Stdout: "1\n1\nstopped\n" + droid.BootSplit + "\nFound 1 services:\n0\tactivity: [android.app.IActivityManager]\n"},
			false, "services not up: package,window"},
		{"service list empty", device.ShellResult{Stdout: "1\n1\nstopped\n" + droid.BootSplit + "\n", ExitCode: 1}, false, "service list is empty"},
		{"no marker", device.ShellResult{Stdout: "1\n1\nstopped\n"}, false, "service list is empty"},
		{"no marker, booting", device.ShellResult{Stdout: "\n\nrunning\n", ExitCode: 255}, false, "sys.boot_completed is not 1"},
		{"non-zero exit", device.ShellResult{Stdout: "1\n1\nstopped\n" + droid.BootSplit + "\n" + services, ExitCode: 1}, true, ""},
		{"nothing", device.ShellResult{ExitCode: 127}, false, "sys.boot_completed is not 1"},
	} {
		dev := &scriptDevice{serial: "s", shell: func(string) (device.ShellResult, error) { return c.res, nil }}
		st, err := droid.BootStatus(context.Background(), dev)
		if err != nil || st.Ready != c.ready || st.Reason != c.reason {
			t.Errorf("%s: ready %v reason %q err %v, want %v %q", c.name, st.Ready, st.Reason, err, c.ready, c.reason)
		}
		if len(dev.calls) != 1 || dev.calls[0] != droid.BootProbe {
			t.Errorf("%s: shells %q", c.name, dev.calls)
		}
	}
	// A transport error is returned as is (waitBooted classifies it).
	want := &agent.Error{ID: agent.ErrDeviceOffline, Retryable: true}
	dev := &scriptDevice{serial: "s", shell: func(string) (device.ShellResult, error) { return device.ShellResult{}, want }}
	if _, err := droid.BootStatus(context.Background(), dev); err != want {
		t.Errorf("transport error: %v", err)
	}
}

// The simulator's mksh grammar runs the combined line with real outputs: a
// booted device is ready, one that never boots says what is missing.
func TestBootStatusOnModel(t *testing.T) {
	st, err := droid.BootStatus(context.Background(), newModel(t))
	if err != nil || !st.Ready || len(st.MissingServices) != 0 {
		t.Errorf("booted model: %+v %v", st, err)
	}
	b, err := fixtures.Profile("never-boots")
	if err != nil {
		t.Fatal(err)
	}
	prof, err := android.ParseProfile("never-boots", b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := android.New(prof, android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err = droid.BootStatus(context.Background(), &modelDevice{Device: d, serial: "emulator-5556"})
	if err != nil || st.Ready || st.Reason != "sys.boot_completed is not 1" {
		t.Errorf("never-boots model: %+v %v", st, err)
	}
}

// The daemon's scheduler leases one device for a name several devices match
// (a model): EnsureDevice drives the leased device (the fence's serial),
// not whatever the name resolves to.
func TestEnsureDeviceDrivesTheLeasedDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dev := bootedDevice(t, 0)
		dev.serial = "emulator-5556"
		var asked []string
		p := Ports{Driver: &fakeDriver{}, Resolve: resolveFunc(func(_ context.Context, name string) (device.Device, error) {
			asked = append(asked, name)
			if name != "emulator-5556" {
				return nil, agent.Errorf(agent.ErrDeviceNotFound, "%q names 2 devices (emulator-5554, emulator-5556): use a serial", name)
			}
			return dev, nil
		})}
		in := ensureIn("")
		in.DeviceConfiguration.DeviceName = "Pixel_7"
		ctx := agent.WithFence(context.Background(), agent.Fence{Serial: "emulator-5556", Token: 7})
		out, err := EnsureDevice(ctx, in, p, &MemorySessions{})
		if err != nil {
			t.Fatalf("EnsureDevice: %v (resolved %q)", err, asked)
		}
		if len(asked) != 1 || asked[0] != "emulator-5556" || out.DeviceRuntimeContext.DeviceID != "emulator-5556" {
			t.Errorf("resolved %q, drove %s; want the leased emulator-5556", asked, out.DeviceRuntimeContext.DeviceID)
		}
	})
}
