package postgres_test

import (
	"encoding/json"
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The local claim finds each run's head with one probe of
// run_events_unpublished, not by testing every unpublished row of its runs
// for an earlier one (the NOT EXISTS of the sweep's head query): here 4 runs
// with 3,000 unpublished events each, claimed 2 runs of 16 rows at a time;
// the statement (heads, locks and rows) reads 36 pages. With the head query
// it replaced (every unpublished row of the runs, each probed for an
// earlier one) in its place: 9,070 pages; at 8 runs in
// BenchmarkRelayVsRawJetStream that was 4,800 rows per claim.
func TestLocalClaimReadsOnlyItsHeads(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	var ids []string
	for range 4 {
		r := storetest.NewRun("T", "emulator-5554")
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO run_events (run_id, sequence, event_id, kind, ts, checksum, envelope)
			SELECT $1, n, $1 || '-' || n, 'k', 'ts', 'c', '\x7b7d'::bytea FROM generate_series(1, 3000) n`, r.RunID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.RunID)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE run_events`); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := s.Pool().QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+postgres.LocalClaimSQL, ids, 2, 16).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	top := plan[0].Plan
	if rows := top["Actual Rows"].(float64); rows != 32 {
		t.Errorf("the claim read %.0f rows, want 2 runs of 16", rows)
	}
	blocks := top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64)
	if blocks > 200 {
		t.Errorf("the local claim read %.0f pages for 2 heads and 32 rows of 4 runs with 3,000 unpublished events each, want a few dozen:\n%s", blocks, raw)
	}
	t.Logf("%.0f pages", blocks)
}
