package postgres_test

import (
	"encoding/json"
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The fleet relay's claim of run heads (ClaimOutbox) reads the unpublished
// events in id order through run_events_unpublished_order (migration 00012;
// 00011 for run_outbox before), not by walking the published events kept
// until retention: here 30,000 events published (and vacuumed) after the
// table was analyzed while they were not (the planner's view of a
// fast-growing outbox), and one unpublished; the head query's plan reads at
// most a few pages.
// BenchmarkFleetControlPlane measured that walk at 30 ms per claim.
func TestClaimHeadsReadOnlyUnpublishedRows(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := storetest.NewRun("T", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO run_events (run_id, sequence, event_id, envelope) SELECT $1, n, 'e' || n, '\x7b7d'::bytea FROM generate_series(1, 30000) n`,
		`ANALYZE run_events`,
		`UPDATE run_events SET published_at = now() WHERE run_id = $1`,
		// Autovacuum's part (the dead row versions go), without a new
		// ANALYZE: the column statistics still say nearly all unpublished.
		`VACUUM run_events`,
		`INSERT INTO run_events (run_id, sequence, event_id, envelope) VALUES ($1, 30001, 'e30001', '\x7b7d'::bytea)`,
	} {
		args := []any{r.RunID}
		if q == `ANALYZE run_events` || q == `VACUUM run_events` {
			args = nil
		}
		if _, err := s.Pool().Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The sweep's head query of outbox_claim.go (claimHeads), as the claim
	// sends it.
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	var raw []byte
	if err := s.Pool().QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT o.run_id FROM run_events o
		WHERE o.published_at IS NULL AND o.run_id <> ALL($1::text[])
		  AND NOT EXISTS (SELECT 1 FROM run_events p WHERE p.run_id = o.run_id AND p.published_at IS NULL AND p.sequence < o.sequence)
		ORDER BY o.id
		LIMIT 64
		FOR UPDATE SKIP LOCKED`, []string{}).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	top := plan[0].Plan
	blocks := top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64)
	if blocks > 40 {
		t.Errorf("the claim's head query read %.0f pages for one unpublished row among 30,000 published, want a few:\n%s", blocks, raw)
	}
}
