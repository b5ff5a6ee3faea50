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
				_, _ = st.RequestControl(ctx, agent.Control{RunID: "R", Kind: agent.KindPolicySwitchRequested, PolicyVersion: 2})
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

// Classification at the boundary wins over the policy's retryOn: with
// Default() (retryOn lists artifact_unavailable) a failure the adapter
// classified not retryable (HTTP 404, APK_INVALID) runs once and is reported
// retryable false everywhere (node output, agent.node.finished, the run's
// failure and the agent error format), whether the node returns it as an
// error or through its output; a retryable artifact_unavailable (HTTP 503) is
// still retried maxAttempts times; a retryable error the policy does not list
// is not retried.
func TestEngineBoundaryClassificationWinsOverRetryOn(t *testing.T) {
	def := policy.Default()
	noArtifactRetry := policy.Default()
	noArtifactRetry.Retries.RetryOn = []agent.ErrorID{agent.ErrNetwork}
	for _, c := range []struct {
		name          string
		pol           *policy.Policy
		code          string
		permanent     bool // classified not retryable at the boundary
		viaOutput     bool
		calls         int
		wantRetryable bool
	}{
		{"404 as error", def, "HTTP_404", true, false, 1, false},
		{"APK_INVALID via output", def, "APK_INVALID", true, true, 1, false},
		{"503 retried", def, "HTTP_503", false, false, 3, true},
		{"503 via output retried", def, "", false, true, 3, true},
		{"503 not in retryOn", noArtifactRetry, "HTTP_503", false, false, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				st := agenttest.NewStore()
				pols, err := policy.NewStore(ctx, st)
				if err != nil {
					t.Fatal(err)
				}
				p := *c.pol
				p.PolicyVersion = 2
				if err := pols.Add(ctx, &p); err != nil {
					t.Fatal(err)
				}
				n := &agenttest.Node{NodeName: "ProvisionApp", FailTimes: -1, Next: agent.End, FailWith: agent.ErrArtifactUnavailable,
					FailCode: c.code, FailNotRetryable: c.permanent, FailViaOutput: c.viaOutput}
				g, _ := agent.NewGraph("setup", "ProvisionApp", n)
				if err := st.CreateRun(ctx, agent.Run{RunID: "R", TenantID: "T", Status: agent.RunPending, Graph: "setup", PolicyVersion: 2, Input: json.RawMessage(`{}`)}); err != nil {
					t.Fatal(err)
				}
				eng := &agent.Engine{Store: st, Policies: pols, IDs: agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(1)))}
				status, err := eng.Run(ctx, "R", g)
				if err != nil || status != agent.RunFailed {
					t.Fatalf("%s %v", status, err)
				}
				if n.Calls() != c.calls {
					t.Errorf("ProvisionApp ran %d times, want %d", n.Calls(), c.calls)
				}
				var fins []agent.NodeFinishedPayload
				for _, ev := range st.AllEvents("R") {
					if ev.Kind == agent.KindNodeFinished {
						var fin agent.NodeFinishedPayload
						if err := json.Unmarshal(ev.Payload, &fin); err != nil {
							t.Fatal(err)
						}
						fins = append(fins, fin)
					}
				}
				last := fins[len(fins)-1]
				if last.ErrorID == nil || *last.ErrorID != agent.ErrArtifactUnavailable || last.Retryable == nil ||
					*last.Retryable != c.wantRetryable || last.RetryBackoffMillis != nil {
					t.Errorf("last agent.node.finished %+v", last)
				}
				var out struct {
					Retryable *bool `json:"retryable"`
				}
				if err := json.Unmarshal(last.Output, &out); err != nil || out.Retryable == nil || *out.Retryable != c.wantRetryable {
					t.Errorf("output retryable %v (%v): %s", out.Retryable, err, last.Output)
				}
				snap, err := st.LatestSnapshot(ctx, agent.Admin(), "R")
				if err != nil {
					t.Fatal(err)
				}
				rs, err := agent.DecodeRunState(snap)
				if err != nil {
					t.Fatal(err)
				}
				if rs.Failure == nil || rs.Failure.Retryable != c.wantRetryable || rs.Failure.Attempts != c.calls {
					t.Errorf("run failure %+v", rs.Failure)
				}
				rep, err := agent.NewErrorReport(g, rs)
				if err != nil {
					t.Fatal(err)
				}
				if e := rep.Errors[0]; e.Context["retryable"] != c.wantRetryable || e.Fixable != c.wantRetryable {
					t.Errorf("error report %+v", e)
				}
			})
		})
	}
}
