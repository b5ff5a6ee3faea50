package nodes

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	droid "github.com/screengraph/screengraph-agent/device/android"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// shellLog records the shell commands run on a device.
type shellLog struct {
	device.Device
	mu   sync.Mutex
	cmds []string
}

func (d *shellLog) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	d.mu.Lock()
	d.cmds = append(d.cmds, cmd)
	d.mu.Unlock()
	return d.Device.Shell(ctx, cmd)
}

func (d *shellLog) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cmds
	d.cmds = nil
	return c
}

// TestEnsureDeviceWarmRecheck: on the real adb server and a simulated
// emulator, a device found boot-ready is rechecked by the next run with one
// small shell (sys.boot_completed on the same adb transport); after its
// connection dropped (a new transport) or the emulator was restarted on the
// same serial (a reboot), the next run checks it fully again (the boot
// probe with `service list`), and the one after that is warm again.
func TestEnsureDeviceWarmRecheck(t *testing.T) {
	srv := simtest.StartADBServer(t)
	prof := simtest.Profile(t, "default")
	em, _ := simtest.LaunchWith(t, srv, sim.LaunchConfig{Profile: prof})
	port := em.ConsolePort()
	serial := em.Serial()
	srv.WaitState(t, serial, "device", 10*time.Second)
	dev := &shellLog{Device: adbdevice.NewADBDevice(adb.New(srv.Addr()), serial)}
	warm := &Warm{}
	var mu sync.Mutex
	var lines []string
	p := Ports{Device: dev, Driver: &fakeDriver{}, Progress: func(l string) { mu.Lock(); lines = append(lines, l); mu.Unlock() }}
	mem := &MemorySessions{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(what string) []string {
		t.Helper()
		in := ensureIn("")
		in.DeviceConfiguration.DeviceName = serial
		in.DeviceConfiguration.BootTimeoutMillis = 30000
		in.Warm = warm
		if _, err := EnsureDevice(ctx, in, p, mem); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return dev.take()
	}
	warmCmds := []string{"getprop sys.boot_completed"}
	full := func(cmds []string) bool { return slices.Contains(cmds, droid.BootProbe) }

	if c := run("cold"); !full(c) {
		t.Fatalf("cold run did not probe the boot fully: %q", c)
	}
	if c := run("warm"); !slices.Equal(c, warmCmds) {
		t.Fatalf("warm run ran %q, want only %q", c, warmCmds)
	}

	// Reconnect: the emulator's connection to the adb server drops and it
	// registers again (a new transport).
	em.DropConnection()
	srv.WaitState(t, serial, "device", 10*time.Second)
	if c := run("after reconnect"); !full(c) {
		t.Fatalf("after a reconnect the device was not checked fully: %q", c)
	}
	mu.Lock()
	said := strings.Join(lines, "\n")
	mu.Unlock()
	if !strings.Contains(said, "reconnected or rebooted") {
		t.Errorf("no line says why the device was checked again:\n%s", said)
	}
	if c := run("warm again"); !slices.Equal(c, warmCmds) {
		t.Fatalf("warm run after the full check ran %q", c)
	}

	// Reboot: the emulator goes away and a new one, still booting, starts
	// on the same serial.
	em.Close()
	prof.BootDuration = time.Second
	em2, _ := simtest.LaunchWith(t, srv, sim.LaunchConfig{ConsolePort: port, Profile: prof})
	// Its first registration may reach the server while it still tears the
	// old transport down; registering again retries until it is accepted.
	em2.DropConnection()
	srv.WaitState(t, serial, "device", 10*time.Second)
	c := run("after reboot")
	if !full(c) {
		t.Fatalf("after a reboot the device was not checked fully: %q", c)
	}
	mu.Lock()
	said = strings.Join(lines, "\n")
	mu.Unlock()
	if !strings.Contains(said, serial+" boot-ready") {
		t.Errorf("the rebooted device's boot was not waited for:\n%s", said)
	}
	if c := run("warm after reboot"); !slices.Equal(c, warmCmds) {
		t.Fatalf("warm run after the reboot ran %q", c)
	}
}

// aliveDriver is fakeDriver with ProbeAlive, counting both probes.
type aliveDriver struct {
	*fakeDriver
	full, alive int
}

func (d *aliveDriver) Probe(ctx context.Context, id string) (device.Health, map[string]any, error) {
	d.full++
	return d.fakeDriver.Probe(ctx, id)
}

func (d *aliveDriver) ProbeAlive(ctx context.Context, id string) (device.Health, map[string]any, error) {
	d.alive++
	h, details, err := d.fakeDriver.Probe(ctx, id)
	delete(details, "capabilities")
	return h, details, err
}

// TestEnsureDeviceWarmSessionProbe: a reused session whose capabilities an
// earlier run's probe read is probed with one call (ProbeAlive), with the
// same output; a session gone is noticed (and forgotten) all the same.
func TestEnsureDeviceWarmSessionProbe(t *testing.T) {
	srv := simtest.StartADBServer(t)
	em, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, em.Serial(), "device", 10*time.Second)
	drv := &aliveDriver{fakeDriver: &fakeDriver{}}
	p := Ports{Device: adbdevice.NewADBDevice(adb.New(srv.Addr()), em.Serial()), Driver: drv}
	mem, warm := &MemorySessions{}, &Warm{}
	run := func() EnsureDeviceOutput {
		t.Helper()
		in := ensureIn("")
		in.DeviceConfiguration.DeviceName = em.Serial()
		in.Warm = warm
		out, err := EnsureDevice(context.Background(), in, p, mem)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run() // creates the session: its probe reads no capabilities to keep
	first := run()
	if drv.full != 2 || drv.alive != 0 {
		t.Fatalf("first reuse: %d full probes, %d alive probes; want the full one", drv.full, drv.alive)
	}
	second := run()
	if drv.full != 2 || drv.alive != 1 {
		t.Fatalf("second reuse: %d full probes, %d alive probes; want one alive probe", drv.full, drv.alive)
	}
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(second)
	if string(a) != string(b) {
		t.Errorf("outputs differ:\n%s\n%s", a, b)
	}
	// The session dies: the alive probe says so, a new one is created and
	// the next reuse reads its capabilities in full again.
	drv.mu.Lock()
	delete(drv.live, first.DeviceRuntimeContext.DriverSessionID)
	drv.mu.Unlock()
	if out := run(); out.DeviceRuntimeContext.DriverSessionID == first.DeviceRuntimeContext.DriverSessionID {
		t.Fatal("a dead session was reused")
	}
	full := drv.full
	run()
	if drv.full != full+1 {
		t.Errorf("the new session's first reuse did not read its capabilities")
	}
}

// meeting lets two calls on different ports each wait, up to a bound, for
// the other to have started: met says whether both were in flight at once.
type meeting struct {
	bound           context.Context
	shell, probe    chan struct{}
	shellIn, probe1 sync.Once
	mu              sync.Mutex
	met             []bool
}

func (m *meeting) arrive(mine *sync.Once, me, other chan struct{}) {
	mine.Do(func() { close(me) })
	select {
	case <-other:
		m.mu.Lock()
		m.met = append(m.met, true)
		m.mu.Unlock()
	case <-m.bound.Done():
		m.mu.Lock()
		m.met = append(m.met, false)
		m.mu.Unlock()
	}
}

type meetDevice struct {
	device.Device
	m *meeting
}

func (d meetDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	if d.m != nil && cmd == "getprop sys.boot_completed" {
		d.m.arrive(&d.m.shellIn, d.m.shell, d.m.probe)
	}
	return d.Device.Shell(ctx, cmd)
}

type meetDriver struct {
	*fakeDriver
	m **meeting
}

func (d meetDriver) Probe(ctx context.Context, id string) (device.Health, map[string]any, error) {
	if m := *d.m; m != nil {
		m.arrive(&m.probe1, m.probe, m.shell)
	}
	return d.fakeDriver.Probe(ctx, id)
}

// TestEnsureDeviceWarmProbeOverlaps: on a warm device (a boot proof on its
// transport, a session remembered) the boot recheck's round trip to adbd
// and the session's probe to Appium are in flight at once, not one after
// the other; the output is the same as a sequential run's.
func TestEnsureDeviceWarmProbeOverlaps(t *testing.T) {
	srv := simtest.StartADBServer(t)
	em, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, em.Serial(), "device", 10*time.Second)
	var m *meeting
	drv := meetDriver{fakeDriver: &fakeDriver{}, m: &m}
	dev := meetDevice{Device: adbdevice.NewADBDevice(adb.New(srv.Addr()), em.Serial())}
	mem, warm := &MemorySessions{}, &Warm{}
	run := func(p Ports) EnsureDeviceOutput {
		t.Helper()
		in := ensureIn("")
		in.DeviceConfiguration.DeviceName = em.Serial()
		in.Warm = warm
		out, err := EnsureDevice(context.Background(), in, p, mem)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	run(Ports{Device: dev, Driver: drv}) // cold: boot probe, new session
	before := run(Ports{Device: dev, Driver: drv})
	bound, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m = &meeting{bound: bound, shell: make(chan struct{}), probe: make(chan struct{})}
	dev.m = m
	after := run(Ports{Device: dev, Driver: drv})
	if !slices.Equal(m.met, []bool{true, true}) {
		t.Fatalf("boot recheck and session probe met %v: want both in flight at once", m.met)
	}
	a, _ := json.Marshal(before)
	b, _ := json.Marshal(after)
	if string(a) != string(b) {
		t.Errorf("outputs differ:\n%s\n%s", a, b)
	}
}
