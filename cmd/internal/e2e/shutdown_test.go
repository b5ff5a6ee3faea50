package e2e

import (
	"bufio"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestServeStopsWithAFollowerAttached: SIGTERM to the real `serve` while a run
// is in flight (its ProvisionApp download held by the test) and an SSE
// follower is attached. The order is: stop taking work, end the event
// streams, stop the runs, release their leases, close the store. So the
// follower's stream ends, the HTTP shutdown does not wait on it, the lease is
// released as "shutdown" (not left to expire, not failed on a closed
// store), the daemon exits 0, and after a restart the run resumes and
// finishes with its events once each.
func TestServeStopsWithAFollowerAttached(t *testing.T) {
	slow(t, "a chain through Appium, then a stop")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	g := newGatedAPKs(t, apk)
	d := startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + g.CertFile(t)})

	id := d.submit(t, runBody(emu.Serial(), g.URL("held"), signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	g.waitFetch(t, "held") // ProvisionApp is in flight, the lease held

	// The follower: attached once its first event arrived; ended when the
	// daemon closed the stream.
	attached, ended := make(chan struct{}), make(chan error, 1)
	go func() {
		resp, err := http.Get(d.URL() + "/v1/runs/" + id + "/events?follow=1")
		if err != nil {
			close(attached)
			ended <- err
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		first := true
		for sc.Scan() {
			if first && strings.HasPrefix(sc.Text(), "event: ") {
				first = false
				close(attached)
			}
		}
		if first {
			close(attached)
		}
		ended <- sc.Err()
	}()
	<-attached

	start := time.Now()
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log())
	}
	took := time.Since(start)
	select {
	case <-ended:
	default:
		t.Fatalf("the daemon exited but the follower's stream is still open")
	}
	log := d.log()
	for _, bad := range []string{"did not end in time", "did not stop in time", "release lease"} {
		if strings.Contains(log, bad) {
			t.Fatalf("shutdown log has %q (after %v):\n%s", bad, took, log)
		}
	}
	t.Logf("SIGTERM to exit with a follower attached: %v", took)

	d.start()
	g.Release("held")
	d.waitStatus(t, []string{id}, 2*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if st := d.run(t, id).Status; st != agent.RunFinished {
		t.Fatalf("run %s ended %s after the restart: %v\n%s", id, st, kindsOf(d.events(t, id)), d.log())
	}
	checkRunEvents(t, d.events(t, id), agent.KindRunFinished)
	leases := d.leases(t, true)
	checkLeaseHistory(t, leases)
	if len(leases) != 2 || leases[0].ReleaseReason != agent.LeaseShutdown || leases[1].ReleaseReason != agent.LeaseFinished {
		t.Fatalf("leases %+v: want the first released at shutdown, the second when the run finished", leases)
	}
}
