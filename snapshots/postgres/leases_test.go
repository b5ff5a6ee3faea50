package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func newPostgresClock(t *testing.T, url string, clock agent.Clock) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{Clock: clock, LeaseClock: clock, NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPostgresLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, clock agent.Clock) agent.Leases {
		return newPostgresClock(t, testenv.PostgresURL(t), clock)
	})
}

func TestPostgresFencing(t *testing.T) {
	storetest.RunFencing(t, func(t *testing.T, clock agent.Clock) storetest.LeaseStore {
		return newPostgresClock(t, testenv.PostgresURL(t), clock)
	})
}

// Two stores (two daemons) on one database race for one device: one wins.
func TestPostgresLeasesAcrossStores(t *testing.T) {
	url := testenv.PostgresURL(t)
	clock := storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var stores [4]*postgres.Store
	for i := range stores {
		stores[i] = newPostgresClock(t, url, clock)
	}
	for round := range 5 {
		serial := "emulator-" + string(rune('a'+round))
		res := make(chan error, 2*len(stores))
		for i, s := range stores {
			for j := range 2 {
				go func() {
					_, err := s.AcquireLease(t.Context(), serial, "daemon-"+string(rune('0'+i))+string(rune('0'+j)), storetest.NewRun("T", serial).RunID, time.Minute)
					res <- err
				}()
			}
		}
		won := 0
		for range 2 * len(stores) {
			switch err := <-res; {
			case err == nil:
				won++
			case !errors.Is(err, agent.ErrLeaseHeld):
				t.Errorf("round %d: %v, want ErrLeaseHeld", round, err)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d acquisitions won, want 1", round, won)
		}
	}
}

// The partial unique index is the last guard: an active row another writer
// inserted (without the advisory lock), committed while AcquireLease waits
// on it, makes AcquireLease fail with ErrLeaseHeld, not a raw error.
func TestPostgresLeaseUniqueIndexIsLastGuard(t *testing.T) {
	url := testenv.PostgresURL(t)
	s := newPostgresClock(t, url, agent.SystemClock{})
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at)
		VALUES ('emulator-5554', 'emulator-5554', 'rogue', 'run-x', now(), now(), now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireLease(t.Context(), "emulator-5554", "daemon-1", "run-y", time.Minute)
		done <- err
	}()
	// Let AcquireLease reach its INSERT and block on the uncommitted key.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO device_leases%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("AcquireLease never waited on the uncommitted row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, agent.ErrLeaseHeld) {
		t.Fatalf("AcquireLease = %v, want ErrLeaseHeld", err)
	}
	ls, err := s.ActiveLeases(t.Context(), agent.Admin())
	if err != nil || len(ls) != 1 || ls[0].Holder != "rogue" {
		t.Errorf("active = %+v, %v; want the rogue lease only", ls, err)
	}
}

// skewedClock is the system clock off by d (a daemon without NTP).
type skewedClock time.Duration

func (d skewedClock) Now() time.Time { return time.Now().Add(time.Duration(d)) }

