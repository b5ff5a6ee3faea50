package adbdevice_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// Through the real adb server: a running emulator is a candidate with its
// model, AVD name and API level, and its AVD is not offered again as one to
// boot; the other AVDs are, listed once per AVDsEvery; a device still
// booting is a candidate (EnsureDevice waits for it) but fails the probe.
func TestReachableCandidates(t *testing.T) {
	srv := simtest.StartADBServer(t)
	ready := launch(t, srv, android.Profile{Name: "ready", APILevel: 33, Model: "sdk_gphone64_x86_64",
		Props: map[string]string{"ro.boot.qemu.avd_name": "Pixel_A"}})
	booting := launch(t, srv, android.Profile{Name: "booting", APILevel: 30, BootDuration: time.Hour})
	srv.WaitState(t, ready.Serial(), "device", 10*time.Second)
	srv.WaitState(t, booting.Serial(), "device", 10*time.Second)

	var listings atomic.Int32
	avds := []string{"Pixel_A", "Pixel_B"}
	var fail atomic.Bool
	c := adb.New(srv.Addr())
	r := adbdevice.NewReachable(c, func(ctx context.Context) ([]string, error) {
		listings.Add(1)
		if fail.Load() {
			return nil, errors.New("emulator -list-avds: exit status 1")
		}
		return avds, nil
	})
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	adbdevice.SetReachableClock(r, func() time.Time { return now })

	ctx := context.Background()
	got, err := r.Candidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]service.Candidate{}
	for _, c := range got {
		by[c.Serial] = c
	}
	if len(got) != 3 || len(by) != 3 {
		t.Fatalf("candidates %+v, want the 2 devices and Pixel_B", got)
	}
	if a := by[ready.Serial()]; a.AVD != "Pixel_A" || a.APILevel != 33 || a.Model != "sdk_gphone64_x86_64" {
		t.Errorf("running emulator: %+v", a)
	}
	if b := by[booting.Serial()]; b.APILevel != 30 || b.AVD != "" {
		t.Errorf("booting emulator: %+v", b)
	}
	if p := by["Pixel_B"]; p.AVD != "Pixel_B" {
		t.Errorf("AVD to boot: %+v", p)
	}
	if _, ok := by["Pixel_A"]; ok {
		t.Error("Pixel_A is running, yet offered as an AVD to boot")
	}

	// Within AVDsEvery the listing is reused; after it, listed again (a
	// failing listing offers no AVD and is no error).
	fail.Store(true)
	if _, err := r.Candidates(ctx); err != nil || listings.Load() != 1 {
		t.Fatalf("second round: %v, %d listings, want 1", err, listings.Load())
	}
	now = now.Add(adbdevice.AVDsEvery)
	got, err = r.Candidates(ctx)
	if err != nil || listings.Load() != 2 || len(got) != 2 {
		t.Fatalf("after AVDsEvery: %+v, %v, %d listings", got, err, listings.Load())
	}

	probe := adbdevice.NewBootCompletedProbe(c).Probe
	if err := probe(ctx, ready.Serial()); err != nil {
		t.Errorf("probe of a booted device: %v", err)
	}
	if err := probe(ctx, booting.Serial()); err == nil || !strings.Contains(err.Error(), "sys.boot_completed is") {
		t.Errorf("probe of a booting device: %v", err)
	}

	// Without an SDK (no lister): the adb devices only.
	if got, err := adbdevice.NewReachable(c, nil).Candidates(ctx); err != nil || len(got) != 2 {
		t.Errorf("no AVD lister: %+v, %v", got, err)
	}
	// No adb server answering: its error, named.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := adbdevice.NewReachable(adb.New(l.Addr().String()), nil).Candidates(ctx); err == nil || !strings.HasPrefix(err.Error(), "adb server: ") {
		t.Errorf("adb server down: %v", err)
	}
}

// A device's identity is what the device says of itself, not who asks: two
// Reachables on one adb server under two spellings of its address (as two
// daemons with different machine ids would be) read one id for a device;
// two devices differ; a name no connected device has is ErrNoDevice (an AVD
// to boot, keyed by the host id); candidates carry the same id.
func TestReachableDeviceID(t *testing.T) {
	srv := simtest.StartADBServer(t)
	phone := launch(t, srv, android.Profile{Name: "phone", APILevel: 33,
		Props: map[string]string{"ro.serialno": "R58N12ABCDE", "ro.boot.serialno": "R58N12ABCDE"}})
	emu := launch(t, srv, android.Profile{Name: "emu", APILevel: 34, Props: map[string]string{"ro.boot.qemu.avd_name": "Pixel_A"}})
	srv.WaitState(t, phone.Serial(), "device", 10*time.Second)
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	_, port, _ := net.SplitHostPort(srv.Addr())
	ctx := context.Background()
	r1 := adbdevice.NewReachable(adb.New(srv.Addr()), nil)
	r2 := adbdevice.NewReachable(adb.New("localhost:"+port), nil)
	ids := map[string]string{}
	for _, serial := range []string{phone.Serial(), emu.Serial()} {
		a, err := r1.DeviceID(ctx, serial)
		if err != nil {
			t.Fatalf("DeviceID(%s): %v", serial, err)
		}
		b, err := r2.DeviceID(ctx, serial)
		if err != nil || a != b {
			t.Fatalf("DeviceID(%s) = %s through %s, %s, %v through localhost", serial, a, srv.Addr(), b, err)
		}
		if len(a) != 12 || strings.Trim(a, "0123456789abcdef") != "" {
			t.Fatalf("DeviceID(%s) = %q, want 12 hex digits", serial, a)
		}
		ids[serial] = a
	}
	if ids[phone.Serial()] == ids[emu.Serial()] {
		t.Errorf("two devices share the id %s", ids[phone.Serial()])
	}
	if _, err := r1.DeviceID(ctx, "Pixel_B"); !errors.Is(err, service.ErrNoDevice) {
		t.Errorf("DeviceID of an AVD name: %v, want ErrNoDevice", err)
	}
	cands, err := r2.Candidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		if c.ID != ids[c.Serial] {
			t.Errorf("candidate %s has id %q, DeviceID says %q", c.Serial, c.ID, ids[c.Serial])
		}
	}
}
