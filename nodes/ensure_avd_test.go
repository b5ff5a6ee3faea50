package nodes

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// fakeEmulators is a scriptable device.Emulators: avds exist, running maps an
// AVD to its serials, boots are recorded and answered with bootMode.
type fakeEmulators struct {
	avds    map[string]bool
	running map[string][]string
	boots   []device.BootRequest
	mode    device.BootMode
	reaped  []time.Duration
	touched []string
	bootErr error
}

func (f *fakeEmulators) HasAVD(_ context.Context, name string) (bool, error) {
	return f.avds[name], nil
}
func (f *fakeEmulators) Running(_ context.Context, avd string) ([]string, error) {
	return f.running[avd], nil
}
func (f *fakeEmulators) Boot(_ context.Context, req device.BootRequest) (device.BootResult, error) {
	f.boots = append(f.boots, req)
	if f.bootErr != nil {
		return device.BootResult{}, f.bootErr
	}
	if req.Progress != nil {
		req.Progress("booting " + req.AVD)
	}
	r := device.BootResult{Serial: "emulator-5554", Mode: f.mode, Took: 1500 * time.Millisecond}
	if f.mode == device.BootCold {
		r.ColdBootReason = "Failed to load snapshot 'default_boot'"
	}
	return r, nil
}
func (f *fakeEmulators) Touch(_ context.Context, serial string) error {
	f.touched = append(f.touched, serial)
	return nil
}
func (f *fakeEmulators) Reap(_ context.Context, idle time.Duration) ([]string, error) {
	f.reaped = append(f.reaped, idle)
	return nil, nil
}

var _ device.Emulators = (*fakeEmulators)(nil)

func avdIn(policy DriverReusePolicy, name string) EnsureDeviceInput {
	in := ensureIn(policy)
	in.DeviceConfiguration.DeviceName = name
	in.Emulator = EmulatorOptions{IdleKill: 30 * time.Minute}
	return in
}

