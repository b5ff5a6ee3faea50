package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// TestServeCrashResume SIGKILLs the daemon at random points 20 times while
// runs are in flight, restarting it each time on the same data dir. After
// the last restart every run ends exactly once (FINISHED), sequences stay
// gapless with checksums intact, no node that had finished runs again (each
// install and activity start the simulators recorded happened under a lease
// of its run and before that run's ProvisionApp / LaunchOrAttach result was
// committed), no lease is left held, and NATS has every event once, in order.
// Two graceful stops (SIGTERM) in between leave runs resumable too.
// Replay a failure with SCREENGRAPH_CHAOS_SEED=<the seed logged>.
func TestServeCrashResume(t *testing.T) {
	slow(t, "chaos: 20 SIGKILLs of the daemon mid-run")
	rng := chaosRNG(t, 0x5eed)

	srv := simtest.StartADBServer(t)
	devs := map[string]*android.Device{}
	var serials []string
	for range 4 {
		emu, dev := launchDefault(t, srv)
		serials = append(serials, emu.Serial())
		devs[emu.Serial()] = dev
	}
	// The profiles preinstall the demo app at boot: only what happens from
	// here on is the daemon's doing.
	t0 := time.Now()
	d := startDaemon(t, srv, "--lease-ttl", "3s")
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	var ids []string
	serialOf := map[string]string{}
	submit := func() {
		s := serials[rng.IntN(len(serials))]
		id := d.submit(t, runBody(s, "file://"+apk, sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
		ids = append(ids, id)
		serialOf[id] = s
	}
	for range 8 {
		submit()
	}
	const kills = 20
	for k := range kills {
		if rng.IntN(10) < 6 {
			submit()
		}
		time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond)
		d.kill()
		d.start()
		t.Logf("kill %d done", k+1)
		if k%7 == 6 {
			// A graceful stop in between: SIGTERM discards the node in flight,
			// releases the leases (shutdown) and exits 0; the restart resumes.
			time.Sleep(time.Duration(50+rng.IntN(500)) * time.Millisecond)
			if err := d.stop(); err != nil {
				t.Fatalf("SIGTERM: %v\n%s", err, d.log())
			}
			d.start()
		}
	}
	d.waitStatus(t, ids, 5*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)

	all := map[string][]agent.Event{}
	for _, id := range ids {
		evs := d.events(t, id)
		if st := d.run(t, id).Status; st != agent.RunFinished {
			var detail map[string]any
			d.call(t, "GET", "/v1/runs/"+id, nil, &detail)
			b, _ := json.MarshalIndent(detail["error"], "", " ")
			failed, _ := json.Marshal(finishedOf(t, evs, nodes.NodeEnsureDevice))
			t.Fatalf("run %s ended %s: %v\nerror: %s\nEnsureDevice attempts: %s\n%s", id, st, kindsOf(evs), b, failed, d.log())
		}
		checkRunEvents(t, evs, agent.KindRunFinished)
		all[id] = evs
	}
	leases := d.leases(t, true)
	by := checkLeaseHistory(t, leases)
	holderLost, shutdown := 0, 0
	for _, l := range leases {
		switch l.ReleaseReason {
		case agent.LeaseHolderLost:
			holderLost++
		case agent.LeaseShutdown:
			shutdown++
		}
	}
	if holderLost == 0 {
		t.Fatalf("no lease was taken back from a killed daemon in %d kills: the kills hit no run in flight", kills)
	}
	actions := checkDeviceActions(t, devs, by, all, t0)
	if actions < 2*len(ids) {
		t.Fatalf("the devices recorded %d installs and starts of %s for %d runs", actions, appPkg, len(ids))
	}
	collectNATS(t, d.NATSURL()).check(t, all)
	t.Logf("%d runs, %d kills, %d leases (%d taken back from killed daemons, %d released at SIGTERM), %d installs+starts", len(ids), kills, len(leases), holderLost, shutdown, actions)
}
