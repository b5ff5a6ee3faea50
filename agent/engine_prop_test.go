package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

type bubbleT struct{ *testing.T }

type ctlOp struct {
	After time.Duration
	What  string // cancel, pause, resume, switch2, switch99, statusCancel
}

// Random graphs, node failures, control requests at random times and daemon
// stops at random times always end in exactly one terminal event, with
// sequences 1..n, valid checksums and well-formed node event groups.
func TestPropertyControlSequences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Wrapped so rapid does not ask the bubbled *testing.T for its deadline.
		rapid.Check(bubbleT{t}, func(rt *rapid.T) {
			nNodes := rapid.IntRange(1, 4).Draw(rt, "nodes")
			var nodes []*agenttest.Node
			allSucceed := true
			for i := range nNodes {
				n := &agenttest.Node{NodeName: fmt.Sprintf("N%d", i)}
				n.FailTimes = rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("fail%d", i))
				n.FailWith = rapid.SampledFrom([]agent.ErrorID{agent.ErrNetwork, agent.ErrInstallFailed}).Draw(rt, fmt.Sprintf("id%d", i))
				n.Sleep = time.Duration(rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("sleep%d", i))) * time.Second
				if n.FailTimes > 0 && (n.FailWith != agent.ErrNetwork || n.FailTimes >= 3) {
					allSucceed = false
				}
				nodes = append(nodes, n)
			}
			ops := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) ctlOp {
				return ctlOp{
					After: time.Duration(rapid.IntRange(0, 8000).Draw(t, "after")) * time.Millisecond,
					What:  rapid.SampledFrom([]string{"cancel", "pause", "resume", "switch2", "switch99", "statusCancel"}).Draw(t, "what"),
				}
			}), 0, 6).Draw(rt, "ops")
			stops := rapid.SliceOfN(rapid.IntRange(1, 6000), 0, 3).Draw(rt, "stopsMillis")

			f := newFixture(rt, agenttest.NewPolicies(policy(1, 3, time.Second, agent.ErrNetwork), policy(2, 3, 500*time.Millisecond, agent.ErrNetwork)), nodes...)
			ctx := context.Background()
			cancelAsked := false
			ctlDone := make(chan struct{})
			go func() {
				defer close(ctlDone)
				for _, op := range ops {
					time.Sleep(op.After)
					c := agent.Control{RunID: testRunID, RequestedAt: time.Now()}
					switch op.What {
					case "cancel":
						c.Kind = agent.KindCancelRequested
					case "pause":
						c.Kind = agent.KindPauseRequested
					case "resume":
						c.Kind = agent.KindResumeRequested
					case "switch2":
						c.Kind, c.PolicyVersion = agent.KindPolicySwitchRequested, 2
					case "switch99":
						c.Kind, c.PolicyVersion = agent.KindPolicySwitchRequested, 99
					case "statusCancel":
						_ = f.store.SetStatus(ctx, testRunID, []agent.RunStatus{agent.RunRunning, agent.RunPaused}, agent.RunCancelRequested)
						continue
					}
					_, _ = f.store.RequestControl(ctx, c)
				}
				// Never leave the run paused for good.
				time.Sleep(time.Second)
				_, _ = f.store.RequestControl(ctx, agent.Control{RunID: testRunID, Kind: agent.KindResumeRequested})
			}()
			for _, op := range ops {
				cancelAsked = cancelAsked || op.What == "cancel" || op.What == "statusCancel"
			}

			var status agent.RunStatus
			var err error
			for _, ms := range stops {
				sctx, stop := context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
				status, err = f.eng.Run(sctx, testRunID, f.graph)
				stop()
				if err == nil {
					break
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					rt.Fatalf("stopped pass: %v", err)
				}
				if status.Terminal() {
					rt.Fatalf("stopped pass returned terminal %s with error", status)
				}
				checkStreamOpen(rt, f.store, status, true) // no terminal while stopped; a live-committed node may be open
			}
			if err != nil || !status.Terminal() {
				status, err = f.eng.Run(ctx, testRunID, f.graph)
			}
			<-ctlDone
			if err != nil || !status.Terminal() {
				rt.Fatalf("final pass: %s %v", status, err)
			}
			r, _ := f.store.GetRun(ctx, agent.Admin(), testRunID)
			if r.Status != status {
				rt.Fatalf("returned %s, stored %s", status, r.Status)
			}
			checkStream(rt, f.store, status)
			if status == agent.RunCanceled && !cancelAsked {
				rt.Fatalf("canceled without a cancel request")
			}
			if !cancelAsked && allSucceed && status != agent.RunFinished {
				rt.Fatalf("all nodes succeed within policy, no cancel, but %s", status)
			}
			// Finished nodes never ran again after a daemon stop: successes per node <= 1.
			sn, err := f.store.LatestSnapshot(ctx, agent.Admin(), testRunID)
			if err == nil {
				st, _ := agent.DecodeRunState(sn)
				seen := map[string]bool{}
				for _, c := range st.Completed {
					if seen[c.Node] {
						rt.Fatalf("node %s completed twice", c.Node)
					}
					seen[c.Node] = true
				}
			}
		})
	})
}
