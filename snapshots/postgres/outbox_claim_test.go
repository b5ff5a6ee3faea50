package postgres_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The claim reads only its runs' rows from their positions (migration
// 00015): here 4 runs with 3,000 events each, of which the first 1,000 are
// published by the run's position, claimed 2 runs of 16 rows at a time;
// the two statements (the runs locked, their rows read) read a few dozen
// pages, planned with statistics or without (without, the rows were read
// by a bitmap scan of every event above the position and sorted: 105
// pages, until the read was bounded to the next rows' sequences), and the
// rows start above the position. (Before 00015 the claim found each run's head in the partial
// index of unpublished events: 36 pages, and 9,070 with the head query
// before that.)
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
		// What the step commits would have recorded, and a relay's marks.
		if _, err := s.Pool().Exec(ctx, `INSERT INTO run_publish (run_id, committed_seq, published_seq) VALUES ($1, 3000, 1000)`, r.RunID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.RunID)
	}
	for _, analyze := range []bool{false, true} {
		if analyze {
			if _, err := s.Pool().Exec(ctx, `ANALYZE run_events; ANALYZE run_publish`); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var locked []string
		lockPlan := explain(t, tx, postgres.SQLLockPending, ids, nil, 2)
		if rows := lockPlan["Actual Rows"].(float64); rows != 2 {
			t.Errorf("analyzed %v: %v runs locked, want 2", analyze, rows)
		}
		rows, err := tx.Query(ctx, postgres.SQLLockPending, ids, nil, 2)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var pos, seq int64
			if err := rows.Scan(&id, &pos, &seq); err != nil {
				t.Fatal(err)
			}
			locked = append(locked, id)
		}
		rows.Close()
		readPlan := explain(t, tx, postgres.SQLReadClaimed, locked, 16)
		if n := readPlan["Actual Rows"].(float64); n != 32 {
			t.Errorf("analyzed %v: the claim read %.0f rows, want 2 runs of 16", analyze, n)
		}
		var first int64
		if err := tx.QueryRow(ctx, `SELECT min(sequence) FROM (`+postgres.SQLReadClaimed+`) c`, locked, 16).Scan(&first); err != nil || first != 1001 {
			t.Errorf("analyzed %v: the claim's first row %d (%v), want 1001 (above the position)", analyze, first, err)
		}
		tx.Rollback(ctx)
		blocks := pages(lockPlan) + pages(readPlan)
		if blocks > 60 {
			t.Errorf("analyzed %v: the claim read %.0f pages for 2 runs' 32 rows of 4 runs with 3,000 events each, want a few dozen", analyze, blocks)
		}
		t.Logf("analyzed %v: %.0f pages (lock %.0f, rows %.0f)", analyze, blocks, pages(lockPlan), pages(readPlan))
	}
}

