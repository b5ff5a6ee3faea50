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
