package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// countingStore logs the kinds of each CommitStep that succeeded and the
// status it set.
type countingStore struct {
	agent.Store
	mu      sync.Mutex
	commits [][]string
	to      []agent.RunStatus
}

func (c *countingStore) CommitStep(ctx context.Context, st agent.Step) error {
	err := c.Store.CommitStep(ctx, st)
	if err == nil {
		var kinds []string
		for _, e := range st.Events {
			kinds = append(kinds, e.Kind)
		}
		c.mu.Lock()
		c.commits = append(c.commits, kinds)
		c.to = append(c.to, st.StatusTo)
		c.mu.Unlock()
	}
	return err
}

func eventKinds(t *testing.T, f *fixture) []string {
	t.Helper()
	evs, err := f.store.Events(context.Background(), agent.Admin(), testRunID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, e := range evs {
		if e.Sequence != int64(i)+1 {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// TestEndingStepCommitsWithTheRunsEnd: the step that ends the run (its
// last node succeeded, or a failure is not retried) commits the run's end
// in the same transaction: a chain of two nodes is three commits (start,
// first step, last step with agent.run.finished / failed), not four, and
// its events are the same.
func TestEndingStepCommitsWithTheRunsEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail bool
		want agent.RunStatus
		kind string
	}{{"finished", false, agent.RunFinished, agent.KindRunFinished}, {"failed", true, agent.RunFailed, agent.KindRunFailed}} {
		t.Run(tc.name, func(t *testing.T) {
			a := &agenttest.Node{NodeName: "EnsureDevice"}
			b := &agenttest.Node{NodeName: "ProvisionApp"}
			if tc.fail {
				b.FailTimes, b.FailWith = -1, agent.ErrInstallFailed
			}
			f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
			cs := &countingStore{Store: f.eng.Store}
			f.eng.Store = cs
			if s, _ := f.run(t); s != tc.want {
				t.Fatalf("run %s, want %s", s, tc.want)
			}
			want := [][]string{{agent.KindRunStarted}, {agent.KindNodeStarted, agent.KindNodeFinished},
				{agent.KindNodeStarted, agent.KindNodeFinished, tc.kind}}
			if !slices.EqualFunc(cs.commits, want, slices.Equal) || cs.to[2] != tc.want {
				t.Fatalf("commits %v (status %v), want %v", cs.commits, cs.to, want)
			}
			if got := eventKinds(t, f); !slices.Equal(got, slices.Concat(want...)) {
				t.Fatalf("events %v", got)
			}
			snap, err := f.store.LatestSnapshot(context.Background(), agent.Admin(), testRunID)
			if err != nil || snap.NodeName != "ProvisionApp" || snap.StepOrdinal != 1 {
				t.Fatalf("latest snapshot %+v %v", snap, err)
			}
		})
	}
}

// TestPauseDuringLastNodeHonouredBeforeTheEnd: a pause requested while the
// last node runs is honoured at the boundary after it, before the run
// ends: the merged ending commit is refused and the step commits alone.
// A cancel likewise ends the run CANCELED, not FINISHED.
func TestPauseDuringLastNodeHonouredBeforeTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		b.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindPauseRequested, 0) }
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		done := make(chan agent.RunStatus, 1)
		go func() { s, _ := f.run(t); done <- s }()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if got := eventKinds(t, f); got[len(got)-1] != agent.KindRunPaused {
			t.Fatalf("events while paused %v: want the run paused after the last node", got)
		}
		f.control(t, agent.KindResumeRequested, 0)
		if s := <-done; s != agent.RunFinished {
			t.Fatalf("run %s", s)
		}
		got := eventKinds(t, f)
		if want := []string{agent.KindNodeFinished, agent.KindRunPaused, agent.KindRunResumed, agent.KindRunFinished}; !slices.Equal(got[len(got)-4:], want) {
			t.Fatalf("events %v, want them to end %v", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		b.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindCancelRequested, 0) }
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		if s, err := f.run(t); err != nil || s != agent.RunCanceled {
			t.Fatalf("run %s %v", s, err)
		}
		got := eventKinds(t, f)
		if want := []string{agent.KindNodeFinished, agent.KindRunCanceled}; !slices.Equal(got[len(got)-2:], want) {
			t.Fatalf("events %v, want them to end %v", got, want)
		}
	})
}
