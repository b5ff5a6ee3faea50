package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

const hostA, hostB = "0a0a0a0a0a0a", "0b0b0b0b0b0b"

// reachDevices makes a service reach cands on host hostID; rounds counts
// the scheduler's rounds (one Reachable call each), so a test can wait for
// rounds to pass instead of sleeping.
func reachDevices(hostID string, rounds *atomic.Int64, cands ...service.Candidate) func(*service.Config) {
	return func(c *service.Config) {
		c.HostID = hostID
		c.Reachable = servicetest.Reach(func(context.Context) ([]service.Candidate, error) {
			rounds.Add(1)
			return cands, nil
		})
	}
}

// waitRounds waits until the scheduler ran n more rounds.
func waitRounds(t *testing.T, rounds *atomic.Int64, n int64) {
	t.Helper()
	from := rounds.Load()
	waitFor(t, "scheduler rounds", func() bool { return rounds.Load() >= from+n })
}

// waitStartedN waits until the node started for n runs (what says what
// that shows) and returns their ids.
func (g *gateNode) waitStartedN(t *testing.T, n int, what string) map[string]bool {
	t.Helper()
	started := map[string]bool{}
	for range n {
		select {
		case id := <-g.started:
			started[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("started %v, waiting for %s", started, what)
		}
	}
	return started
}

// activeDevice is the device key of the run's active lease ("" when none).
func (f *fixture) activeDevice(st agent.Leases, runID string) string {
	f.t.Helper()
	act, err := st.ActiveLeases(context.Background(), agent.Admin())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range act {
		if l.RunID == runID {
			return l.Device
		}
	}
	return ""
}

// A run's deviceName selects among the devices the daemon reaches: a model
// is served by any free device of that model (two runs at once on two
// Pixel 7s), a serial only by that device, an AVD name by its emulator,
// "android-<API level>" by a device of that level, "<host id>/<serial>" only
// on that host. The lease is keyed by the device chosen, so a run naming a
// device by its serial waits while a run naming it by its model holds it.
func TestDeviceNameSelectsAmongReachableDevices(t *testing.T) {
	f := newFixture(t)
	var rounds atomic.Int64
	svc := f.newService("serve:"+hostA, reachDevices(hostA, &rounds,
		service.Candidate{Serial: "d1", Model: "Pixel_7", APILevel: 34},
		service.Candidate{Serial: "d2", Model: "Pixel_7", APILevel: 33},
		service.Candidate{Serial: "d3", AVD: "Tablet_AVD", Model: "sdk_gphone64_x86_64", APILevel: 34},
	))
	start(t, svc)
	r1, r2 := submit(t, svc, "Pixel 7"), submit(t, svc, "pixel_7")
	started := f.node.waitStartedN(t, 2, "two runs naming a model of two free devices running at once")
	d1, d2 := f.activeDevice(f.store, r1), f.activeDevice(f.store, r2)
	if !started[r1] || !started[r2] || d1 == d2 || (d1 != hostA+"/d1" && d1 != hostA+"/d2") || (d2 != hostA+"/d1" && d2 != hostA+"/d2") {
		t.Fatalf("runs naming Pixel 7 leased %q and %q (started %v), want d1 and d2 of host %s", d1, d2, started, hostA)
	}
	onD1, onD2 := r1, r2
	if d1 == hostA+"/d2" {
		onD1, onD2 = r2, r1
	}
	r3 := submit(t, svc, "d1")         // by serial: d1 is held by a run naming its model
	r4 := submit(t, svc, "tablet_avd") // by AVD name
	r5 := submit(t, svc, hostB+"/d2")  // another host's d2: never here
	r6 := submit(t, svc, "android-33") // by API level: d2 is held
	r7 := submit(t, svc, hostA+"/d3")  // this host's d3: held by r4
	f.node.waitStarted(t, r4)
	if d := f.activeDevice(f.store, r4); d != hostA+"/d3" {
		t.Fatalf("run naming AVD tablet_avd leased %q, want %s/d3", d, hostA)
	}
	waitRounds(t, &rounds, 3)
	for _, id := range []string{r3, r5, r6, r7} {
		if s := f.status(id); s != agent.RunPending || f.activeDevice(f.store, id) != "" {
			t.Errorf("run %s is %s with lease %q while its device is busy or elsewhere, want PENDING", id, s, f.activeDevice(f.store, id))
		}
	}
	f.node.open(onD1)
	f.node.waitStarted(t, r3)
	if d := f.activeDevice(f.store, r3); d != hostA+"/d1" {
		t.Fatalf("run naming d1 leased %q", d)
	}
	f.node.open(onD2)
	f.node.waitStarted(t, r6)
	if d := f.activeDevice(f.store, r6); d != hostA+"/d2" {
		t.Fatalf("run naming android-33 leased %q, want %s/d2", d, hostA)
	}
	f.node.open(r4)
	f.node.waitStarted(t, r7)
	if d := f.activeDevice(f.store, r7); d != hostA+"/d3" {
		t.Fatalf("run naming %s/d3 leased %q", hostA, d)
	}
	for _, id := range []string{r3, r6, r7} {
		f.node.open(id)
		f.waitStatus(id, agent.RunFinished)
	}
	waitRounds(t, &rounds, 3)
	if s := f.status(r5); s != agent.RunPending {
		t.Errorf("run naming another host's device is %s, want PENDING (left to that host's daemon)", s)
	}
	for _, l := range f.history("") {
		if l.RunID == r5 {
			t.Errorf("run naming another host's device was leased %+v", l)
		}
	}
}

// One host (StartUnmatched): a name no reachable device matches starts on
// the name as given (EnsureDevice then fails device_not_found or boots the
// AVD), this host's "<host id>/<serial>" is its serial, and another host's
// device is refused at submit (400), not left PENDING forever.
func TestOneHostStartsUnmatchedNamesAndRefusesOtherHosts(t *testing.T) {
	f := newFixture(t)
	var rounds atomic.Int64
	svc := f.newService("serve:"+hostA, func(c *service.Config) {
		reachDevices(hostA, &rounds, service.Candidate{Serial: "d1", Model: "Pixel_7"})(c)
		c.StartUnmatched = true
	})
	start(t, svc)
	_, err := svc.Submit(context.Background(), agent.Admin(), []byte(`{"serial":"`+hostB+`/d1"}`))
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
		t.Fatalf("submit naming host %s's device on host %s: %v, want invalid_request_error", hostB, hostA, err)
	}
	r1 := submit(t, svc, "Nexus_5_AVD")
	f.node.waitStarted(t, r1)
	if d := f.activeDevice(f.store, r1); d != hostA+"/Nexus_5_AVD" {
		t.Fatalf("unmatched name leased %q, want %s/Nexus_5_AVD", d, hostA)
	}
	r2 := submit(t, svc, hostA+"/d1")
	f.node.waitStarted(t, r2)
	if d := f.activeDevice(f.store, r2); d != hostA+"/d1" {
		t.Fatalf("this host's d1 leased %q", d)
	}
	f.node.open(r1)
	f.node.open(r2)
	f.waitStatus(r1, agent.RunFinished)
	f.waitStatus(r2, agent.RunFinished)
}