// Lease times are the database's clock, not the daemon's: a daemon whose
// clock is two hours behind does not hand out already-expired leases, one two
// hours ahead does not see live leases as expired, and the times stored are
// the server's.
func TestPostgresLeaseTimesAreTheDatabaseClock(t *testing.T) {
	url := testenv.PostgresURL(t)
	open := func(skew time.Duration) *postgres.Store {
		s, err := postgres.Open(context.Background(), url, postgres.Options{Clock: skewedClock(skew), NoListen: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	behind, ahead := open(-2*time.Hour), open(2*time.Hour)
	ctx := t.Context()
	run := storetest.NewRun("T", "emulator-5554")
	if err := behind.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	l, err := behind.AcquireLease(ctx, "emulator-5554", "daemon-behind", run.RunID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := behind.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	if d := dbNow.Sub(l.AcquiredAt); d < 0 || d > 30*time.Second || l.ExpiresAt.Sub(l.AcquiredAt) != time.Minute {
		t.Errorf("lease acquired %v, expires %v; the database's clock reads %v", l.AcquiredAt, l.ExpiresAt, dbNow)
	}
	if _, err := ahead.AcquireLease(ctx, "emulator-5554", "daemon-ahead", storetest.NewRun("T", "emulator-5554").RunID, time.Minute); !errors.Is(err, agent.ErrLeaseHeld) {
		t.Fatalf("a daemon two hours ahead took a live lease: %v", err)
	}
	nl, err := behind.RenewLease(ctx, "emulator-5554", l.FencingToken, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if nl.ExpiresAt.Before(l.ExpiresAt) || nl.ExpiresAt.Sub(nl.RenewedAt) != time.Minute {
		t.Errorf("renewed %+v after %+v", nl, l)
	}
	// A step fenced by the live lease commits from the skewed daemon.
	st := storetest.NodeStep(run, 1, 0, "EnsureDevice")
	st.Fence = &agent.Fence{Serial: "emulator-5554", Token: l.FencingToken}
	if err := behind.CommitStep(ctx, st); err != nil {
		t.Errorf("fenced commit under a live lease from a skewed daemon: %v", err)
	}
	if err := ahead.ReleaseLease(ctx, "emulator-5554", l.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	h, err := ahead.LeaseHistory(ctx, agent.Admin(), "emulator-5554")
	if err != nil || len(h) != 1 || h[0].ReleasedAt == nil || h[0].ReleasedAt.Sub(dbNow) > time.Minute || h[0].ReleasedAt.Before(nl.RenewedAt) {
		t.Errorf("released %+v %v; want the database's time", h, err)
	}
}

// A lease acquired while another transaction releases the device's current
// lease (a restarted daemon taking back its predecessor's leases holds the
// row lock) starts after that release: the acquisition reads the store's
// clock once it holds the row, not before waiting for it. TestFleetChaos saw
// a lease history where a run's new lease began 66 ms before its previous
// one was released.
func TestPostgresAcquireAfterAConcurrentRelease(t *testing.T) {
	ctx := t.Context()
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(ctx, url, postgres.Options{NoListen: true}) // the database's clock
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	run := storetest.NewRun("T", "emulator-5554")
	old, err := s.AcquireLease(ctx, "emulator-5554", "serve:old", run.RunID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	releaser, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer releaser.Close(context.Background())
	tx, err := releaser.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM device_leases WHERE fencing_token = $1 FOR UPDATE`, old.FencingToken); err != nil {
		t.Fatal(err)
	}

	got := make(chan error, 1)
	var lease agent.Lease
	go func() {
		var err error
		lease, err = s.AcquireLease(ctx, "emulator-5554", "serve:new", run.RunID, time.Minute)
		got <- err
	}()
	// Wait until the acquisition waits on the row lock.
	watcher, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	for waiting := false; !waiting; {
		if err := watcher.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			t.Fatalf("the acquisition did not wait for the row lock: %+v %v", lease, err)
		default:
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE device_leases SET released_at = clock_timestamp(), release_reason = 'holder_lost' WHERE fencing_token = $1`, old.FencingToken); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	hist, err := s.LeaseHistory(ctx, agent.Admin(), "")
	if err != nil || len(hist) != 2 || hist[0].ReleasedAt == nil {
		t.Fatalf("history %+v, %v", hist, err)
	}
	if lease.AcquiredAt.Before(*hist[0].ReleasedAt) {
		t.Fatalf("lease %d acquired at %v, before lease %d was released at %v", lease.FencingToken, lease.AcquiredAt, old.FencingToken, *hist[0].ReleasedAt)
	}
}

func TestPostgresQueue(t *testing.T) {
	storetest.RunQueue(t, func(t *testing.T, clock agent.Clock) storetest.QueueStore {
		return newPostgresClock(t, testenv.PostgresURL(t), clock)
	})
}

// RenewLeases renews a daemon's leases in one statement and reports each
// lease lost on its own: a released one, an expired one, one taken over
// after its TTL (its old token), a token that never was; the live ones are
// renewed by the lease clock and keep their tokens, and the takeover's new
// lease is untouched by a batch naming the old token.
func TestPostgresRenewLeasesReportsEachLost(t *testing.T) {
	url := testenv.PostgresURL(t)
	clock := storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := newPostgresClock(t, url, clock)
	ctx := t.Context()
	const ttl = 30 * time.Second
	acquire := func(serial string, d time.Duration) agent.Lease {
		t.Helper()
		l, err := s.AcquireLease(ctx, "host/"+serial, "serve:a", storetest.NewRun("T", serial).RunID, d)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	live1, released, expiring, live2 := acquire("emulator-5554", ttl), acquire("emulator-5556", ttl), acquire("emulator-5558", 10*time.Second), acquire("emulator-5560", ttl)
	if err := s.ReleaseLease(ctx, released.Serial, released.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second) // expiring expired 10 s ago; its grace too
	taker, err := s.AcquireLease(ctx, "host/emulator-5558", "serve:b", storetest.NewRun("T", "emulator-5558").RunID, ttl)
	if err != nil {
		t.Fatalf("takeover after the TTL: %v", err)
	}
	fences := []agent.Fence{
		{Serial: live2.Serial, Token: live2.FencingToken},
		{Serial: released.Serial, Token: released.FencingToken},
		{Serial: expiring.Serial, Token: expiring.FencingToken},
		{Serial: "emulator-5562", Token: taker.FencingToken + 100},
		{Serial: live1.Serial, Token: live1.FencingToken},
		{Serial: "emulator-5554", Token: live2.FencingToken}, // another lease's token under this serial
	}
	renewed, lost, err := s.RenewLeases(ctx, fences, ttl)
	if err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	for i, f := range fences {
		wantLost := i != 0 && i != 4
		switch {
		case wantLost && !errors.Is(lost[i], agent.ErrLeaseLost):
			t.Errorf("fence %d %+v: %v, want ErrLeaseLost", i, f, lost[i])
		case !wantLost && lost[i] != nil:
			t.Errorf("fence %d %+v: %v, want renewed", i, f, lost[i])
		case !wantLost && (renewed[i].FencingToken != f.Token || renewed[i].Serial != f.Serial || !renewed[i].RenewedAt.Equal(now) || !renewed[i].ExpiresAt.Equal(now.Add(ttl))):
			t.Errorf("fence %d %+v renewed as %+v at %v", i, f, renewed[i], now)
		}
	}
	h, err := s.LeaseHistory(ctx, agent.Admin(), "host/emulator-5558")
	if err != nil || len(h) != 2 || !h[1].RenewedAt.Equal(taker.RenewedAt) || h[1].FencingToken != taker.FencingToken {
		t.Errorf("the takeover's lease after a batch naming the old token: %+v %v", h, err)
	}
	// Each row renewed is the store's: a later acquisition by another
	// holder is refused until the renewed expiry.
	clock.Advance(ttl - time.Second)
	if _, err := s.AcquireLease(ctx, "host/emulator-5554", "serve:b", storetest.NewRun("T", "emulator-5554").RunID, ttl); !errors.Is(err, agent.ErrLeaseHeld) {
		t.Errorf("acquisition before the renewed expiry: %v, want ErrLeaseHeld", err)
	}
	if _, _, err := s.RenewLeases(ctx, fences, 0); err == nil {
		t.Error("RenewLeases with ttl 0: no error")
	}
	if r, l, err := s.RenewLeases(ctx, nil, ttl); err != nil || len(r)+len(l) != 0 {
		t.Errorf("RenewLeases of no fence: %v %v %v", r, l, err)
	}
}

// BenchmarkLeaseRenewals: one host's 32 leases renewed at a heartbeat one
// statement each (RenewLease, what a daemon did before it renewed in
// batches) and all in one statement (RenewLeases), side by side on real
// Postgres: the server's CPU per lease renewed (every process of the test
// cluster, pgtest.ClusterCPU, over the sub-benchmark) and the statements
// per host per heartbeat.
func BenchmarkLeaseRenewals(b *testing.B) {
	const leases = 32
	for _, batch := range []bool{false, true} {
		name := "one-by-one"
		if batch {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s, err := postgres.Open(ctx, testenv.PostgresURL(b), postgres.Options{NoListen: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var fences []agent.Fence
			for i := range leases {
				serial := fmt.Sprintf("emulator-%d", 5554+2*i)
				l, err := s.AcquireLease(ctx, "host/"+serial, "serve:a", storetest.NewRun("T", serial).RunID, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				fences = append(fences, agent.Fence{Serial: l.Serial, Token: l.FencingToken})
			}
			var dir string
			if err := s.Pool().QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
				b.Fatal(err)
			}
			cpu0, err := pgtest.ClusterCPU(dir)
			if err != nil {
				b.Fatal(err)
			}
			beats := 0
			for b.Loop() {
				beats++
				if batch {
					_, lost, err := s.RenewLeases(ctx, fences, time.Hour)
					if err != nil || errors.Join(lost...) != nil {
						b.Fatal(err, errors.Join(lost...))
					}
					continue
				}
				for _, f := range fences {
					if _, err := s.RenewLease(ctx, f.Serial, f.Token, time.Hour); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu1, err := pgtest.ClusterCPU(dir)
			if err != nil {
				b.Fatal(err)
			}
			statements := leases
			if batch {
				statements = 1
			}
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(beats*leases), "server-cpu-us/renewal")
			b.ReportMetric(float64(statements), "statements/host-beat")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(beats*leases), "wall-us/renewal")
		})
	}
}
