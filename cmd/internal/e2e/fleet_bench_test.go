package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// fleetBenchRunsPerDevice is how many runs each device gets per measured round.
const fleetBenchRunsPerDevice = 4

// BenchmarkFleetRunsPerMinute measures fleet throughput on a real Postgres
// and a real three-node NATS cluster, side by side in one run: one daemon
// on one host with 8 simulated emulators, then two daemons on two hosts (two
// adb servers, 8 emulators each, 16 in all), every run submitted to the
// first daemon (the second picks its own from the shared queue). Each round
// submits 4 warm runs per device (REUSE_OR_CREATE session,
// INSTALL_IF_MISSING, LAUNCH_OR_ATTACH) and waits until all are FINISHED. Reported:
// runs/min of each set-up and their ratio (2 daemons / 1; 2 is linear).
// Everything runs on this machine's 2 cores, so the ratio shows the fleet's
// overhead, not what a second host adds.
func BenchmarkFleetRunsPerMinute(b *testing.B) {
	f := startFleet(b)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(b, apk)
	type host struct {
		serials []string
		d       *daemon
	}
	newHost := func() *host {
		srv := simtest.StartADBServer(b)
		h := &host{}
		for range 8 {
			emu, _ := launchDefault(b, srv)
			h.serials = append(h.serials, emu.Serial())
		}
		h.d = startDaemon(b, srv, f.daemonArgs()...)
		return h
	}
	round := func(entry *daemon, hosts []*host) time.Duration {
		start := time.Now()
		var ids []string
		for range fleetBenchRunsPerDevice {
			for _, h := range hosts {
				for _, s := range h.serials {
					ids = append(ids, entry.submit(b, runBody(s, "file://"+apk, sha, "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil)))
				}
			}
		}
		entry.waitStatus(b, ids, 5*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
		took := time.Since(start)
		for _, id := range ids {
			if st := entry.run(b, id).Status; st != agent.RunFinished {
				b.Fatalf("run %s ended %s", id, st)
			}
		}
		return took
	}
	perMin := func(runs int, d time.Duration) float64 { return float64(runs) / d.Minutes() }

	a := newHost()
	round(a.d, []*host{a}) // warm: sessions, installs
	var one, two time.Duration
	for range b.N {
		one += round(a.d, []*host{a})
	}
	bh := newHost()
	round(a.d, []*host{bh}) // warm the second host
	for range b.N {
		two += round(a.d, []*host{a, bh})
	}
	r1 := perMin(b.N*8*fleetBenchRunsPerDevice, one)
	r2 := perMin(b.N*16*fleetBenchRunsPerDevice, two)
	b.ReportMetric(r1, "runs/min-1daemon-8dev")
	b.ReportMetric(r2, "runs/min-2daemons-16dev")
	b.ReportMetric(r2/r1, "ratio-2d/1d")
}
