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
// the statement (heads, locks and rows) reads about 35 pages, planned with
// statistics or without. With the head query it replaced (every unpublished
// row of the runs, each probed for an earlier one) in its place: 9,070
// pages; at 8 runs in BenchmarkRelayVsRawJetStream that was 4,800 rows per
// claim. With the heads found and locked in one CTE, the plan made without
// statistics probed the head once per unpublished row.
func TestLocalClaimReadsOnlyItsHeads(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	var ids []string
	for range 4 {
		r := storetest.NewRun("T", "emulator-5554")
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO run_events (run_id, sequence, event_id, envelope)
			SELECT $1, n, $1 || '-' || n, '\x7b7d'::bytea FROM generate_series(1, 3000) n`, r.RunID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.RunID)
	}
	// Planned as a new store's table is (no statistics: one row per run
	// estimated), then with them.
	for _, analyze := range []bool{false, true} {
		if analyze {
			if _, err := s.Pool().Exec(ctx, `ANALYZE run_events`); err != nil {
				t.Fatal(err)
			}
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
			t.Errorf("analyzed %v: the claim read %.0f rows, want 2 runs of 16", analyze, rows)
		}
		blocks := top["Shared Hit Blocks"].(float64) + top["Shared Read Blocks"].(float64)
		if blocks > 200 {
			t.Errorf("analyzed %v: the local claim read %.0f pages for 2 heads and 32 rows of 4 runs with 3,000 unpublished events each, want a few dozen:\n%s", analyze, blocks, raw)
		}
		t.Logf("analyzed %v: %.0f pages", analyze, blocks)
	}
}

// A run whose head another relay's claim holds is not claimed from a later
// row: two daemons that both committed events of one run (both hold it as
// their own), the first claims its head and two rows; the second's claim,
// meanwhile, gets nothing of the run, and after the first's Finish it
// starts at the first row left unpublished.
func TestLocalClaimSkipsAHeldHead(t *testing.T) {
	url := testenv.PostgresURL(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(t.Context(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	ctx := t.Context()
	x := storetest.NewRun("T", "emulator-5554")
	if err := a.CreateRun(ctx, x); err != nil {
		t.Fatal(err)
	}
	if err := a.CommitStep(ctx, storetest.NodeStep(x, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitStep(ctx, storetest.NodeStep(x, 4, 1, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	held, err := a.ClaimOutbox(ctx, 8, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	if runs := held.Runs(); len(runs) != 1 || len(runs[0]) != 2 || runs[0][0].Sequence != 1 {
		t.Fatalf("a's claim: %v, want run %s from sequence 1, 2 rows", runs, x.RunID)
	}
	other, err := b.ClaimOutbox(ctx, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Released before a's Finish: a claim that locked a later row of the run
	// would hold a's marks.
	other.Release()
	if runs := other.Runs(); len(runs) != 0 {
		t.Fatalf("b claimed %d runs from sequence %d while a held the head", len(runs), runs[0][0].Sequence)
	}
	if n, err := held.Finish(ctx, map[string]int64{x.RunID: 2}); err != nil || n != 2 {
		t.Fatalf("a's Finish marked %d (%v), want 2", n, err)
	}
	next, err := b.ClaimOutbox(ctx, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release()
	if runs := next.Runs(); len(runs) != 1 || runs[0][0].Sequence != 3 || runs[0][len(runs[0])-1].Sequence != 6 {
		t.Fatalf("b's claim after a's Finish: %v, want sequences 3 to 6", runs)
	}
}
