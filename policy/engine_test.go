package policy_test

import (
	"context"
	"encoding/json"
	"math/rand"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/policy"
)

// The engine runs with the real policy store: Default's backoff (1 s, 2 s)
// between attempts, then a policy switch to a version that gives the
// next node a 3 s timeout.
func TestEngineWithPolicyStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := agenttest.NewStore()
		pols, err := policy.NewStore(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		v2 := policy.Default()
		v2.PolicyVersion = 2
		v2.Timeouts["WaitIdle"] = policy.Duration(3 * time.Second)
		v2.Retries.RetryOn = nil
		if err := pols.Add(ctx, v2); err != nil {
			t.Fatal(err)
		}
		a := &agenttest.Node{NodeName: "EnsureDevice", FailTimes: 2, FailWith: agent.ErrDeviceOffline, Next: "WaitIdle"}
		a.OnRun = func(context.Context, agent.NodeInput) {
			if a.Calls() == 3 {
				_ = st.RequestControl(ctx, agent.Control{RunID: "R", Kind: agent.KindPolicySwitchRequested, PolicyVersion: 2})
			}
		}
		w := &agenttest.Node{NodeName: "WaitIdle", BlockUntilDone: true, Next: agent.End}
		g, _ := agent.NewGraph("setup", "EnsureDevice", a, w)
		if err := st.CreateRun(ctx, agent.Run{RunID: "R", TenantID: "T", Status: agent.RunPending, Graph: "setup", Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		eng := &agent.Engine{Store: st, Policies: pols, IDs: agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(1)))}
		t0 := time.Now()
		status, err := eng.Run(ctx, "R", g)
		if err != nil || status != agent.RunFailed {
			t.Fatalf("%s %v", status, err)
		}
		// 1 s + 2 s backoff, then one 3 s WaitIdle attempt that v2 does not retry.
		if d := time.Since(t0); d != 6*time.Second || a.Calls() != 3 || w.Calls() != 1 {
			t.Fatalf("took %s, calls %d/%d", d, a.Calls(), w.Calls())
		}
		if w.Inputs()[0].PolicyVersion != 2 || a.Inputs()[0].PolicyVersion != 1 {
			t.Fatal("policy versions not applied per node")
		}
		evs := st.AllEvents("R")
		var fin agent.NodeFinishedPayload
		_ = json.Unmarshal(evs[len(evs)-2].Payload, &fin)
		if fin.ErrorID == nil || *fin.ErrorID != agent.ErrTimeout || *fin.Retryable {
			t.Fatalf("last node finished %+v", fin)
		}
	})
}
