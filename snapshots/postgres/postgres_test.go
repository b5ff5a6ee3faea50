package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestPostgresContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store { return testenv.Postgres(t) })
}

// Two daemons opening the same database at once migrate it once; a reopen
// is a no-op; a commit through one store wakes the other's relay (NOTIFY).
func TestPostgresMigrateConcurrentlyAndNotify(t *testing.T) {
	url := testenv.PostgresURL(t)
	var (
		wg     sync.WaitGroup
		stores [3]*postgres.Store
		errs   [3]error
	)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(context.Background(), url, postgres.Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	for _, v := range []int{1, 2} {
		var n int
		if err := stores[0].Pool().QueryRow(t.Context(), `SELECT count(*) FROM goose_db_version WHERE version_id = $1`, v).Scan(&n); err != nil || n != 1 {
			t.Errorf("migration %d recorded %d times (%v), want once", v, n, err)
		}
	}
	a, b := stores[0], stores[1]
	// Take the wake-up b's listener sends when it starts listening: from
	// then on it listens, and the next wake-up is a's commit.
	select {
	case <-b.Commits():
	case <-time.After(5 * time.Second):
		t.Fatal("store b's listener sent no wake-up when it began listening")
	}
	r := storetest.NewRun("T", "emulator-5554")
	if err := a.CreateRun(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := a.CommitStep(t.Context(), storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Commits():
	case <-time.After(5 * time.Second):
		t.Fatal("a commit through store a did not wake store b (LISTEN/NOTIFY)")
	}
}
