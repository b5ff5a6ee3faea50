package postgres_test

import (
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// A step commit's update of its run's committed_seq is a HOT update while
// the run has events to publish (migration 00015): committed_seq is in no
// index and the pending index's predicate (the generated pending) keeps
// its value, so the commit writes no entry in run_publish_pkey or
// run_publish_pending and no row lock (238 WAL bytes of a step commit's
// 2,475 before). Before, committed_seq was in run_publish_pending's
// predicate and every commit's INSERT ... ON CONFLICT DO UPDATE was a
// new version with two index entries: 0 of 59 updates HOT.
func TestStepCommitUpdatesRunPublishHOT(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	const steps = 60
	for step := range steps {
		if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
	}
	var committed int64
	var pending bool
	if err := s.Pool().QueryRow(ctx, `SELECT committed_seq, pending FROM run_publish WHERE run_id = $1`, r.RunID).Scan(&committed, &pending); err != nil {
		t.Fatal(err)
	}
	if committed != 3*steps || !pending {
		t.Fatalf("run_publish: committed_seq %d pending %v, want %d true", committed, pending, 3*steps)
	}
	// Statistics of the pool's backends, as they flush them (at a
	// transaction's end at most once a second, idle ones within 10 s).
	var upd, hot int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := s.Pool().QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'run_publish'`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		if upd >= steps-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d updates of run_publish reported 20 s after %d commits", upd, steps)
		}
	}
	if hot != upd {
		t.Errorf("run_publish: %d of %d updates HOT, want all (the first commit inserts the row)", hot, upd)
	}
}
