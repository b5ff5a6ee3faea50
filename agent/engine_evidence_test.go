package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// fakeEvidence records the requests and returns one screenshot row (a blob
// it pretends to have stored) plus a line saying a logcat was not captured.
type fakeEvidence struct {
	mu   sync.Mutex
	reqs []agent.EvidenceRequest
}

const fakeShotSHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func (f *fakeEvidence) Capture(ctx context.Context, req agent.EvidenceRequest) ([]agent.Artifact, []agent.TokenDelta) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return []agent.Artifact{{ArtifactRef: agent.ArtifactRef{Kind: agent.ArtifactScreenshot, ContentType: "image/png", Bytes: 4, SHA256: fakeShotSHA}}},
		[]agent.TokenDelta{agent.Log("evidence: logcat not captured: device offline")}
}

func (f *fakeEvidence) requests() []agent.EvidenceRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]agent.EvidenceRequest(nil), f.reqs...)
}

// checkPointers: the artifact row, the snapshot's ref and the node.finished
// ref name the same artifact, and the event carries no bytes.
func checkPointers(t *testing.T, f *fixture, node string) {
	t.Helper()
	arts, err := f.store.Artifacts(context.Background(), agent.Admin(), testRunID)
	if err != nil || len(arts) != 1 {
		t.Fatalf("artifact rows = %v, %v; want 1", arts, err)
	}
	a := arts[0]
	if a.Node != node || a.RunID != testRunID || a.TenantID != "01HZX0TENANT1234567890" || len(a.ArtifactID) != 26 || a.CreatedAt.IsZero() {
		t.Errorf("row %+v: engine-owned fields not filled", a)
	}
	snaps := f.store.Snapshots(testRunID)
	last := snaps[len(snaps)-1]
	st, err := agent.DecodeRunState(last)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Artifacts) != 1 || st.Artifacts[0].ArtifactRef != a.ArtifactRef || st.Artifacts[0].Node != node || st.Artifacts[0].StepOrdinal != a.StepOrdinal {
		t.Errorf("snapshot artifacts %+v, want a pointer to %+v", st.Artifacts, a)
	}
	var fin *agent.NodeFinishedPayload
	var sawLine bool
	for _, e := range f.store.AllEvents(testRunID) {
		switch e.Kind {
		case agent.KindNodeFinished:
			var p agent.NodeFinishedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.NodeName == node && p.StepOrdinal == a.StepOrdinal {
				fin = &p
			} else if len(p.Artifacts) != 0 {
				t.Errorf("%s step %d finished with artifacts %v: only the final attempt captures", p.NodeName, p.StepOrdinal, p.Artifacts)
			}
		case agent.KindNodeTokenDelta:
			sawLine = sawLine || strings.Contains(string(e.Payload), "logcat not captured")
		}
	}
	if fin == nil || len(fin.Artifacts) != 1 || fin.Artifacts[0] != a.ArtifactRef {
		t.Fatalf("node.finished of %s: %+v, want the pointer %+v", node, fin, a.ArtifactRef)
	}
	if !sawLine {
		t.Error("the capture's failure line is not a token_delta event")
	}
}

func TestEvidenceAfterLastNode(t *testing.T) {
	a := &agenttest.Node{NodeName: "EnsureDevice"}
	b := &agenttest.Node{NodeName: "WaitIdle"}
	f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
	ev := &fakeEvidence{}
	f.eng.Evidence = ev
	if status, err := f.run(t); err != nil || status != agent.RunFinished {
		t.Fatalf("run = %s, %v", status, err)
	}
	reqs := ev.requests()
	if len(reqs) != 1 || reqs[0].Node != "WaitIdle" || reqs[0].Failed || reqs[0].StepOrdinal != 1 {
		t.Fatalf("capture requests %+v: want one, after WaitIdle's success", reqs)
	}
	if _, ok := reqs[0].Outputs["WaitIdle"]; !ok {
		t.Error("the capture does not see the node's own output")
	}
	checkPointers(t, f, "WaitIdle")
}

func TestEvidenceAfterFinalFailureOnly(t *testing.T) {
	a := &agenttest.Node{NodeName: "LaunchOrAttach", FailTimes: -1, FailWith: agent.ErrNetwork}
	f := newFixture(t, agenttest.NewPolicies(policy(1, 2, time.Millisecond, agent.ErrNetwork)), a)
	ev := &fakeEvidence{}
	f.eng.Evidence = ev
	if status, err := f.run(t); err != nil || status != agent.RunFailed {
		t.Fatalf("run = %s, %v", status, err)
	}
	reqs := ev.requests()
	if len(reqs) != 1 || !reqs[0].Failed || reqs[0].ErrorID != agent.ErrNetwork || reqs[0].Attempt != 2 {
		t.Fatalf("capture requests %+v: want one, after the second (final) attempt", reqs)
	}
	checkPointers(t, f, "LaunchOrAttach")
}

