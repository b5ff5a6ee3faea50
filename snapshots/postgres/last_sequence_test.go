package postgres_test

import (
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// A step commit reads its run's last sequence as one index entry, however
// long the run: the statement is prepared while run_events is nearly empty
// (a new store, no statistics), and the plan the server keeps for it must
// not be one that reads every key of the run (MAX(sequence)'s was: 2,100
// entries per commit after 1,500 steps, the cluster's CPU per commit 400 ->
// 1,470 µs in BenchmarkCommitStep/postgres).
func TestLastSequenceReadsOneKey(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	for step := range 400 {
		if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
	}
	// Statistics of the pool's backends, as they flush them (at a
	// transaction's end at most once a second, idle ones within 10 s).
	var scans, read int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := s.Pool().QueryRow(ctx, `SELECT idx_scan, idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'run_events_run_sequence_key'`).Scan(&scans, &read); err != nil {
			t.Fatal(err)
		}
		if scans >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d scans of run_events_run_sequence_key reported 20 s after 400 commits", scans)
		}
	}
	if read > 2*scans {
		t.Errorf("run_events_run_sequence_key: %d entries read in %d scans (%.0f per scan), want about one", read, scans, float64(read)/float64(scans))
	}
}
