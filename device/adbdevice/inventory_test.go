package adbdevice_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

func launch(t *testing.T, srv *simtest.ADBServer, p android.Profile) *sim.Emulator {
	t.Helper()
	e, _ := simtest.Launch(t, srv, p)
	return e
}

// TestDescribeBootingAndOffline: one simulated emulator still booting, one
// taken offline by a fault; both reported for what they are, through the real
// adb server.
func TestDescribeBootingAndOffline(t *testing.T) {
	srv := simtest.StartADBServer(t)
	booting := launch(t, srv, android.Profile{Name: "booting", APILevel: 30, BootDuration: time.Hour})
	offline := launch(t, srv, android.Profile{Name: "offline", APILevel: 33,
		Faults: android.Faults{OfflineAfter: 300 * time.Millisecond, OfflineFor: -1}})
	ready := launch(t, srv, android.Profile{Name: "ready", APILevel: 29})
	srv.WaitState(t, booting.Serial(), "device", 10*time.Second)
	srv.WaitState(t, ready.Serial(), "device", 10*time.Second)
	srv.WaitState(t, offline.Serial(), "offline", 10*time.Second)

	list, err := adbdevice.Describe(context.Background(), adb.New(srv.Addr()), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]device.Summary{}
	for _, s := range list {
		got[s.Serial] = s
	}
	if len(got) != 3 {
		t.Fatalf("want 3 devices, got %+v", list)
	}
	b := got[booting.Serial()]
	if b.State != "device" || b.BootReady || b.APILevel != 30 || b.BootDetail != "sys.boot_completed is not 1" {
		t.Errorf("booting device: %+v", b)
	}
	o := got[offline.Serial()]
	if o.State != "offline" || o.BootReady || o.APILevel != 0 {
		t.Errorf("offline device: %+v", o)
	}
	r := got[ready.Serial()]
	if r.State != "device" || !r.BootReady || r.APILevel != 29 || r.Release != "10" || r.Model == "" {
		t.Errorf("ready device: %+v", r)
	}
}

// TestInventoryDevices: the service's device list through the real adb
// server: a ready and an offline simulated emulator, each with its adb state;
// an adb server that does not answer is a network error naming it.
func TestInventoryDevices(t *testing.T) {
	srv := simtest.StartADBServer(t)
	ready := launch(t, srv, android.Profile{Name: "ready", APILevel: 29})
	offline := launch(t, srv, android.Profile{Name: "offline", APILevel: 33,
		Faults: android.Faults{OfflineAfter: 300 * time.Millisecond, OfflineFor: -1}})
	srv.WaitState(t, ready.Serial(), "device", 10*time.Second)
	srv.WaitState(t, offline.Serial(), "offline", 10*time.Second)

	list, err := adbdevice.Inventory{ADB: adb.New(srv.Addr())}.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]service.Device{}
	for _, d := range list {
		got[d.Serial] = d
	}
	if r := got[ready.Serial()]; len(got) != 2 || r.State != "device" || !r.BootReady || r.APILevel != 29 || r.Model == "" {
		t.Errorf("devices: %+v", list)
	}
	if o := got[offline.Serial()]; o.State != "offline" || o.BootReady || o.APILevel != 0 {
		t.Errorf("offline device: %+v", o)
	}

	if err := (adbdevice.Inventory{ADB: adb.New(srv.Addr())}).Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if err := (adbdevice.Inventory{ADB: adb.New("127.0.0.1:1")}).Ready(context.Background()); err == nil {
		t.Error("Ready of an adb server that is not there: no error")
	}
	_, err = adbdevice.Inventory{ADB: adb.New("127.0.0.1:1")}.Devices(context.Background())
	if agent.Classify(err).ID != agent.ErrNetwork || !strings.Contains(err.Error(), "adb server") {
		t.Errorf("unreachable adb server: %v", err)
	}
}
