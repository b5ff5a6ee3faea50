package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
)

// fleet is the shared infrastructure of a fleet test: a real Postgres and a
// real three-node NATS JetStream cluster (Debian's nats-server), both of the
// test's own on loopback ports.
type fleet struct {
	pg   *pgtest.Server
	db   string // database URL
	nats *natstest.Cluster
}

func startFleet(t testing.TB) *fleet {
	t.Helper()
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	db, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return &fleet{pg: pg, db: db, nats: cl}
}

// daemonArgs are serve's flags for a fleet daemon.
func (f *fleet) daemonArgs(extra ...string) []string {
	return append([]string{"--database-url", f.db, "--nats-url", f.nats.URLs(), "--nats-replicas", "3"}, extra...)
}

// TestFleetChaos: two daemons share Postgres, a three-node NATS JetStream
// cluster and one adb server with 8 simulated emulators; 50 runs are
// submitted to both daemons while, at seeded random points, a daemon is
// SIGKILLed 20 times (sometimes staying dead for longer than a lease TTL, so
// the other daemon takes its runs over), Postgres is restarted twice (fast
// and immediate), one NATS node is killed and brought back, the whole NATS
// cluster is stopped for 60 s, and the adb server is restarted once.
// Afterwards: every run ended exactly once, FINISHED, with gapless
// sequences and checksums intact; no device was ever leased to two runs at
// once and no lease is left; no finished node ran again (the simulators'
// install and start records against the committed results); a killed
// daemon's lease was taken over within TTL + one heartbeat; and a NATS
// subscriber outside the daemons got every event exactly once, in order.
// Replay a failure with SCREENGRAPH_CHAOS_SEED=<the seed logged>.
func TestFleetChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: three daemons, Postgres and NATS killed and restarted (about 3 minutes)")
	}
	rng := chaosRNG(t, 0xf1ee7)
	f := startFleet(t)

	srv := simtest.StartADBServer(t)
	devs := map[string]*android.Device{}
	var emus []*sim.Emulator
	var serials []string
	for range 8 {
		emu, dev := launchDefault(t, srv)
		emus = append(emus, emu)
		serials = append(serials, emu.Serial())
		devs[emu.Serial()] = dev
	}
	const ttl = 3 * time.Second
	t0 := time.Now()
	ds := []*daemon{
		startDaemon(t, srv, f.daemonArgs("--lease-ttl", ttl.String())...),
		startDaemon(t, srv, f.daemonArgs("--lease-ttl", ttl.String())...),
	}
	logs := func() string {
		return "--- daemon 0:\n" + ds[0].log() + "\n--- daemon 1:\n" + ds[1].log()
	}
	// alive returns a running daemon (to read from), preferring i.
	alive := func(i int) *daemon {
		if ds[i].cmd != nil {
			return ds[i]
		}
		return ds[1-i]
	}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	const runs = 50
	var ids []string
	submit := func() {
		if len(ids) == runs {
			return
		}
		s := serials[rng.IntN(len(serials))]
		d := alive(len(ids) % 2)
		ids = append(ids, d.submit(t, runBody(s, "file://"+apk, sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil)))
	}
	for range 10 {
		submit()
	}

	const kills = 20
	outage := false
	var outageTook time.Duration // written by the outage's goroutine before it sends on outageDone
	outageDone := make(chan error, 1)
	natsKilled := -1
	for k := range kills {
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		submit()
		submit()
		switch k {
		case 1: // one NATS node of three dies (SIGKILL); the cluster keeps its quorum
			natsKilled = rng.IntN(3)
			if err := f.nats.Kill(natsKilled); err != nil {
				t.Fatal(err)
			}
			t.Logf("chaos %d: NATS node %d killed", k, natsKilled)
		case 4:
			if err := f.nats.Start(natsKilled); err != nil {
				t.Fatalf("NATS node %d restart: %v\n%s", natsKilled, err, f.nats.Logs())
			}
			t.Logf("chaos %d: NATS node %d back", k, natsKilled)
		case 3, 12: // Postgres restarts: a clean one, then a crash-like one
			mode := "fast"
			if k == 12 {
				mode = "immediate"
			}
			if err := f.pg.Restart(mode); err != nil {
				t.Fatal(err)
			}
			t.Logf("chaos %d: Postgres restarted (-m %s)", k, mode)
		case 6: // the whole NATS cluster down until a relay felt it with events waiting
			base := []int64{relayFailures(ds[0].URL()), relayFailures(ds[1].URL())}
			if err := f.nats.StopAll(); err != nil {
				t.Fatal(err)
			}
			outage = true
			down := time.Now()
			t.Logf("chaos %d: NATS cluster stopped", k)
			go func() {
				// The outage lasts until a relay failed to publish three
				// times (retried after its back-offs while its daemon kept
				// committing) with events waiting in the outbox, not a
				// fixed minute: that is the state the restart must
				// recover from (waitOutage).
				err := waitOutage(base, ds[0].URL(), ds[1].URL())
				outageTook = time.Since(down)
				if err == nil {
					err = f.nats.StartAll()
				}
				outageDone <- err
			}()
		case 9: // the adb server restarts; the emulators register again
			restartADBServer(t, srv)
			for _, e := range emus {
				e.DropConnection()
			}
			t.Logf("chaos %d: adb server restarted", k)
		}
		i := rng.IntN(2)
		ds[i].kill()
		dead := time.Duration(rng.IntN(1500)) * time.Millisecond
		if rng.IntN(3) == 0 {
			dead = ttl + ttl/3 + time.Duration(rng.IntN(2000))*time.Millisecond // long enough for a takeover
		}
		t.Logf("chaos %d: daemon %d SIGKILLed, dead for %v", k, i, dead)
		time.Sleep(dead)
		ds[i].start()
	}
	for len(ids) < runs {
		submit()
	}
	if outage {
		if err := <-outageDone; err != nil {
			t.Fatalf("NATS cluster restart: %v\n%s", err, f.nats.Logs())
		}
		t.Logf("NATS cluster back after an outage of %v", outageTook.Round(time.Millisecond))
	}
	alive(0).waitStatus(t, ids, 5*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)

	all := map[string][]agent.Event{}
	for _, id := range ids {
		d := alive(0)
		evs := d.events(t, id)
		if st := d.run(t, id).Status; st != agent.RunFinished {
			var detail map[string]any
			d.call(t, "GET", "/v1/runs/"+id, nil, &detail)
			b, _ := json.MarshalIndent(detail["error"], "", " ")
			t.Fatalf("run %s ended %s: %v\nerror: %s\n%s", id, st, kindsOf(evs), b, logs())
		}
		checkRunEvents(t, evs, agent.KindRunFinished)
		all[id] = evs
	}
	leases := alive(0).leases(t, true)
	by := checkLeaseHistory(t, leases)
	// Takeovers: a lease its holder lost (killed) is followed by the next
	// lease of its run on that device within TTL + one heartbeat (TTL/3) of
	// its last renewal, plus the scheduler's tick and an acquisition.
	var worst time.Duration
	takeovers := map[agent.LeaseReleaseReason]int{}
	for _, ls := range by {
		sort.Slice(ls, func(i, j int) bool { return ls[i].FencingToken < ls[j].FencingToken })
		for i, l := range ls {
			if l.ReleaseReason != agent.LeaseHolderLost && l.ReleaseReason != agent.LeaseExpired {
				continue
			}
			takeovers[l.ReleaseReason]++
			if i+1 == len(ls) || ls[i+1].RunID != l.RunID {
				continue // nothing was waiting for the device
			}
			if gap := ls[i+1].AcquiredAt.Sub(l.RenewedAt); gap > worst {
				worst = gap
			}
		}
	}
	// The bound counts each term the comment above names: the scheduler's
	// tick (serve's default, 1 s) is the poll that finds the expiry (no
	// NOTIFY comes from a killed daemon), a run seen held elsewhere is not
	// tried again before a heartbeat, and the acquisition (device checks, the
	// lease insert) gets 1 s on a loaded machine. The bound used to fold tick
	// and acquisition into one second, which CI's fresh clones exceeded by
	// 0.25-0.37 s with the scheduler reading started runs once per heartbeat.
	const tick = time.Second
	if bound := ttl + ttl/3 + tick + time.Second; worst > bound {
		t.Errorf("a killed daemon's lease was taken over %v after its last renewal, want <= TTL + heartbeat + tick + 1 s acquisition = %v", worst, bound)
	}
	if takeovers[agent.LeaseHolderLost]+takeovers[agent.LeaseExpired] == 0 {
		t.Fatalf("no lease was taken over in %d kills: the kills hit no run in flight", kills)
	}
	actions := checkDeviceActions(t, devs, by, all, t0)
	if actions < 2*len(ids) {
		t.Fatalf("the devices recorded %d installs and starts of %s for %d runs", actions, appPkg, len(ids))
	}
	collectNATS(t, f.nats.URLs()).checkWithin(t, all, 2*time.Minute)
	t.Logf("%d runs on %d devices through 2 daemons; %d kills; %d leases (%d holder_lost, %d expired), worst takeover %v after the last renewal (TTL %v); %d installs+starts",
		len(ids), len(serials), kills, len(leases), takeovers[agent.LeaseHolderLost], takeovers[agent.LeaseExpired], worst, ttl, actions)
}