// fakeHandover reports a reset and a window, and records its requests.
type fakeHandover struct {
	mu    sync.Mutex
	reqs  []agent.HandoverRequest
	reset bool
}

var handoverSince = time.Date(2026, 11, 28, 9, 0, 0, 1e6, time.UTC)

func (h *fakeHandover) Handover(ctx context.Context, req agent.HandoverRequest) agent.HandoverResult {
	h.mu.Lock()
	h.reqs = append(h.reqs, req)
	h.mu.Unlock()
	res := agent.HandoverResult{Window: agent.EvidenceWindow{Since: handoverSince}}
	if h.reset {
		res.Reset = &agent.DeviceResetPayload{Serial: req.Fence.Serial, Reason: agent.ResetTenantChange, StoppedApps: 1, WentHome: true,
			Outcome: agent.OutcomeSuccess, DeviceTime: agent.FormatTS(handoverSince)}
	}
	return res
}

// TestHandoverBeforeFirstStep: a run under a lease is handed over once,
// before its first node: the reset is an agent.device.reset event between
// agent.run.started and the first agent.node.started, in the run's own
// envelope (its tenant), and the evidence gets the lease's window. Without a
// lease (no Fence) the Handover is not asked.
func TestHandoverBeforeFirstStep(t *testing.T) {
	for _, reset := range []bool{true, false} {
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp", FailTimes: -1, FailWith: agent.ErrArtifactUnavailable}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		ev, h := &fakeEvidence{}, &fakeHandover{reset: reset}
		f.eng.Evidence, f.eng.Handover = ev, h
		ctx := agent.WithFence(context.Background(), agent.Fence{Serial: "emulator-5554", Token: 7})
		if status, err := f.eng.Run(ctx, testRunID, f.graph); err != nil || status != agent.RunFailed {
			t.Fatalf("run = %s, %v", status, err)
		}
		if len(h.reqs) != 1 || h.reqs[0].Fence.Token != 7 || h.reqs[0].Run.RunID != testRunID {
			t.Fatalf("handover requests %+v, want one with the lease's fence", h.reqs)
		}
		var kinds []string
		for _, e := range f.store.AllEvents(testRunID) {
			kinds = append(kinds, e.Kind)
			if e.Kind == agent.KindDeviceReset {
				var p agent.DeviceResetPayload
				if err := json.Unmarshal(e.Payload, &p); err != nil || p.TenantID != "01HZX0TENANT1234567890" || p.RunID != testRunID ||
					e.TenantID != p.TenantID || p.Reason != agent.ResetTenantChange || p.Outcome != agent.OutcomeSuccess {
					t.Errorf("reset event %s: %+v %v", e.Payload, p, err)
				}
			}
		}
		want := []string{agent.KindRunStarted, agent.KindNodeStarted}
		if reset {
			want = []string{agent.KindRunStarted, agent.KindDeviceReset, agent.KindNodeStarted}
		}
		if strings.Join(kinds[:len(want)], " ") != strings.Join(want, " ") || strings.Count(strings.Join(kinds, " "), agent.KindDeviceReset) != len(want)-2 {
			t.Errorf("reset %v: events %v", reset, kinds)
		}
		reqs := ev.requests()
		if len(reqs) != 1 || reqs[0].Window == nil || !reqs[0].Window.Since.Equal(handoverSince) {
			t.Errorf("evidence requests %+v: want the lease's window", reqs)
		}
	}
	// No lease: not asked, no window.
	f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), &agenttest.Node{NodeName: "ProvisionApp", FailTimes: -1, FailWith: agent.ErrArtifactUnavailable})
	ev, h := &fakeEvidence{}, &fakeHandover{reset: true}
	f.eng.Evidence, f.eng.Handover = ev, h
	if status, err := f.run(t); err != nil || status != agent.RunFailed {
		t.Fatalf("run = %s, %v", status, err)
	}
	if len(h.reqs) != 0 || len(ev.requests()) != 1 || ev.requests()[0].Window != nil {
		t.Errorf("without a lease: handover %+v, evidence window %+v", h.reqs, ev.requests()[0].Window)
	}
}