// explain runs EXPLAIN (ANALYZE, BUFFERS) of q in tx and returns its top
// plan node.
func explain(t *testing.T, tx pgx.Tx, q string, args ...any) map[string]any {
	t.Helper()
	var raw []byte
	if err := tx.QueryRow(t.Context(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+q, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	return plan[0].Plan
}

// pages is a plan node's shared buffers hit or read.
func pages(plan map[string]any) float64 {
	hit, _ := plan["Shared Hit Blocks"].(float64)
	read, _ := plan["Shared Read Blocks"].(float64)
	return hit + read
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

// A claim's marks leave the event rows as they are (migration 00015): the
// runs' positions move, no event row gets a new version. Before, each mark
// wrote one per event (not a HOT update: published_at was in the partial
// indexes' predicates), envelope and unique-key entries included:
// BenchmarkRelayVsRawJetStream's relay rounds wrote 890-980 WAL bytes per
// event, 0.2-0.5 now.
func TestClaimMarksLeaveEventRows(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	var runs []string
	for range 2 {
		r := storetest.NewRun("T", "emulator-5554")
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		for step := range 20 {
			if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
				t.Fatal(err)
			}
		}
		runs = append(runs, r.RunID)
	}
	versions := func() map[string]string {
		rows, err := s.Pool().Query(ctx, `SELECT event_id, ctid::text || '/' || xmin::text FROM run_events`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, v string
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			out[id] = v
		}
		return out
	}
	before := versions()
	c, err := s.ClaimOutbox(ctx, 8, 1024)
	if err != nil {
		t.Fatal(err)
	}
	up := map[string]int64{}
	for _, run := range c.Runs() {
		up[run[0].RunID] = run[len(run)-1].Sequence
	}
	if n, err := c.Finish(ctx, up); err != nil || n != 120 {
		t.Fatalf("Finish marked %d (%v), want 120", n, err)
	}
	after := versions()
	changed := 0
	for id, v := range before {
		if after[id] != v {
			changed++
		}
	}
	if changed > 0 || len(after) != 120 {
		t.Errorf("%d of %d event rows got a new version from the marks, want none", changed, len(after))
	}
	if rows, err := s.Unpublished(ctx, 10); err != nil || len(rows) != 0 {
		t.Errorf("after the marks: %d rows unpublished (%v), want none", len(rows), err)
	}
}

// commitSteps creates a run and commits steps node steps (3 events each).
func commitSteps(t *testing.T, s *postgres.Store, steps int) agent.Run {
	t.Helper()
	r := storetest.NewRun("T", "emulator-5554")
	if err := s.CreateRun(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	for step := range steps {
		if err := s.CommitStep(t.Context(), storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// unpublishedSeqs is s's waiting sequences of run.
func unpublishedSeqs(t *testing.T, s *postgres.Store, run string) []int64 {
	t.Helper()
	rows, err := s.Unpublished(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, o := range rows {
		if o.RunID == run {
			out = append(out, o.Sequence)
		}
	}
	return out
}

// A Requeue while another relay's claim holds the run wins over that
// claim's Finish: the requeued events wait again, and the claim's rows
// with them (published twice, deduplicated by the stream), rather than
// the Finish moving the run's position over the requeued ones.
func TestRequeueDuringAClaimWins(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := commitSteps(t, s, 2)
	if n, err := s.MarkPublishedUpTo(ctx, r.RunID, 3); err != nil || n != 3 {
		t.Fatalf("MarkPublishedUpTo(3) = %d, %v", n, err)
	}
	c, err := s.ClaimOutbox(ctx, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	if runs := c.Runs(); len(runs) != 1 || runs[0][0].Sequence != 4 {
		t.Fatalf("claim: %v, want the run from sequence 4", runs)
	}
	if n, err := s.Requeue(ctx, r.RunID, 2); err != nil || n != 2 {
		t.Fatalf("Requeue(from 2) = %d, %v; want 2", n, err)
	}
	if n, err := c.Finish(ctx, map[string]int64{r.RunID: 6}); err != nil || n != 0 {
		t.Errorf("Finish after the Requeue marked %d (%v), want 0", n, err)
	}
	if got := unpublishedSeqs(t, s, r.RunID); !slices.Equal(got, []int64{2, 3, 4, 5, 6}) {
		t.Errorf("waiting: %v, want 2 to 6", got)
	}
}

// A run whose events were all marked one by one, out of order (so its
// position stayed behind), is claimed with nothing to publish once, and
// its position is moved over them: the pending index stops naming it.
func TestClaimMovesPositionOverSingleMarks(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := commitSteps(t, s, 1)
	for _, seq := range []int64{3, 2, 1} {
		if err := s.MarkPublished(ctx, r.RunID, seq); err != nil {
			t.Fatal(err)
		}
	}
	if got := unpublishedSeqs(t, s, r.RunID); len(got) != 0 {
		t.Fatalf("waiting after the single marks: %v", got)
	}
	c, err := s.ClaimOutbox(ctx, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	if runs := c.Runs(); len(runs) != 0 {
		t.Errorf("claimed %v, want nothing", runs)
	}
	c.Release()
	var pos int64
	var pending bool
	if err := s.Pool().QueryRow(ctx, `SELECT published_seq, committed_seq > published_seq FROM run_publish WHERE run_id = $1`, r.RunID).Scan(&pos, &pending); err != nil || pos != 3 || pending {
		t.Errorf("position %d, pending %v (%v); want 3, not pending", pos, pending, err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(r, 4, 1, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	if got := unpublishedSeqs(t, s, r.RunID); !slices.Equal(got, []int64{4, 5, 6}) {
		t.Errorf("waiting after a new step: %v, want 4 to 6", got)
	}
}

// A claim holds only the runs it claims: two claims open at once (a
// relay's two claim workers) of 8 runs, 4 each, get 4 runs each, all
// different. When the lock was tried in a subquery the planner sorted
// after it, so the first claim held all 8 runs and the second got none.
func TestClaimLocksOnlyTheRunsItClaims(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	for range 8 {
		commitSteps(t, s, 1)
	}
	seen := map[string]bool{}
	for i := range 2 {
		c, err := s.ClaimOutbox(ctx, 4, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		for _, run := range c.Runs() {
			if seen[run[0].RunID] {
				t.Errorf("claim %d: run %s claimed twice", i, run[0].RunID)
			}
			seen[run[0].RunID] = true
		}
		if len(c.Runs()) != 4 {
			t.Errorf("claim %d of two open at once: %d runs, want 4", i, len(c.Runs()))
		}
	}
}
