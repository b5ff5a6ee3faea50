package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// cursorAt reads the stored relay cursor (cursor.go).
func cursorAt(t *testing.T, s *Store) int64 {
	t.Helper()
	var c int64
	if err := s.w.QueryRow(`SELECT ` + sqlCursor).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

// unpublishedSeqs is what the relay would read from the start: the
// sequences UnpublishedAfter(0) and Unpublished return (the same set).
func unpublishedSeqs(t *testing.T, s *Store) []int64 {
	t.Helper()
	rows, _, err := s.UnpublishedAfter(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Unpublished(t.Context(), 100)
	if err != nil || len(all) != len(rows) {
		t.Fatalf("Unpublished = %d rows, %v; UnpublishedAfter(0) %d", len(all), err, len(rows))
	}
	var seqs []int64
	for _, o := range rows {
		seqs = append(seqs, o.Sequence)
	}
	return seqs
}

// The stored relay cursor (migration 00014) moves up with the relay's
// marks, down with Requeue (the events sent again are read again), and
// never stays above the highest event id once retention deleted the newest
// events (a new event's rowid is the highest + 1: it would fall below the
// cursor and never be read).
func TestRelayCursorMarksRequeueRetention(t *testing.T) {
	ctx := t.Context()
	s := openGroupStore(t)
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	for step := range 2 {
		if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
	}
	if c := cursorAt(t, s); c != 0 {
		t.Fatalf("cursor before any mark = %d, want 0", c)
	}
	if n, err := s.MarkPublishedUpTo(ctx, r.RunID, 4); err != nil || n != 4 {
		t.Fatalf("MarkPublishedUpTo(4) = %d, %v", n, err)
	}
	if c := cursorAt(t, s); c != 4 {
		t.Errorf("cursor after marking 1..4 = %d, want 4", c)
	}
	if got := unpublishedSeqs(t, s); len(got) != 2 || got[0] != 5 {
		t.Errorf("unpublished after marking 1..4 = %v, want [5 6]", got)
	}
	// Requeue from 3: events 3..4 again, below the cursor.
	if n, err := s.Requeue(ctx, r.RunID, 3); err != nil || n != 2 {
		t.Fatalf("Requeue(3) = %d, %v", n, err)
	}
	if got := unpublishedSeqs(t, s); len(got) != 4 || got[0] != 3 {
		t.Errorf("unpublished after Requeue(3) = %v, want [3 4 5 6]", got)
	}
	if u, _, err := s.OutboxCounts(ctx); err != nil || u != 4 {
		t.Errorf("OutboxCounts after Requeue(3) = %d, %v; want 4", u, err)
	}
	if n, err := s.MarkPublishedUpTo(ctx, r.RunID, 6); err != nil || n != 4 {
		t.Fatalf("MarkPublishedUpTo(6) = %d, %v", n, err)
	}
	if c := cursorAt(t, s); c != 6 {
		t.Errorf("cursor after marking all = %d, want 6", c)
	}
	// Retention deletes the run, the table's every event: the cursor comes
	// down with it, and the next run's events are read.
	if err := s.SetStatus(ctx, r.RunID, []agent.RunStatus{agent.RunPending}, agent.RunFinished); err != nil {
		t.Fatal(err)
	}
	if res, err := s.PruneRuns(ctx, time.Now().Add(time.Hour), 10); err != nil || res.Runs != 1 || res.Events != 6 || res.Snapshots != 2 {
		t.Fatalf("PruneRuns = %+v, %v; want 1 run, 6 events, 2 snapshots", res, err)
	}
	if c := cursorAt(t, s); c != 0 {
		t.Errorf("cursor after retention emptied run_events = %d, want 0", c)
	}
	next := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(next, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	if got := unpublishedSeqs(t, s); len(got) != 3 {
		t.Errorf("unpublished after retention and a new step = %v, want the new run's 1..3", got)
	}
}

// A node step's commit (3 events and a snapshot) writes the pages of the
// B-trees a query reads and no others (migration 00014): the event rows,
// run_events_run_sequence_key, and the database header when the file grows,
// about 4 WAL frames (each two pwrite64s, BenchmarkCommitStep); with the
// event_id key, the unpublished index and agent_state_snapshot it was 8.3.
func TestStepCommitWALFrames(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, t.TempDir()+"/agent.db", Options{CheckpointInCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	// No checkpoint from here on, and the WAL emptied: its frame count is
	// then the frames the commits wrote.
	for _, q := range []string{`PRAGMA wal_autocheckpoint = 0`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const steps = 300
	for step := range steps {
		if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
	}
	var busy, frames, done int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
		t.Fatal(err)
	}
	perCommit := float64(frames) / steps
	t.Logf("%d WAL frames for %d step commits: %.2f per commit", frames, steps, perCommit)
	if perCommit > 4.5 {
		t.Errorf("%.2f WAL frames per step commit, want at most 4.5 (two pwrite64s each: <= 9 of issue 26's 10)", perCommit)
	}
}
