package postgres_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The fleet relay's sweep (ClaimOutbox) finds the runs with events to
// publish through run_publish_pending (migration 00015; the unpublished
// events in id order through run_events_unpublished_order before, 00011 for
// run_outbox), not by walking every run kept until retention: here 20,000
// runs caught up (and vacuumed) after the table was analyzed while they were
// not (the planner's view of a fast-growing fleet), and one with events to
// publish; the sweep's statement reads at most a few pages.
// BenchmarkFleetControlPlane measured the walk of published rows at 30 ms
// per claim.
func TestClaimHeadsReadOnlyUnpublishedRows(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := storetest.NewRun("T", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO runs (run_id, tenant_id, status, created_at, updated_at) SELECT 'r' || n, 'T', 'FINISHED', now(), now() FROM generate_series(1, 20000) n`,
		`INSERT INTO run_publish (run_id, committed_seq) SELECT 'r' || n, 3 FROM generate_series(1, 20000) n`,
		`ANALYZE run_publish`,
		`UPDATE run_publish SET published_seq = committed_seq`,
		// Autovacuum's part (the dead row versions go), without a new
		// ANALYZE: the statistics still say nearly all pending.
		`VACUUM run_publish`,
		`INSERT INTO run_publish (run_id, committed_seq) VALUES ('` + r.RunID + `', 3)`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The sweep's statement (no runs of its own, none excluded).
	top := explain(t, tx, postgres.SQLLockPending, nil, []string{}, 64)
	if n := top["Actual Rows"].(float64); n != 1 {
		t.Errorf("the sweep locked %.0f runs, want the 1 with events to publish", n)
	}
	if blocks := pages(top); blocks > 40 {
		t.Errorf("the sweep read %.0f pages for one run with events to publish among 20,000 caught up, want a few", blocks)
	}
}