func TestCandidateMatches(t *testing.T) {
	c := service.Candidate{Serial: "emulator-5554", AVD: "Pixel_7_API_34", Model: "sdk_gphone64_x86_64", Product: "sdk_gphone64_x86_64", Device: "emu64xa", APILevel: 34}
	for name, want := range map[string]bool{
		"emulator-5554":            true,
		"EMULATOR-5554":            false, // a serial is exact
		hostA + "/emulator-5554":   true,
		hostB + "/emulator-5554":   false,
		hostA + "/Pixel_7_API_34":  false, // a host's device is named by its serial only
		"pixel 7 api 34":           true,
		"Pixel_7_API_34":           true,
		"sdk_gphone64_x86_64":      true,
		"emu64xa":                  true,
		"android-34":               true,
		"Android-34":               true,
		"android-33":               false,
		"34":                       false,
		"":                         false,
		"emulator":                 false,
		"/emulator-5554":           false,
		"android-":                 false,
		hostA + "/" + hostA + "/x": false,
		"emulator-5554 ":           false,
	} {
		if got := c.Matches(name, hostA); got != want {
			t.Errorf("Matches(%q) = %v, want %v", name, got, want)
		}
	}
}

// Two daemons on one Postgres, each with its own emulator-5554 (a Pixel 7):
// a run naming host B's device, submitted to A, is driven by B; two runs
// naming the model run at once, one on each host's device.
func TestFleetServesDeviceNamesAcrossHosts(t *testing.T) {
	url := newPostgresURL(t)
	store := openPostgres(t, url)
	f := newFixture(t)
	var ra, rb atomic.Int64
	host := func(hostID string, rounds *atomic.Int64) func(*service.Config) {
		return func(c *service.Config) {
			c.Store, c.Leases = openPostgres(t, url), openPostgres(t, url)
			c.HolderPrefix = ""
			c.Tick = 20 * time.Millisecond
			reachDevices(hostID, rounds, service.Candidate{Serial: "emulator-5554", Model: "Pixel_7", APILevel: 34})(c)
		}
	}
	a := f.newService("serve:01AAAAAAAAAAAAAAAAAAAAAAAA", host(hostA, &ra))
	b := f.newService("serve:01BBBBBBBBBBBBBBBBBBBBBBBB", host(hostB, &rb))
	start(t, a)
	start(t, b)
	r1 := submit(t, a, hostB+"/emulator-5554")
	f.node.waitStarted(t, r1)
	act, err := store.ActiveLeases(context.Background(), agent.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if len(act) != 1 || act[0].RunID != r1 || act[0].Device != hostB+"/emulator-5554" || act[0].Holder != "serve:01BBBBBBBBBBBBBBBBBBBBBBBB" {
		t.Fatalf("active leases %+v: want %s's emulator-5554 held by its daemon for %s", act, hostB, r1)
	}
	f.node.open(r1)
	waitFor(t, r1+" to finish", func() bool {
		r, _ := store.GetRun(context.Background(), agent.Admin(), r1)
		return r.Status == agent.RunFinished
	})
	r2, r3 := submit(t, a, "Pixel 7"), submit(t, b, "android-34")
	started := f.node.waitStartedN(t, 2, "two runs naming what both hosts' devices are running at once")
	if act, err = store.ActiveLeases(context.Background(), agent.Admin()); err != nil {
		t.Fatal(err)
	}
	devices := map[string]string{}
	for _, l := range act {
		devices[l.Device] = l.RunID
	}
	if len(act) != 2 || !started[r2] || !started[r3] || devices[hostA+"/emulator-5554"] == "" || devices[hostB+"/emulator-5554"] == "" {
		t.Fatalf("active leases %+v (started %v): want one run on each host's emulator-5554", act, started)
	}
	f.node.open(r2)
	f.node.open(r3)
	waitFor(t, "both runs to finish", func() bool {
		x, _ := store.GetRun(context.Background(), agent.Admin(), r2)
		y, _ := store.GetRun(context.Background(), agent.Admin(), r3)
		return x.Status == agent.RunFinished && y.Status == agent.RunFinished
	})
}

// Two daemons on one adb server (one host id) see the same devices: a run
// naming a model whose first device another daemon holds takes the next
// free one instead of waiting for the first.
func TestNameSkipsADeviceHeldByAnotherDaemon(t *testing.T) {
	f := newFixture(t)
	var rounds atomic.Int64
	svc := f.newService("serve:01AAAAAAAAAAAAAAAAAAAAAAAA", func(c *service.Config) {
		c.HolderPrefix = ""
		reachDevices(hostA, &rounds,
			service.Candidate{Serial: "d1", Model: "Pixel_7"},
			service.Candidate{Serial: "d2", Model: "Pixel_7"})(c)
	})
	other, err := f.store.AcquireLease(context.Background(), hostA+"/d1", "serve:01BBBBBBBBBBBBBBBBBBBBBBBB", "01OTHERRUN0000000000000000", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	start(t, svc)
	r := submit(t, svc, "Pixel_7")
	f.node.waitStarted(t, r)
	if d := f.activeDevice(f.store, r); d != hostA+"/d2" {
		t.Fatalf("run naming Pixel_7 leased %q, want %s/d2 (d1 is held by another daemon)", d, hostA)
	}
	for _, l := range f.history(hostA + "/d1") {
		if l.FencingToken == other.FencingToken && l.ReleasedAt != nil {
			t.Errorf("the other daemon's lease was released: %+v", l)
		}
	}
	f.node.open(r)
	f.waitStatus(r, agent.RunFinished)
}