// TestFleetRunGoesToTheHostWithTheDevice: two hosts (two adb servers with
// two simulated emulators each, one daemon each) on one Postgres and NATS
// cluster. Every run is submitted to daemon A; the runs for B's devices are
// executed by B (their leases are B's), all end FINISHED, and an outside
// NATS subscriber gets every event once, in order.
func TestFleetRunGoesToTheHostWithTheDevice(t *testing.T) {
	slow(t, "a fleet on Postgres and NATS, two hosts")
	f := startFleet(t)
	type host struct {
		srv     *simtest.ADBServer
		serials []string
		d       *daemon
	}
	hosts := make([]*host, 2)
	for i := range hosts {
		h := &host{srv: simtest.StartADBServer(t)}
		for range 2 {
			emu, _ := launchDefault(t, h.srv)
			h.serials = append(h.serials, emu.Serial())
		}
		h.d = startDaemon(t, h.srv, f.daemonArgs()...)
		hosts[i] = h
	}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	a := hosts[0].d
	hostOf := map[string]int{}
	var ids []string
	for range 2 {
		for i, h := range hosts {
			for _, s := range h.serials {
				id := a.submit(t, runBody(s, "file://"+apk, sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
				ids = append(ids, id)
				hostOf[id] = i
			}
		}
	}
	a.waitStatus(t, ids, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	all := map[string][]agent.Event{}
	for _, id := range ids {
		if st := a.run(t, id).Status; st != agent.RunFinished {
			t.Fatalf("run %s ended %s\n%s\n%s", id, st, a.log(), hosts[1].d.log())
		}
		all[id] = a.events(t, id)
		checkRunEvents(t, all[id], agent.KindRunFinished)
	}
	leases := a.leases(t, true)
	checkLeaseHistory(t, leases)
	holders := map[int]map[string]bool{0: {}, 1: {}}
	for _, l := range leases {
		holders[hostOf[l.RunID]][l.Holder] = true
	}
	for i, hs := range holders {
		if len(hs) != 1 {
			t.Fatalf("runs for host %d's devices were held by %v, want one daemon", i, hs)
		}
	}
	for h0 := range holders[0] {
		if holders[1][h0] {
			t.Fatalf("one daemon (%s) held devices of both hosts", h0)
		}
	}
	collectNATS(t, f.nats.URLs()).check(t, all)
	t.Logf("%d runs submitted to one daemon; %d executed by the other host's daemon", len(ids), len(ids)/2)
}

// restartADBServer kills the adb server and starts it again on its port.
// The old server may still hold its port for a moment after kill-server
// answers (a start-server then reads a reset), so start-server is retried.
func restartADBServer(t testing.TB, srv *simtest.ADBServer) {
	t.Helper()
	srv.Restart(t)
}

// relayFailures reads screengraph_relay_failures_total from a daemon's
// /metrics: -1 when the daemon does not answer (killed, restarting).
func relayFailures(url string) int64 { return metricValue(url, "screengraph_relay_failures_total") }

// metricValue reads an unlabelled metric from a daemon's /metrics: -1 when
// the daemon does not answer or does not export it.
func metricValue(url, name string) int64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int64(n)
			}
		}
	}
	return -1
}

// waitOutage polls the daemons' /metrics until the outage is the state a
// restart must recover from: a relay failed to publish three more times than
// base (retried after its back-offs while its daemon kept committing) and
// committed events wait in the outbox. Not every daemon's relay: one killed
// and started again during the outage waits for NATS before its relay runs,
// so it counts no failure (TestFleetChaos failed so, felt [false true]). A
// restarted daemon counts from 0: all its failures fell in the outage. An
// error after two minutes.
func waitOutage(base []int64, urls ...string) error {
	felt := make([]bool, len(urls))
	var lag int64
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		any := false
		for i, u := range urls {
			n := relayFailures(u)
			if base[i] < 0 || (n >= 0 && n < base[i]) {
				base[i] = 0 // restarted since: its counter began again
			}
			if n >= 0 && n-base[i] >= 3 {
				felt[i] = true
			}
			any = any || felt[i]
			lag = max(lag, metricValue(u, "screengraph_outbox_lag_events"))
		}
		if any && lag > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("NATS outage: no relay counted three failures with events waiting in 2 minutes (felt %v, outbox lag %d)", felt, lag)
		}
	}
}