func TestEnsureDeviceAVD(t *testing.T) {
	ctx := context.Background()
	dev := bootedDevice(t, 0)
	resolve := func(_ context.Context, name string) (device.Device, error) {
		if name != "emulator-5554" {
			return nil, agent.Errorf(agent.ErrDeviceNotFound, "no %s", name)
		}
		return dev, nil
	}
	ports := func(e *fakeEmulators) Ports {
		return Ports{Driver: &fakeDriver{}, Resolve: resolveFunc(resolve), Emulators: e}
	}

	// Not running -> booted (quick), output says so; the schema accepts it.
	e := &fakeEmulators{avds: map[string]bool{"Pixel_7": true}, mode: device.BootQuick}
	out, err := EnsureDevice(ctx, avdIn(ReuseOrCreate, "Pixel_7"), ports(e), &MemorySessions{})
	if err != nil {
		t.Fatal(err)
	}
	lc := out.EmulatorLifecycle
	if lc == nil || !lc.Booted || lc.Serial != "emulator-5554" || *lc.BootMode != device.BootQuick || *lc.BootMillis != 1500 || lc.ReadOnly {
		t.Fatalf("lifecycle %+v", lc)
	}
	if len(e.boots) != 1 || e.boots[0].ReadOnly || e.boots[0].SaveSnapshot || e.boots[0].ColdBoot || e.boots[0].Timeout <= 0 || e.boots[0].Timeout > 3*time.Second {
		t.Errorf("boot request %+v", e.boots)
	}
	if len(e.reaped) != 1 || e.reaped[0] != 30*time.Minute {
		t.Errorf("reap %v", e.reaped)
	}
	b, _ := json.Marshal(out)
	if _, err := ValidateOutput(NodeEnsureDevice, b, ModeStrict); err != nil {
		t.Errorf("output schema: %v\n%s", err, b)
	}

	// Running -> reused, nothing booted.
	e = &fakeEmulators{avds: map[string]bool{"Pixel_7": true}, running: map[string][]string{"Pixel_7": {"emulator-5554", "emulator-5556"}}}
	out, err = EnsureDevice(ctx, avdIn(ReuseOrCreate, "Pixel_7"), ports(e), &MemorySessions{})
	if err != nil || out.EmulatorLifecycle.Booted || out.EmulatorLifecycle.Serial != "emulator-5554" || out.EmulatorLifecycle.BootMode != nil || len(e.boots) != 0 {
		t.Fatalf("reuse: %v %+v boots %v", err, out.EmulatorLifecycle, e.boots)
	}
	if len(e.touched) != 1 {
		t.Errorf("touched %v", e.touched)
	}
	b, _ = json.Marshal(out)
	if _, err := ValidateOutput(NodeEnsureDevice, b, ModeStrict); err != nil || !strings.Contains(string(b), `"bootMode":null`) {
		t.Errorf("output schema: %v\n%s", err, b)
	}

	// REUSE_ONLY on a stopped AVD: device_not_found, AVD_NOT_RUNNING, never boots.
	e = &fakeEmulators{avds: map[string]bool{"Pixel_7": true}}
	out, err = EnsureDevice(ctx, avdIn(ReuseOnly, "Pixel_7"), ports(e), &MemorySessions{})
	ae := wantID(t, err, agent.ErrDeviceNotFound, false)
	if ae.Code != AVDNotRunning || len(e.boots) != 0 || !strings.Contains(*out.HumanReadableFailureSummary, "REUSE_ONLY") {
		t.Errorf("REUSE_ONLY: %v boots %v", err, e.boots)
	}
	checkFailureCommon(t, out.Common, agent.ErrDeviceNotFound)

	// CREATE_NEW boots a -read-only instance even though one runs; cold
	// boot reason and policy options pass through.
	e = &fakeEmulators{avds: map[string]bool{"Pixel_7": true}, running: map[string][]string{"Pixel_7": {"emulator-5556"}}, mode: device.BootCold}
	in := avdIn(CreateNew, "Pixel_7")
	in.Emulator = EmulatorOptions{SaveSnapshot: true, ColdBoot: true}
	out, err = EnsureDevice(ctx, in, ports(e), &MemorySessions{})
	if err != nil {
		t.Fatal(err)
	}
	if lc := out.EmulatorLifecycle; !lc.ReadOnly || !lc.Booted || *lc.BootMode != device.BootCold || lc.ColdBootReason == "" {
		t.Errorf("CREATE_NEW lifecycle %+v", lc)
	}
	if r := e.boots[0]; !r.ReadOnly || !r.SaveSnapshot || !r.ColdBoot || len(e.reaped) != 0 {
		t.Errorf("CREATE_NEW boot %+v reaped %v", r, e.reaped)
	}

	// A boot failure is the node's failure, with the AVD named in the output.
	e = &fakeEmulators{avds: map[string]bool{"Pixel_7": true}, bootErr: &agent.Error{ID: agent.ErrProcess, Code: "EMULATOR_CRASHED", Msg: "emulator-5554 was killed by signal killed"}}
	out, err = EnsureDevice(ctx, avdIn(ReuseOrCreate, "Pixel_7"), ports(e), &MemorySessions{})
	if ae := wantID(t, err, agent.ErrProcess, false); ae.Code != "EMULATOR_CRASHED" || out.EmulatorLifecycle == nil || out.EmulatorLifecycle.AVDName != "Pixel_7" {
		t.Errorf("crash: %v %+v", err, out.EmulatorLifecycle)
	}

	// A serial is no AVD: no lifecycle, the device as before.
	e = &fakeEmulators{avds: map[string]bool{"Pixel_7": true}}
	out, err = EnsureDevice(ctx, avdIn(ReuseOrCreate, "emulator-5554"), ports(e), &MemorySessions{})
	if err != nil || out.EmulatorLifecycle != nil || len(e.boots) != 0 {
		t.Errorf("serial: %v %+v", err, out.EmulatorLifecycle)
	}
}
