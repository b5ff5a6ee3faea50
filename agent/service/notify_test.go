package service

import (
	"context"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// A commit wakes the followers of its run only, not every follower.
func TestCommitWakesOnlyItsRunsFollowers(t *testing.T) {
	ctx := context.Background()
	n := newNotifyingStore(agenttest.NewStore())
	for _, id := range []string{"run-a", "run-b"} {
		if err := n.CreateRun(ctx, agent.Run{RunID: id, TenantID: "t1", Status: agent.RunPending, Serial: "s", Graph: "g"}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := n.changed("run-a"), n.changed("run-b")
	if err := n.SetStatus(ctx, "run-b", []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a:
		t.Fatal("run-b's status change woke run-a's follower")
	default:
	}
	select {
	case <-b:
	default:
		t.Fatal("run-b's status change did not wake run-b's follower")
	}
	if err := n.SetStatus(ctx, "run-a", []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a:
	default:
		t.Fatal("run-a's status change did not wake run-a's follower")
	}
	if len(n.runs) != 0 {
		t.Errorf("%d wake-up channels left after both woke", len(n.runs))
	}
}

// listingStore fails the test when runs are listed; it counts them grouped.
type listingStore struct {
	agent.Store
	t *testing.T
}

func (l listingStore) ListRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	l.t.Errorf("ListRuns(%+v) called: /metrics must count runs with the store's grouped query", f)
	return l.Store.ListRuns(ctx, sc, f)
}

func (l listingStore) CountRunsByStatus(context.Context) (map[agent.RunStatus]int, error) {
	return map[agent.RunStatus]int{agent.RunFinished: 7, agent.RunPending: 2}, nil
}

func TestMetricsCountRunsWithoutListing(t *testing.T) {
	s := &Service{store: newNotifyingStore(listingStore{Store: agenttest.NewStore(), t: t})}
	by, err := s.countRuns(context.Background())
	if err != nil || by[agent.RunFinished] != 7 || by[agent.RunPending] != 2 {
		t.Fatalf("countRuns: %v %v", by, err)
	}
}
