package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func openGroupStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitQueued waits until n steps wait in the group committer's queue.
func waitQueued(t *testing.T, g *groupCommitter, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		q := len(g.queue)
		g.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Steps of many runs committed at once share transactions; a step that fails
// (a sequence gap, a stale fence, a taken sequence) rolls back alone and the
// others of its group are written whole.
func TestGroupCommitIsolatesFailingSteps(t *testing.T) {
	s := openGroupStore(t)
	ctx := context.Background()
	const good, bad = 40, 12
	var runs []agent.Run
	for range good + bad {
		r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	// A lease to fence against, then taken over: its token is stale.
	old, err := s.AcquireLease(ctx, "emulator-5556", "serve:a:1", runs[good].RunID, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, "emulator-5556", old.FencingToken, agent.LeaseHolderLost); err != nil {
		t.Fatal(err)
	}
	steps := make([]agent.Step, len(runs))
	want := make([]error, len(runs))
	for i, r := range runs {
		switch {
		case i < good:
			steps[i] = storetest.NodeStep(r, 1, 0, "EnsureDevice")
		case i%3 == 0:
			steps[i] = storetest.NodeStep(r, 5, 0, "EnsureDevice") // gap: the run has no events
			want[i] = snapshots.ErrSequenceGap
		case i%3 == 1:
			steps[i] = storetest.NodeStep(r, 1, 0, "EnsureDevice")
			steps[i].Fence = &agent.Fence{Serial: "emulator-5556", Token: old.FencingToken}
			want[i] = agent.ErrLeaseLost
		default:
			steps[i] = storetest.NodeStep(r, 1, 0, "EnsureDevice")
			steps[i].Events[2].RunID = runs[0].RunID // an event of another run: invalid
			want[i] = snapshots.ErrInvalid
		}
	}
	// Hold the leader's place so every step queues, then let one lead.
	g := s.group
	groups0, steps0 := g.groups.Load(), g.steps.Load()
	g.leader <- struct{}{}
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	queued := 0
	for i := range runs {
		if errors.Is(want[i], snapshots.ErrInvalid) {
			// Refused before it queues (storekit.PrepareStep checks the step alone).
			errs[i] = s.CommitStep(ctx, steps[i])
			continue
		}
		queued++
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.CommitStep(ctx, steps[i]) }()
	}
	waitQueued(t, g, queued)
	<-g.leader
	wg.Wait()
	if n := g.groups.Load() - groups0; n > int64((queued+g.maxGroup-1)/g.maxGroup)+1 {
		t.Errorf("%d steps committed in %d transactions", g.steps.Load()-steps0, n)
	}
	for i, r := range runs {
		if want[i] == nil && errs[i] != nil || want[i] != nil && !errors.Is(errs[i], want[i]) {
			t.Errorf("step %d: %v, want %v", i, errs[i], want[i])
		}
		evs, err := s.Events(ctx, agent.Admin(), r.RunID, 0)
		if err != nil {
			t.Fatal(err)
		}
		snaps := 0
		if _, err := s.Snapshot(ctx, agent.Admin(), r.RunID, 0); err == nil {
			snaps = 1
		}
		if want[i] == nil && (len(evs) != 3 || snaps != 1) {
			t.Errorf("good step %d: %d events, %d snapshots written, want 3 and 1", i, len(evs), snaps)
		}
		if want[i] != nil && (len(evs) != 0 || snaps != 0) {
			t.Errorf("failed step %d (%v) wrote %d events, %d snapshots", i, errs[i], len(evs), snaps)
		}
	}
	rows, err := s.Unpublished(ctx, 1000)
	if err != nil || len(rows) != 3*good {
		t.Errorf("outbox holds %d rows (%v), want %d", len(rows), err, 3*good)
	}

	// The same sequence again: taken, and the group still writes the others.
	r2 := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5558")
	if err := s.CreateRun(ctx, r2); err != nil {
		t.Fatal(err)
	}
	// And a step that fails after writing its events (its snapshot's step
	// ordinal is taken): the savepoint takes its events back.
	g.leader <- struct{}{}
	var e1, e2, e3 error
	wg.Add(3)
	go func() { defer wg.Done(); e1 = s.CommitStep(ctx, storetest.NodeStep(runs[0], 1, 1, "ProvisionApp")) }()
	go func() { defer wg.Done(); e2 = s.CommitStep(ctx, storetest.NodeStep(r2, 1, 0, "EnsureDevice")) }()
	go func() { defer wg.Done(); e3 = s.CommitStep(ctx, storetest.NodeStep(runs[1], 4, 0, "ProvisionApp")) }()
	waitQueued(t, g, 3)
	<-g.leader
	wg.Wait()
	if !errors.Is(e1, agent.ErrSequenceTaken) || e2 != nil || !errors.Is(e3, snapshots.ErrSnapshotTaken) {
		t.Errorf("taken sequence, good step, taken snapshot in one group: %v, %v, %v", e1, e2, e3)
	}
	if evs, _ := s.Events(ctx, agent.Admin(), r2.RunID, 0); len(evs) != 3 {
		t.Errorf("good step beside failing ones wrote %d events", len(evs))
	}
	if evs, _ := s.Events(ctx, agent.Admin(), runs[1].RunID, 0); len(evs) != 3 {
		t.Errorf("run with a taken snapshot ordinal has %d events, want its first 3 only", len(evs))
	}
}

// A step whose ctx ends while it waits in the queue is withdrawn: the caller
// gets ctx's error and nothing of it is ever written.
func TestGroupCommitWithdrawsCanceledStep(t *testing.T) {
	s := openGroupStore(t)
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	g := s.group
	g.leader <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.CommitStep(ctx, storetest.NodeStep(r, 1, 0, "EnsureDevice")) }()
	waitQueued(t, g, 1)
	cancel()
	err := <-done
	<-g.leader
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled step: %v", err)
	}
	waitQueued(t, g, 0)
	// The next commit leads; the withdrawn step must not be in its group.
	if err := s.CommitStep(context.Background(), storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
		t.Fatalf("the same step afterwards: %v", err)
	}
	if evs, _ := s.Events(context.Background(), agent.Admin(), r.RunID, 0); len(evs) != 3 {
		t.Errorf("%d events, want 3 (once)", len(evs))
	}
}

