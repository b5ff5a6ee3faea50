package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The writer runs without SQLite's automatic checkpoint (the checkpointer
// does it off the commits) and keeps the savepoints' sub-journal in memory;
// the benchmark options put SQLite's defaults back.
func TestWriterPragmas(t *testing.T) {
	for _, tc := range []struct {
		o                  Options
		autockpt, tempStor int
		checkpointer       bool
	}{
		{Options{}, 0, 2, true},
		{Options{CheckpointInCommit: true, DiskSubJournal: true}, 1000, 0, false},
	} {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), tc.o)
		if err != nil {
			t.Fatal(err)
		}
		var autockpt, tempStore int
		if err := s.w.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&autockpt); err != nil {
			t.Fatal(err)
		}
		if err := s.w.QueryRow(`PRAGMA temp_store`).Scan(&tempStore); err != nil {
			t.Fatal(err)
		}
		if autockpt != tc.autockpt || tempStore != tc.tempStor || (s.ckpt != nil) != tc.checkpointer {
			t.Errorf("%+v: writer wal_autocheckpoint = %d, temp_store = %d, checkpointer %v; want %d, %d, %v",
				tc.o, autockpt, tempStore, s.ckpt != nil, tc.autockpt, tc.tempStor, tc.checkpointer)
		}
		s.Close()
	}
}

// commitSteps commits steps node steps on each of runs new runs at once.
func commitSteps(t *testing.T, s *Store, runs, steps int) {
	t.Helper()
	var wg sync.WaitGroup
	for range runs {
		r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
		if err := s.CreateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range steps {
				if err := s.CommitStep(context.Background(), storetest.NodeStep(r, int64(1+3*i), i, "EnsureDevice")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With the writer's automatic checkpoint off, the checkpointer copies the
// WAL back into the database file after commits, nothing else does.
func TestCheckpointerCopiesWALBack(t *testing.T) {
	s := openGroupStore(t)
	s.ckpt.interval = 10 * time.Millisecond
	before := fileSize(t, s.path)
	passes := s.ckpt.passes.Load()
	commitSteps(t, s, 4, 50)
	waitFor(t, "a background checkpoint", func() bool { return s.ckpt.passes.Load() > passes })
	waitFor(t, "the database file to grow", func() bool { return fileSize(t, s.path) > before })
	if f := s.ckpt.failures.Load(); f != 0 {
		t.Errorf("%d checkpoints failed", f)
	}
	// Everything committed is in the file and the WAL alike: a reopen reads it.
	n := 0
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM run_events`).Scan(&n); err != nil || n != 4*50*3 {
		t.Errorf("run_events has %d rows (%v), want %d", n, err, 4*50*3)
	}
}

// Under commits that never pause, background checkpoints seldom find the WAL
// without a commit in flight; the pass between group commits starts the WAL
// over, so its file stays bounded instead of holding every page written.
func TestCheckpointerBoundsWALUnderSteadyCommits(t *testing.T) {
	s := openGroupStore(t)
	s.ckpt.interval = 5 * time.Millisecond
	s.ckpt.restartFrames = 64
	commitSteps(t, s, 16, 60)
	waitFor(t, "a checkpoint between group commits", func() bool { return s.ckpt.between.Load() > 0 })
	// 960 steps wrote several thousand WAL pages (4 KiB each): bounded, the
	// file holds about a thousand (7,000 without that pass, here).
	var pages int64
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM run_events`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	wal := fileSize(t, s.path+"-wal")
	if limit := int64(3000 * (4096 + 24)); wal > limit {
		t.Errorf("WAL file is %d bytes (%d pages) after %d events; want at most %d", wal, wal/(4096+24), pages, limit)
	}
	t.Logf("WAL file %d pages; %d passes, %d between group commits", wal/(4096+24), s.ckpt.passes.Load(), s.ckpt.between.Load())
}
