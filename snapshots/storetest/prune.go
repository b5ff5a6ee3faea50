package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// PruneStore is a store with leases and retention (both of ours).
type PruneStore interface {
	agent.Store
	agent.Leases
	agent.Pruner
}

// RunPrune runs the retention contract (agent.Pruner). newStores returns n
// fresh stores sharing one empty database (n daemons of a fleet, or a daemon
// and the CLI on one file), their times from clock.
func RunPrune(t *testing.T, newStores func(t *testing.T, clock agent.Clock, n int) []PruneStore) {
	t.Run("DeletesOnlyOldEndedRuns", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		testPruneSelection(t, newStores(t, c, 1)[0], c)
	})
	t.Run("Batches", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		testPruneBatches(t, newStores(t, c, 1)[0], c)
	})
	t.Run("ConcurrentPruners", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		testPruneConcurrent(t, newStores(t, c, 3), c)
	})
}

// endedRun creates a run of serial with one committed node step, a control
// request and a released lease, moves it to status at the clock's time and
// marks its outbox rows published unless unpublished.
func endedRun(t *testing.T, s PruneStore, serial string, status agent.RunStatus, unpublished bool) agent.Run {
	t.Helper()
	r := mustCreate(t, s, NewRun("t1", serial))
	l := mustAcquire(t, s, serial, "daemon-1", r.RunID, leaseTTL)
	mustCommit(t, s, NodeStep(r, 1, 0, "EnsureDevice"))
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: r.RunID, Kind: agent.KindPauseRequested}); err != nil {
		t.Fatalf("RequestControl: %v", err)
	}
	if status != "" {
		if err := s.SetStatus(ctx(t), r.RunID, []agent.RunStatus{agent.RunPending}, status); err != nil {
			t.Fatalf("SetStatus: %v", err)
		}
		if err := s.ReleaseLease(ctx(t), serial, l.FencingToken, agent.LeaseFinished); err != nil {
			t.Fatalf("ReleaseLease: %v", err)
		}
	}
	if !unpublished {
		for seq := int64(1); seq <= 3; seq++ {
			if err := s.MarkPublished(ctx(t), r.RunID, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

func gone(t *testing.T, s PruneStore, r agent.Run) {
	t.Helper()
	if _, err := s.GetRun(ctx(t), agent.Admin(), r.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("run %s: GetRun = %v, want ErrNotFound (pruned)", r.RunID, err)
	}
	if evs, err := s.Events(ctx(t), agent.Admin(), r.RunID, 0); err != nil || len(evs) != 0 {
		t.Errorf("run %s: %d events left (%v)", r.RunID, len(evs), err)
	}
	if _, err := s.LatestSnapshot(ctx(t), agent.Admin(), r.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("run %s: snapshot left (%v)", r.RunID, err)
	}
	if h := history(t, s, r.Serial); len(h) != 0 {
		t.Errorf("run %s: lease history left %v", r.RunID, h)
	}
}

func kept(t *testing.T, s PruneStore, r agent.Run, events int) {
	t.Helper()
	if _, err := s.GetRun(ctx(t), agent.Admin(), r.RunID); err != nil {
		t.Errorf("run %s was pruned: %v", r.RunID, err)
	}
	if evs, err := s.Events(ctx(t), agent.Admin(), r.RunID, 0); err != nil || len(evs) != events {
		t.Errorf("run %s: %d events (%v), want %d", r.RunID, len(evs), err, events)
	}
}

func testPruneSelection(t *testing.T, s PruneStore, c *Clock) {
	finished := endedRun(t, s, "emulator-5554", agent.RunFinished, false)
	failed := endedRun(t, s, "emulator-5556", agent.RunFailed, false)
	canceled := endedRun(t, s, "emulator-5558", agent.RunCanceled, false)
	unpub := endedRun(t, s, "emulator-5560", agent.RunFinished, true)
	running := endedRun(t, s, "emulator-5562", "", false) // still PENDING, its lease active
	c.Advance(2 * time.Hour)
	recent := endedRun(t, s, "emulator-5564", agent.RunFinished, false)
	cutoff := c.Now().Add(-time.Hour)

	res, err := s.PruneRuns(ctx(t), cutoff, 0)
	if err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	want := agent.PruneResult{Runs: 3, Events: 9, Outbox: 9, Snapshots: 3, Controls: 3, Leases: 3, Held: 1, HeldRuns: []string{unpub.RunID}}
	if rowCounts(res) != rowCounts(want) || !slices.Equal(res.HeldRuns, want.HeldRuns) {
		t.Fatalf("PruneRuns = %+v, want %+v", res, want)
	}
	for _, r := range []agent.Run{finished, failed, canceled} {
		gone(t, s, r)
	}
	// Never deleted silently: the run with an unpublished outbox row stays
	// whole, its rows still waiting for the relay.
	kept(t, s, unpub, 3)
	if _, ob := stateOutbox(t, s, unpub.RunID); ob != 3 {
		t.Errorf("held run: %d unpublished outbox rows, want 3", ob)
	}
	kept(t, s, running, 3)
	kept(t, s, recent, 3)
	if got := history(t, s, running.Serial); len(got) != 1 || got[0].ReleasedAt != nil {
		t.Errorf("the unfinished run's active lease: %v", got)
	}

	checkHeldRunPruned(t, s, unpub, cutoff)
	kept(t, s, recent, 3)
}

// rowCounts are the row counts of a PruneRuns result and its Held count.
func rowCounts(r agent.PruneResult) [7]int64 {
	return [7]int64{r.Runs, r.Events, r.Outbox, r.Snapshots, r.Controls, r.Leases, r.Held}
}

// checkHeldRunPruned: once the relay published the 3 outbox rows of the
// held run unpub, PruneRuns deletes it, then finds nothing left.
func checkHeldRunPruned(t *testing.T, s PruneStore, unpub agent.Run, cutoff time.Time) {
	for seq := int64(1); seq <= 3; seq++ {
		if err := s.MarkPublished(ctx(t), unpub.RunID, seq); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := s.PruneRuns(ctx(t), cutoff, 0); err != nil || res.Runs != 1 || res.Held != 0 || len(res.HeldRuns) != 0 {
		t.Fatalf("PruneRuns after publishing = %+v, %v; want the held run deleted", res, err)
	}
	gone(t, s, unpub)
	// Nothing left to prune.
	if res, err := s.PruneRuns(ctx(t), cutoff, 0); err != nil || res.Runs != 0 {
		t.Fatalf("PruneRuns again = %+v, %v; want nothing", res, err)
	}
}

func stateOutbox(t *testing.T, s agent.Store, runID string) (agent.RunStatus, int) {
	t.Helper()
	st, _, ob, _ := state(t, s, runID)
	return st, len(ob)
}

func testPruneBatches(t *testing.T, s PruneStore, c *Clock) {
	var runs []agent.Run
	for i := range 5 {
		runs = append(runs, endedRun(t, s, "emulator-"+string(rune('a'+i)), agent.RunFinished, false))
		c.Advance(time.Second)
	}
	cutoff := c.Now()
	for i, want := range []int64{2, 2, 1, 0} {
		res, err := s.PruneRuns(ctx(t), cutoff, 2)
		if err != nil || res.Runs != want {
			t.Fatalf("batch %d: PruneRuns = %+v, %v; want %d runs", i, res, err, want)
		}
		if i == 0 {
			// Oldest first.
			gone(t, s, runs[0])
			gone(t, s, runs[1])
			kept(t, s, runs[2], 3)
		}
	}
}

func testPruneConcurrent(t *testing.T, stores []PruneStore, c *Clock) {
	const n = 24
	for i := range n {
		endedRun(t, stores[0], "emulator-"+string(rune('A'+i)), agent.RunFinished, false)
	}
	c.Advance(time.Hour)
	var (
		mu    sync.Mutex
		total int64
		errs  []error
		wg    sync.WaitGroup
	)
	for _, s := range stores {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := s.PruneRuns(ctx(t), c.Now(), 3)
					mu.Lock()
					total += res.Runs
					if err != nil {
						errs = append(errs, err)
					}
					mu.Unlock()
					if err != nil || res.Runs == 0 {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent pruners failed: %v", errors.Join(errs...))
	}
	if total != n {
		t.Fatalf("concurrent pruners deleted %d runs in all, want %d (each once)", total, n)
	}
	if rs, err := stores[1].ListRuns(ctx(t), agent.Admin(), agent.RunFilter{}); err != nil || len(rs) != 0 {
		t.Fatalf("runs left: %d (%v)", len(rs), err)
	}
}