// Writes of one group run as if one after the other: two acquisitions of one
// device in the same transaction cannot both succeed (the second sees the
// first's lease), and a run created in the group can take a lease in it.
func TestGroupCommitWritesSeeEachOther(t *testing.T) {
	s := openGroupStore(t)
	ctx := context.Background()
	a := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	b := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	g := s.group
	g.leader <- struct{}{}
	var wg sync.WaitGroup
	var ea, eb, ca, cb error
	wg.Add(2)
	go func() { defer wg.Done(); ca = s.CreateRun(ctx, a) }()
	go func() { defer wg.Done(); cb = s.CreateRun(ctx, b) }()
	waitQueued(t, g, 2)
	<-g.leader
	wg.Wait()
	if ca != nil || cb != nil {
		t.Fatal(ca, cb)
	}
	groups0 := g.groups.Load()
	g.leader <- struct{}{}
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, ea = s.AcquireLease(ctx, "emulator-5554", "serve:a:1", a.RunID, time.Minute)
	}()
	go func() {
		defer wg.Done()
		_, eb = s.AcquireLease(ctx, "emulator-5554", "serve:a:1", b.RunID, time.Minute)
	}()
	waitQueued(t, g, 2)
	<-g.leader
	wg.Wait()
	if n := g.groups.Load() - groups0; n != 1 {
		t.Errorf("two acquisitions in %d transactions, want 1", n)
	}
	held := 0
	for _, err := range []error{ea, eb} {
		switch {
		case err == nil:
		case errors.Is(err, agent.ErrLeaseHeld):
			held++
		default:
			t.Errorf("acquire: %v", err)
		}
	}
	if held != 1 {
		t.Errorf("in one group: %v, %v; want one lease and one ErrLeaseHeld", ea, eb)
	}
	if ls, err := s.ActiveLeases(ctx, agent.Admin()); err != nil || len(ls) != 1 {
		t.Errorf("active leases %+v (%v), want one", ls, err)
	}
}

// A group's writes run on a context that never ends (lead): with a
// cancellable one, modernc.org/sqlite starts a watcher goroutine and a
// progress handler for every statement, about 15% of a step commit's CPU.
func TestGroupCommitContextNeverEnds(t *testing.T) {
	s := openGroupStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var done <-chan struct{}
	if err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		done = ctx.Done()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if done != nil {
		t.Error("the group's statements ran on a context that can end: the driver watches each with a goroutine")
	}
}
