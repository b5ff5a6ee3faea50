package service_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pg.srv != nil {
		pg.srv.Close()
	}
	os.Exit(code)
}

// newPostgresURL is a fresh database on the package's one real Postgres
// (snapshots/pgtest), started at first use and stopped by TestMain.
func newPostgresURL(t *testing.T) string {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.err = pgtest.Start("") })
	if pg.err != nil {
		t.Fatalf("no Postgres: %v", pg.err)
	}
	url, err := pg.srv.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

func openPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Hold (the one-shot `run`, `runs resume`) ends the node in flight when its
// lease is lost, here taken over by another holder: the run stops, its
// context's cause is ErrLeaseLost, and release leaves the new lease alone.
func TestHoldCancelsNodeInFlightWhenLeaseLost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	r := submit(t, f.newService("serve:test:1", nil), "dev-a")
	lease, runCtx, release, err := service.Hold(ctx, f.store, "dev-a", "run:1", r, 600*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fe := agent.FenceFrom(runCtx); fe == nil || fe.Token != lease.FencingToken {
		t.Fatalf("run context fence %+v, want token %d", fe, lease.FencingToken)
	}
	eng := &agent.Engine{Store: f.store, Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	type result struct {
		status agent.RunStatus
		err    error
	}
	done := make(chan result, 1)
	go func() {
		st, err := eng.Run(runCtx, r, f.graph)
		done <- result{st, err}
	}()
	f.node.waitStarted(t, r)
	if err := f.store.ReleaseLease(ctx, "dev-a", lease.FencingToken, agent.LeaseExpired); err != nil {
		t.Fatal(err)
	}
	thief, err := f.store.AcquireLease(ctx, "dev-a", "serve:other:1", ulid.Make().String(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-f.node.stopped:
		if id != r {
			t.Fatalf("stopped %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node in flight kept running after the lease was lost")
	}
	res := <-done
	if res.err == nil {
		t.Errorf("engine returned %s without error after the lease was lost", res.status)
	}
	if cause := context.Cause(runCtx); !errors.Is(cause, agent.ErrLeaseLost) {
		t.Errorf("run context cause %v, want ErrLeaseLost", cause)
	}
	release(res.status)
	act, err := f.store.ActiveLeases(ctx, agent.Admin())
	if err != nil || len(act) != 1 || act[0].FencingToken != thief.FencingToken {
		t.Errorf("active leases after release: %+v %v; want the other holder's only", act, err)
	}
}

// A hung store (Postgres: the lease row locked by another connection, so
// every renewal of the holder waits): the holder's run is canceled before
// the lease expires by the database's clock, and once the store answers
// again another daemon takes the device over.
func TestHoldHungPostgresCancelsBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	url := newPostgresURL(t)
	a, b := openPostgres(t, url), openPostgres(t, url)
	runA, runB := ulid.Make().String(), ulid.Make().String()
	const ttl = 3 * time.Second
	lease, runCtx, release, err := service.Hold(ctx, a, "emulator-5554", "run:a", runA, ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release(agent.RunRunning)

	// Another connection locks the lease row: the holder's renewals hang.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM device_leases WHERE fencing_token = $1 FOR UPDATE`, lease.FencingToken); err != nil {
		t.Fatal(err)
	}
	select {
	case <-runCtx.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the holder kept driving the device while its store hung")
	}
	var live bool
	var left time.Duration
	if err := b.Pool().QueryRow(ctx, `SELECT expires_at > clock_timestamp(), expires_at - clock_timestamp() FROM device_leases WHERE fencing_token = $1`,
		lease.FencingToken).Scan(&live, &left); err != nil {
		t.Fatal(err)
	}
	if !live {
		t.Fatal("the run was canceled only after its lease expired (by the database's clock)")
	}
	t.Logf("canceled %v before the lease's expiry", left)
	if cause := context.Cause(runCtx); !errors.Is(cause, agent.ErrLeaseLost) {
		t.Errorf("cause %v, want ErrLeaseLost", cause)
	}
	// The store answers again: the other daemon gets the device once the
	// lease has expired (and its grace of TTL/3 passed).
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 4*ttl)
	defer cancel()
	nl, _, releaseB, err := service.Hold(hctx, b, "emulator-5554", "run:b", runB, ttl, nil)
	if err != nil {
		t.Fatalf("the other daemon never got the device: %v", err)
	}
	defer releaseB(agent.RunFinished)
	hist, err := b.LeaseHistory(ctx, agent.Admin(), "emulator-5554")
	if err != nil || len(hist) != 2 || hist[0].ReleaseReason != agent.LeaseExpired || hist[1].FencingToken != nl.FencingToken {
		t.Errorf("history %+v %v; want the hung holder's lease expired, then the new one", hist, err)
	}
}

// Two hosts, each with its own emulator-5554 behind its own adb server, in
// a fleet of two daemons on one Postgres: each daemon runs a run on its own
// emulator-5554 at the same time (both nodes in flight at once), and the
// leases name two devices. Before leases were keyed by the device's fleet
// identity, the second run waited for the first.
func TestTwoHostsRunOnTheirOwnEmulator5554AtOnce(t *testing.T) {
	url := newPostgresURL(t)
	store := openPostgres(t, url)
	f := newFixture(t)
	reach := func(hostID string) func(*service.Config) {
		return func(c *service.Config) {
			c.Store, c.Leases = openPostgres(t, url), openPostgres(t, url)
			c.HolderPrefix = ""
			c.HostID = hostID
			c.Tick = 20 * time.Millisecond
			c.Reachable = servicetest.Reach(func(context.Context) ([]service.Candidate, error) {
				return []service.Candidate{{Serial: "emulator-5554"}}, nil
			})
		}
	}
	a := f.newService("serve:a", reach("0a0a0a0a0a0a"))
	b := f.newService("serve:b", reach("0b0b0b0b0b0b"))
	r1, r2 := submit(t, a, "emulator-5554"), submit(t, a, "emulator-5554")
	start(t, a)
	start(t, b)
	started := f.node.waitStartedN(t, 2, "the two hosts' emulator-5554 running at once")
	if !started[r1] || !started[r2] {
		t.Fatalf("started %v, want %s and %s", started, r1, r2)
	}
	act, err := store.ActiveLeases(context.Background(), agent.Admin())
	if err != nil {
		t.Fatal(err)
	}
	devices := map[string]string{}
	for _, l := range act {
		devices[l.Device] = l.Holder
		if l.Serial != "emulator-5554" {
			t.Errorf("lease %+v: serial %q", l, l.Serial)
		}
	}
	if len(act) != 2 || devices["0a0a0a0a0a0a/emulator-5554"] != "serve:a" || devices["0b0b0b0b0b0b/emulator-5554"] != "serve:b" {
		t.Errorf("active leases %+v, want one per host's emulator-5554", act)
	}
	f.node.open(r1)
	f.node.open(r2)
	waitFor(t, "both runs to finish", func() bool {
		ra, _ := store.GetRun(context.Background(), agent.Admin(), r1)
		rb, _ := store.GetRun(context.Background(), agent.Admin(), r2)
		return ra.Status == agent.RunFinished && rb.Status == agent.RunFinished
	})
}

// OneShot (`run`, `runs resume`) waits while a daemon holds the device,
// then runs under its own lease (released as finished), and reports a lease
// lost under the node in flight as ErrLeaseLost, not as the node's
// cancellation.
func TestOneShotWaitsRunsAndReportsLeaseLost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	svc := f.newService("serve:test:1", func(c *service.Config) { c.HostID = "h1" })
	eng := &agent.Engine{Store: f.store, Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	runner := service.RunnerFunc(func(ctx context.Context, id string) (agent.RunStatus, error) { return eng.Run(ctx, id, f.graph) })
	get := func(id string) agent.Run {
		r, err := f.store.GetRun(ctx, agent.Admin(), id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	daemon, err := f.store.AcquireLease(ctx, "h1/dev-a", "serve:other:1", ulid.Make().String(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := submit(t, svc, "h1/dev-a")
	waited := make(chan error, 1)
	started := make(chan struct{})
	type result struct {
		status agent.RunStatus
		err    error
	}
	done := make(chan result, 1)
	o := service.OneShot{Leases: f.store, Runner: runner, HostID: "h1", Holder: "run:1", LeaseTTL: 600 * time.Millisecond,
		Waiting: func(err error) { waited <- err }, Started: func() { close(started) }}
	go func() {
		st, _, err := o.Run(ctx, get(r))
		done <- result{st, err}
	}()
	if err := <-waited; !errors.Is(err, agent.ErrLeaseHeld) {
		t.Fatalf("waiting for %v, want ErrLeaseHeld", err)
	}
	if err := f.store.ReleaseLease(ctx, daemon.Serial, daemon.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	<-started
	f.node.waitStarted(t, r)
	f.node.open(r)
	if res := <-done; res.err != nil || res.status != agent.RunFinished {
		t.Fatalf("run: %s, %v", res.status, res.err)
	}
	if h := f.history("h1/dev-a"); len(h) != 2 || h[1].Holder != "run:1" || h[1].ReleaseReason != agent.LeaseFinished {
		t.Fatalf("lease history %+v, want run:1's released as finished", h)
	}

	// The lease taken over under the node in flight.
	o.Started = nil
	r2 := submit(t, svc, "h1/dev-a")
	go func() {
		st, _, err := o.Run(ctx, get(r2))
		done <- result{st, err}
	}()
	f.node.waitStarted(t, r2)
	act, err := f.store.ActiveLeases(ctx, agent.Admin())
	if err != nil || len(act) != 1 {
		t.Fatalf("active leases %+v, %v", act, err)
	}
	if err := f.store.ReleaseLease(ctx, act[0].Serial, act[0].FencingToken, agent.LeaseExpired); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AcquireLease(ctx, "h1/dev-a", "serve:other:1", ulid.Make().String(), time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !errors.Is(res.err, agent.ErrLeaseLost) {
			t.Errorf("run after the lease was lost: %s, %v; want ErrLeaseLost", res.status, res.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run went on after its lease was lost")
	}

	if _, _, err := (service.OneShot{Leases: f.store, Runner: runner, HostID: "h1"}).Run(ctx, agent.Run{RunID: r2, Serial: "h2/dev-a"}); agent.Classify(err).ID != agent.ErrInvalidRequest {
		t.Errorf("another host's device: %v", err)
	}
}
