package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// copyRun inserts, straight into Postgres, a PENDING run like run id of
// tenant tenant with policy version policy (what the API would refuse),
// and returns its id.
func copyRun(t testing.TB, db, id, tenant string, policy int) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	nid := ulid.MustNew(ulid.Now(), rand.Reader).String()
	if _, err := conn.Exec(ctx, `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at)
		SELECT $1, $2, project_id, 'PENDING', serial, graph, input, $3, now(), now() FROM runs WHERE run_id = $4`, nid, tenant, policy, id); err != nil {
		t.Fatal(err)
	}
	return nid
}

// runLeases are the leases of run id in the fleet's history.
func runLeases(t testing.TB, d *daemon, id string) []agent.Lease {
	t.Helper()
	var out []agent.Lease
	for _, l := range d.leases(t, true) {
		if l.RunID == id {
			out = append(out, l)
		}
	}
	return out
}

// failedWith returns the errorId of the run's agent.run.failed event ("" when none).
func failedWith(t testing.TB, d *daemon, id string) agent.ErrorID {
	t.Helper()
	for _, e := range d.events(t, id) {
		if e.Kind == agent.KindRunFailed {
			var p agent.RunEndedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.ErrorID != nil {
				return *p.ErrorID
			}
		}
	}
	return ""
}

// Issue 23 item 4: two daemons on one Postgres with different --policy
// sets. Daemon A (built-in version 1 only) reaches the device; daemon B
// (--policy version 2) does not. A run submitted to B with policyVersion 2
// is driven by A under version 2, read from the shared store (A failed
// "policy version 2 not found" and took and released the device's lease
// every 2 s before). A run whose version no daemon loaded (put into the
// store behind the API's back) fails once, invalid_request_error, under one
// lease, instead of churning the lease forever.
func TestFleetMixedPolicySets(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons on a real Postgres")
	}
	_, db := startPostgres(t)
	srvA, srvB := simtest.StartADBServer(t), simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srvA)
	appiumURL := "http://127.0.0.1:" + strconv.Itoa(simtest.FreePort(t)) // nobody: a run only has to start
	v2 := filepath.Join(t.TempDir(), "v2.yaml")
	if err := os.WriteFile(v2, []byte("version: 2\nidleHeuristics:\n  minQuietMillis: 200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startDaemon(t, srvA, "--database-url", db, "--appium", appiumURL)
	b := startDaemon(t, srvB, "--database-url", db, "--appium", appiumURL, "--policy", v2)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	body := runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil)
	body["policyVersion"] = 2
	id := b.submit(t, body)

	// A starts it under version 2: agent.run.started names it, and the first
	// node finishes.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var started, node bool
		for _, e := range a.events(t, id) {
			switch e.Kind {
			case agent.KindRunStarted:
				var p agent.RunStartedPayload
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					t.Fatal(err)
				}
				if p.PolicyVersion != 2 {
					t.Fatalf("run started under policy version %d, want 2", p.PolicyVersion)
				}
				started = true
			case agent.KindNodeFinished:
				node = true
			}
		}
		if started && node {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run of policy version 2 not started by the daemon with the device after 90 s; its leases: %v\n%s", runLeases(t, a, id), a.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.call(t, "POST", "/v1/runs/"+id+"/cancel", map[string]any{}, nil)
	a.waitStatus(t, []string{id}, 2*time.Minute, agent.RunCanceled, agent.RunFailed, agent.RunFinished)
	if ls := runLeases(t, a, id); len(ls) != 1 {
		t.Fatalf("run of policy version 2 held %d leases, want 1: %v", len(ls), ls)
	}

	ghost := copyRun(t, db, id, "local", 99)
	a.waitStatus(t, []string{ghost}, 60*time.Second, agent.RunFailed, agent.RunCanceled, agent.RunFinished)
	if st := a.run(t, ghost).Status; st != agent.RunFailed {
		t.Fatalf("run of unknown policy version 99 ended %s, want FAILED", st)
	}
	if got := failedWith(t, a, ghost); got != agent.ErrInvalidRequest {
		t.Fatalf("run of unknown policy version failed with %q, want invalid_request_error", got)
	}
	if ls := runLeases(t, a, ghost); len(ls) > 1 {
		t.Fatalf("run of unknown policy version took %d leases, want at most 1: %v", len(ls), ls)
	}
}

// Issue 23 item 5 through the binary, two daemons on one Postgres: a run
// naming a device no daemon reaches fails once with device_not_found after
// --pending-timeout, without a lease; --max-pending-per-tenant answers a
// tenant's run past the cap 429 in the agent error format, whichever
// daemon it reaches, while another tenant still submits.
func TestFleetPendingTimeoutAndCap(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons on a real Postgres")
	}
	_, db := startPostgres(t)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	appiumURL := "http://127.0.0.1:" + strconv.Itoa(simtest.FreePort(t))
	args := []string{"--database-url", db, "--appium", appiumURL, "--pending-timeout", "3s", "--max-pending-per-tenant", "2"}
	a, b := startDaemon(t, srv, args...), startDaemon(t, simtest.StartADBServer(t), args...)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	body := func(tenant, device string) map[string]any {
		m := runBody(device, "file://"+apk, sha, "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil)
		m["tenantId"] = tenant
		return m
	}
	g1 := a.submit(t, body("bulk", "no-such-device"))
	g2 := b.submit(t, body("bulk", "no-such-device"))
	var e struct {
		Success bool             `json:"success"`
		Errors  []map[string]any `json:"errors"`
	}
	if st := a.call(t, "POST", "/v1/runs", body("bulk", "no-such-device"), &e); st != http.StatusTooManyRequests || e.Success || len(e.Errors) != 1 || e.Errors[0]["error_id"] != string(agent.ErrInvalidRequest) {
		t.Fatalf("third PENDING run of tenant bulk: %d %+v, want 429 invalid_request_error", st, e)
	}
	other := b.submit(t, body("other", emu.Serial()))
	a.waitStatus(t, []string{g1, g2}, 60*time.Second, agent.RunFailed, agent.RunCanceled, agent.RunFinished)
	for _, id := range []string{g1, g2} {
		if got := failedWith(t, a, id); got != agent.ErrDeviceNotFound {
			t.Fatalf("run %s naming no device failed with %q, want device_not_found\n%s", id, got, a.log())
		}
		if ls := runLeases(t, a, id); len(ls) != 0 {
			t.Fatalf("run %s naming no device took leases %v", id, ls)
		}
		n := 0
		for _, e := range a.events(t, id) {
			if e.Kind == agent.KindRunFailed {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("run %s has %d agent.run.failed events, want 1", id, n)
		}
	}
	// The cap counts PENDING runs: with g1 and g2 ended, bulk submits again.
	a.submit(t, body("bulk", "no-such-device"))
	a.waitStatus(t, []string{other}, 2*time.Minute, agent.RunRunning, agent.RunFailed, agent.RunFinished)
	if got := failedWith(t, a, other); got == agent.ErrDeviceNotFound {
		t.Fatalf("run naming a reached device failed %s", got)
	}
}
