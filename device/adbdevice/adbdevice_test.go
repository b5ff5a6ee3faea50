package adbdevice_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
)

func TestAgentErrorMapping(t *testing.T) {
	for _, c := range []struct {
		in        *adb.Error
		id        agent.ErrorID
		retryable bool
	}{
		{&adb.Error{ID: adb.IDDeviceNotFound, Retryable: true}, agent.ErrDeviceNotFound, false},
		{&adb.Error{ID: adb.IDDeviceOffline, Retryable: true}, agent.ErrDeviceOffline, true},
		{&adb.Error{ID: adb.IDDeviceUnauthorized}, agent.ErrDeviceUnauthorized, false},
		{&adb.Error{ID: adb.IDTimeout, Retryable: true}, agent.ErrTimeout, true},
		{&adb.Error{ID: adb.IDCanceled}, agent.ErrInterrupted, false},
		{&adb.Error{ID: adb.IDNetworkError, Retryable: true}, agent.ErrNetwork, true},
		{&adb.Error{ID: adb.IDInstallFailed, Code: "INSTALL_FAILED_INSUFFICIENT_STORAGE"}, agent.ErrInstallFailed, false},
		{&adb.Error{ID: adb.IDInstallFailed, Code: "INSTALL_FAILED_VERSION_DOWNGRADE"}, agent.ErrVersionDowngrade, false},
		{&adb.Error{ID: adb.IDActivityNotFound}, agent.ErrActivityNotFound, false},
		{&adb.Error{ID: adb.IDPermissionError}, agent.ErrPermission, false},
		{&adb.Error{ID: adb.IDProcessError}, agent.ErrProcess, false},
		{&adb.Error{ID: "something_new"}, agent.ErrInternal, false},
	} {
		err := adbdevice.AgentError(c.in)
		var e *agent.Error
		if !errors.As(err, &e) || e.ID != c.id || e.Retryable != c.retryable || e.Code != c.in.Code {
			t.Errorf("%s/%s -> %v, want %s retryable %v", c.in.ID, c.in.Code, err, c.id, c.retryable)
		}
	}
	if adbdevice.AgentError(nil) != nil {
		t.Error("nil became an error")
	}
}

// Through the real adb server and a simulated emulator.
func TestADBDeviceOnSimulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	c := adb.New(srv.Addr())
	d := adbdevice.NewADBDevice(c, emu.Serial())

	if st, err := d.State(ctx); err != nil || st != "device" {
		t.Errorf("State = %q, %v", st, err)
	}
	r, err := d.Shell(ctx, "echo out; echo err >&2; exit 3")
	if err != nil || r.Stdout != "out\n" || r.Stderr != "err\n" || r.ExitCode != 3 {
		t.Errorf("Shell = %+v, %v", r, err)
	}

	// Install with progress, then a downgrade: version_downgrade.
	dir := t.TempDir()
	write := func(name string) string {
		b, err := fixtures.APK(name)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	var last, total int64
	err = d.Install(ctx, write("demo-v2.apk"), device.InstallOptions{Replace: true, Progress: func(done, tot int64) { last, total = done, tot }})
	if err != nil {
		t.Fatalf("install v2: %v", err)
	}
	if total <= 0 || last != total {
		t.Errorf("progress %d/%d", last, total)
	}
	err = d.Install(ctx, write("demo-v1.apk"), device.InstallOptions{Replace: true})
	var e *agent.Error
	if !errors.As(err, &e) || e.ID != agent.ErrVersionDowngrade || e.Code != "INSTALL_FAILED_VERSION_DOWNGRADE" {
		t.Errorf("downgrade: %v", err)
	}
	err = d.Install(ctx, write("not-an-apk.apk"), device.InstallOptions{})
	if !errors.As(err, &e) || e.ID != agent.ErrInstallFailed || e.Code == "" {
		t.Errorf("not an APK: %v", err)
	}

	var buf bytes.Buffer
	if n, err := d.Pull(ctx, "/proc/net/tcp", &buf); err != nil || n == 0 || int64(buf.Len()) != n {
		t.Errorf("Pull = %d, %v", n, err)
	}
	if _, err := d.Pull(ctx, "/no/such/file", &buf); agent.Classify(err).ID != agent.ErrProcess {
		t.Errorf("Pull of a missing file: %v", err)
	}

	// Unknown serial.
	ghost := adbdevice.NewADBDevice(c, "emulator-5998").WithReconnectGrace(0)
	if _, err := ghost.State(ctx); agent.Classify(err).ID != agent.ErrDeviceNotFound {
		t.Errorf("unknown serial State: %v", err)
	}
	if _, err := ghost.Shell(ctx, "true"); agent.Classify(err).ID != agent.ErrDeviceNotFound {
		t.Errorf("unknown serial Shell: %v", err)
	}
	// With a grace: waited for, then the same answer.
	if _, err := ghost.WithReconnectGrace(300*time.Millisecond).Shell(ctx, "true"); agent.Classify(err).ID != agent.ErrDeviceNotFound {
		t.Errorf("unknown serial Shell after the grace: %v", err)
	}

	// Resolver: by serial and by model (host:devices-l), unknown name.
	res := adbdevice.NewResolver(c, 300*time.Millisecond).Resolve
	if got, err := res(ctx, emu.Serial()); err != nil || got.Serial() != emu.Serial() {
		t.Errorf("resolve serial: %v %v", got, err)
	}
	infos, _ := c.Devices(ctx)
	var model string
	for _, in := range infos {
		if in.Serial == emu.Serial() {
			model = in.Model
		}
	}
	if model == "" {
		t.Fatalf("no model in devices-l: %+v", infos)
	}
	if got, err := res(ctx, model); err != nil || got.Serial() != emu.Serial() {
		t.Errorf("resolve model %q: %v %v", model, got, err)
	}
	if _, err := res(ctx, "Pixel_7_Emu"); agent.Classify(err).ID != agent.ErrDeviceNotFound || agent.Classify(err).Code != adbdevice.CodeNotAttached {
		t.Errorf("resolve unknown: %v", err)
	}
}

// An adb server restart forgets every device until it registers again: an
// operation, and a resolution, started in that window wait for the device
// and succeed (the fleet chaos test met this as device_not_found mid-run).
func TestADBDeviceRidesThroughAnADBServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	c := adb.New(srv.Addr())

	restart := func() {
		srv.Restart(t)
		if infos, err := c.Devices(ctx); err != nil || len(infos) != 0 {
			t.Fatalf("after the restart: %v %v, want no device", infos, err)
		}
	}

	restart()
	d := adbdevice.NewADBDevice(c, emu.Serial())
	waiting := make(chan struct{})
	adbdevice.OnAbsent(d, func() { close(waiting) })
	type result struct {
		r   device.ShellResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := d.Shell(ctx, "echo back")
		done <- result{r, err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("Shell answered before the device came back: %+v %v", r.r, r.err)
	}
	emu.DropConnection() // registers with the new server
	if r := <-done; r.err != nil || r.r.Stdout != "back\n" {
		t.Fatalf("Shell = %+v, %v; want it to wait for the device", r.r, r.err)
	}

	restart()
	resolved := make(chan error, 1)
	go func() {
		_, err := adbdevice.NewResolver(c, adbdevice.ReconnectGrace).Resolve(ctx, emu.Serial())
		resolved <- err
	}()
	// The resolver polls; the device registers while it waits or before its
	// first look: either way it must resolve.
	emu.DropConnection()
	if err := <-resolved; err != nil {
		t.Fatalf("resolve after an adb server restart: %v", err)
	}
}
