package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// tb is what the helpers need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Error(args ...any)
}

const testRunID = "01JBD0QJ8K9M2N3P4Q5R6S7T8V"

type fixture struct {
	store *agenttest.Store
	eng   *agent.Engine
	graph *agent.Graph
	nodes []*agenttest.Node
}

// newFixture chains nodes (each to the next, the last to End unless Next is
// set), creates a PENDING run of the graph with policy version 1.
func newFixture(t tb, pols *agenttest.Policies, nodes ...*agenttest.Node) *fixture {
	t.Helper()
	var ns []agent.Node
	for i, n := range nodes {
		if n.Next == "" {
			n.Next = agent.End
			if i+1 < len(nodes) {
				n.Next = nodes[i+1].NodeName
			}
		}
		ns = append(ns, n)
	}
	g, err := agent.NewGraph("setup", nodes[0].NodeName, ns...)
	if err != nil {
		t.Fatal(err)
	}
	st := agenttest.NewStore()
	err = st.CreateRun(context.Background(), agent.Run{
		RunID: testRunID, TenantID: "01HZX0TENANT1234567890", ProjectID: "01HZX0PROJECT12345678",
		Status: agent.RunPending, Serial: "emulator-5554", Graph: "setup", PolicyVersion: 1,
		Input: json.RawMessage(`{}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := agent.SystemClock{}
	return &fixture{store: st, graph: g, nodes: nodes, eng: &agent.Engine{
		Store: st, Policies: pols, Clock: clk, IDs: agent.NewULIDs(clk, rand.New(rand.NewSource(7))),
		PollInterval: 100 * time.Millisecond, AbandonGrace: time.Second,
	}}
}

func (f *fixture) run(t tb) (agent.RunStatus, error) {
	return f.eng.Run(context.Background(), testRunID, f.graph)
}

func (f *fixture) control(t tb, kind string, version int) string {
	t.Helper()
	c, err := f.store.RequestControl(context.Background(), agent.Control{RunID: testRunID, Kind: kind, PolicyVersion: version, RequestedAt: time.Now()})
	if err != nil {
		t.Error(err)
	}
	return c.ID
}

// controlAfterEnd checks that a request for the ended run is refused and
// leaves nothing pending.
func (f *fixture) controlAfterEnd(t *testing.T, kind string) {
	t.Helper()
	if _, err := f.store.RequestControl(context.Background(), agent.Control{RunID: testRunID, Kind: kind}); !errors.Is(err, agent.ErrRunTerminal) {
		t.Errorf("%s of an ended run = %v, want ErrRunTerminal", kind, err)
	}
	if p, _ := f.store.PendingControl(context.Background(), testRunID); len(p) != 0 {
		t.Errorf("pending after the end: %v", p)
	}
}

func policy(v, maxAttempts int, backoff time.Duration, retryOn ...agent.ErrorID) *agenttest.Policy {
	return &agenttest.Policy{V: v, MaxAttempts: maxAttempts, Backoff: backoff, RetryOn: retryOn, Timeouts: map[string]time.Duration{}}
}

// independentChecksum recomputes an event's checksum from the documented
// layout with the JCS library directly, not through package agent.
func independentChecksum(t tb, e agent.Event) string {
	t.Helper()
	canon, err := jcs.Transform(e.Payload)
	if err != nil {
		t.Fatalf("seq %d payload: %v", e.Sequence, err)
	}
	h := sha256.Sum256([]byte(e.EventID + "|" + e.RunID + "|" + strconv.FormatInt(e.Sequence, 10) + "|" + e.Kind + "|" + string(canon)))
	return hex.EncodeToString(h[:])
}

type evView struct {
	Kind    string
	Node    string
	Step    int
	Attempt int
	Payload map[string]any
}

func appliedIDs(p map[string]any) []string {
	var ids []string
	list, _ := p["appliedControl"].([]any)
	for _, a := range list {
		m, _ := a.(map[string]any)
		id, _ := m["requestId"].(string)
		ids = append(ids, id)
	}
	return ids
}

// checkApplied asserts that each request id is named by exactly one event's
// appliedControl, and returns those events' indexes in v.
func checkApplied(t tb, v []evView, ids ...string) []int {
	t.Helper()
	var at []int
	for _, id := range ids {
		found := -1
		for i, e := range v {
			if slices.Contains(appliedIDs(e.Payload), id) {
				if found >= 0 {
					t.Fatalf("request %s applied by events %d and %d", id, found, i)
				}
				found = i
			}
		}
		if found < 0 {
			t.Fatalf("request %s applied by no event", id)
		}
		at = append(at, found)
	}
	return at
}

// checkStream asserts the stream invariants and returns a view of it:
// sequences 1..n without gaps, checksums that recompute, run.started first,
// exactly one terminal event (last) iff the status is terminal, node events
// in started -> token_delta* -> finished order with matching step/attempt,
// tenantId in every payload, unique 26-character eventIds, ts format.
func checkStream(t tb, st *agenttest.Store, status agent.RunStatus) []evView {
	t.Helper()
	return checkStreamOpen(t, st, status, false)
}

// checkStreamOpen is checkStream for a run a daemon stop may have left with
// its last node's group open (allowOpen): its agent.node.started and
// progress were committed live, its finished comes when a later pass closes
// the discarded attempt (interrupted).
func checkStreamOpen(t tb, st *agenttest.Store, status agent.RunStatus, allowOpen bool) []evView {
	t.Helper()
	evs := st.AllEvents(testRunID)
	var out []evView
	terminals := 0
	open := false
	var cur evView
	seenIDs, seenCtl := map[string]bool{}, map[string]bool{}
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
		if got := independentChecksum(t, e); got != e.Checksum {
			t.Fatalf("seq %d checksum %s, recomputed %s", e.Sequence, e.Checksum, got)
		}
		if len(e.EventID) != 26 || seenIDs[e.EventID] {
			t.Fatalf("seq %d eventId %q malformed or repeated", e.Sequence, e.EventID)
		}
		seenIDs[e.EventID] = true
		if _, err := time.Parse(agent.TimestampLayout, e.TS); err != nil {
			t.Fatalf("seq %d ts %q: %v", e.Sequence, e.TS, err)
		}
		var p map[string]any
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p["tenantId"] != "01HZX0TENANT1234567890" || p["runId"] != testRunID {
			t.Fatalf("seq %d payload lacks tenant/run: %s", e.Sequence, e.Payload)
		}
		v := evView{Kind: e.Kind, Payload: p}
		if n, ok := p["nodeName"].(string); ok {
			v.Node = n
			v.Step = int(p["stepOrdinal"].(float64))
			v.Attempt = int(p["attempt"].(float64))
		}
		for _, id := range appliedIDs(p) {
			if seenCtl[id] {
				t.Fatalf("seq %d: control request %s applied twice", e.Sequence, id)
			}
			seenCtl[id] = true
		}
		if (i == 0) != (e.Kind == agent.KindRunStarted) {
			t.Fatalf("seq %d kind %s: run.started must be first and only first", e.Sequence, e.Kind)
		}
		switch e.Kind {
		case agent.KindRunFinished, agent.KindRunFailed, agent.KindRunCanceled:
			terminals++
			if i != len(evs)-1 {
				t.Fatalf("terminal %s at seq %d is not last (%d events)", e.Kind, e.Sequence, len(evs))
			}
			if open {
				t.Fatalf("terminal inside node %s", cur.Node)
			}
		case agent.KindNodeStarted:
			if open {
				t.Fatalf("seq %d: node %s started inside %s", e.Sequence, v.Node, cur.Node)
			}
			open, cur = true, v
		case agent.KindNodeTokenDelta, agent.KindNodeFinished:
			if !open || v.Node != cur.Node || v.Step != cur.Step || v.Attempt != cur.Attempt {
				t.Fatalf("seq %d %s of %s/%d/%d outside its node (open=%v %s/%d/%d)", e.Sequence, e.Kind, v.Node, v.Step, v.Attempt, open, cur.Node, cur.Step, cur.Attempt)
			}
			if e.Kind == agent.KindNodeFinished {
				open = false
			}
		}
		out = append(out, v)
	}
	if open && !allowOpen {
		t.Fatalf("node %s never finished", cur.Node)
	}
	want := 0
	if status.Terminal() {
		want = 1
	}
	if terminals != want {
		t.Fatalf("status %s with %d terminal events", status, terminals)
	}
	return out
}

func kinds(v []evView) []string {
	var out []string
	for _, e := range v {
		k := e.Kind[len("agent."):]
		if e.Node != "" {
			k += ":" + e.Node + "#" + strconv.Itoa(e.Attempt)
		}
		out = append(out, k)
	}
	return out
}

func eq(t tb, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}

func TestHappyPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice", Deltas: []agent.TokenDelta{agent.Log("adb devices: 1"), agent.Progress(50, "half")},
			Carry: map[string]json.RawMessage{"serial": json.RawMessage(`"emulator-5554"`)}}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		c := &agenttest.Node{NodeName: "LaunchOrAttach"}
		d := &agenttest.Node{NodeName: "WaitIdle"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b, c, d)
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("status %s err %v", status, err)
		}
		v := checkStream(t, f.store, status)
		eq(t, kinds(v), []string{"run.started",
			"node.started:EnsureDevice#1", "node.token_delta:EnsureDevice#1", "node.token_delta:EnsureDevice#1", "node.finished:EnsureDevice#1",
			"node.started:ProvisionApp#1", "node.finished:ProvisionApp#1",
			"node.started:LaunchOrAttach#1", "node.finished:LaunchOrAttach#1",
			"node.started:WaitIdle#1", "node.finished:WaitIdle#1", "run.finished"})
		snaps := f.store.Snapshots(testRunID)
		if len(snaps) != 4 {
			t.Fatalf("%d snapshots", len(snaps))
		}
		seed := agent.RunSeed(agent.Run{RunID: testRunID, Input: json.RawMessage(`{}`)})
		for i, sn := range snaps {
			name := f.nodes[i].NodeName
			if sn.StepOrdinal != i || sn.NodeName != name || len(sn.ResumeToken) != 26 {
				t.Fatalf("snapshot %d: %+v", i, sn)
			}
			st, err := agent.DecodeRunState(sn)
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Echo string `json:"echo"`
				agent.Common
			}
			if err := json.Unmarshal(st.Outputs[name], &out); err != nil {
				t.Fatal(err)
			}
			c := out.Common
			if out.Echo != "from "+name || c.NodeName != name || c.StepOrdinal != i || c.ResumeToken != sn.ResumeToken ||
				c.PolicyVersion != 1 || c.RandomSeed != agent.StepSeed(seed, i, name) || c.NodeExecutionOutcomeStatus != agent.OutcomeSuccess ||
				c.ErrorID != nil || c.Retryable != nil || c.HumanReadableFailureSummary != nil {
				t.Fatalf("step %d output %s", i, st.Outputs[name])
			}
			if len(st.Completed) != i+1 {
				t.Fatalf("step %d completed %v", i, st.Completed)
			}
		}
		// Spec: errorId/retryable/summary are JSON null on success.
		var raw map[string]json.RawMessage
		st, _ := agent.DecodeRunState(snaps[3])
		_ = json.Unmarshal(st.Outputs["WaitIdle"], &raw)
		for _, k := range []string{"errorId", "retryable", "humanReadableFailureSummary"} {
			if string(raw[k]) != "null" {
				t.Fatalf("%s = %s", k, raw[k])
			}
		}
		// Later nodes see earlier outputs and the carried state.
		in := d.Inputs()[0]
		if len(in.Outputs) != 3 || string(in.Carry["serial"]) != `"emulator-5554"` || in.Run.RunID != testRunID {
			t.Fatalf("WaitIdle input outputs=%d carry=%v", len(in.Outputs), in.Carry)
		}
		// A finished run is not run again.
		status, err = f.run(t)
		if err != nil || status != agent.RunFinished || a.Calls() != 1 || len(f.store.AllEvents(testRunID)) != 12 {
			t.Fatalf("rerun: %s %v calls=%d", status, err, a.Calls())
		}
	})
}

func TestRetryByPolicyWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice", FailTimes: 2, FailWith: agent.ErrDeviceOffline}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 3, 2*time.Second, agent.ErrDeviceOffline)), a, b)
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("status %s err %v", status, err)
		}
		v := checkStream(t, f.store, status)
		eq(t, kinds(v), []string{"run.started",
			"node.started:EnsureDevice#1", "node.finished:EnsureDevice#1",
			"node.started:EnsureDevice#2", "node.finished:EnsureDevice#2",
			"node.started:EnsureDevice#3", "node.finished:EnsureDevice#3",
			"node.started:ProvisionApp#1", "node.finished:ProvisionApp#1", "run.finished"})
		if a.Calls() != 3 {
			t.Fatalf("calls %d", a.Calls())
		}
		for i, in := range a.Inputs() {
			if in.Attempt != i+1 || in.StepOrdinal != i {
				t.Fatalf("attempt %d input %+v", i, in)
			}
		}
		// Backoff: each retry starts >= 2 s after the failed attempt finished.
		evs := f.store.AllEvents(testRunID)
		fin1, _ := time.Parse(agent.TimestampLayout, evs[2].TS)
		start2, _ := time.Parse(agent.TimestampLayout, evs[3].TS)
		if d := start2.Sub(fin1); d < 2*time.Second {
			t.Fatalf("retry after %s", d)
		}
		if v[2].Payload["retryBackoffMillis"] != float64(2000) || v[2].Payload["errorId"] != "device_offline" || v[2].Payload["retryable"] != true {
			t.Fatalf("finished#1 payload %v", v[2].Payload)
		}
		// The attempt count lives in the snapshot (state-based retry).
		sn, _ := f.store.Snapshot(context.Background(), agent.Admin(), testRunID, 1)
		st, _ := agent.DecodeRunState(sn)
		if st.Attempts["EnsureDevice"] != 2 || st.Next != "EnsureDevice" || st.NotBefore == "" {
			t.Fatalf("state after attempt 2: %+v", st)
		}
	})
}

func TestRetryExhaustedFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp", FailTimes: -1, FailWith: agent.ErrNetwork}
		c := &agenttest.Node{NodeName: "LaunchOrAttach"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 3, time.Second, agent.ErrNetwork)), a, b, c)
		status, err := f.run(t)
		if err != nil || status != agent.RunFailed {
			t.Fatalf("status %s err %v", status, err)
		}
		v := checkStream(t, f.store, status)
		if b.Calls() != 3 || c.Calls() != 0 {
			t.Fatalf("calls b=%d c=%d", b.Calls(), c.Calls())
		}
		last := v[len(v)-1]
		if last.Kind != agent.KindRunFailed || last.Payload["failedNode"] != "ProvisionApp" || last.Payload["errorId"] != "network_error" {
			t.Fatalf("terminal %+v", last)
		}
		sn, _ := f.store.LatestSnapshot(context.Background(), agent.Admin(), testRunID)
		st, _ := agent.DecodeRunState(sn)
		if st.Failure == nil || st.Failure.Attempts != 3 || !st.Failure.Retryable {
			t.Fatalf("failure %+v", st.Failure)
		}
	})
}

func TestNonRetryableFailsAtOnce(t *testing.T) {
	for _, viaOutput := range []bool{false, true} {
		t.Run(fmt.Sprint("viaOutput=", viaOutput), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &agenttest.Node{NodeName: "ProvisionApp", FailTimes: -1, FailWith: agent.ErrInstallFailed, FailCode: "INSTALL_FAILED_INSUFFICIENT_STORAGE", FailViaOutput: viaOutput}
				b := &agenttest.Node{NodeName: "LaunchOrAttach"}
				f := newFixture(t, agenttest.NewPolicies(policy(1, 5, time.Second, agent.ErrNetwork)), a, b)
				status, err := f.run(t)
				if err != nil || status != agent.RunFailed || a.Calls() != 1 || b.Calls() != 0 {
					t.Fatalf("status %s err %v calls %d/%d", status, err, a.Calls(), b.Calls())
				}
				v := checkStream(t, f.store, status)
				fin := v[len(v)-2].Payload
				if fin["errorId"] != "install_failed" || fin["retryable"] != false || fin["nodeExecutionOutcomeStatus"] != "FAILURE" {
					t.Fatalf("finished payload %v", fin)
				}
				out := fin["output"].(map[string]any)
				if out["errorId"] != "install_failed" || out["humanReadableFailureSummary"] == nil || out["nodeName"] != "ProvisionApp" {
					t.Fatalf("output %v", out)
				}
				if !viaOutput && fin["errorCode"] != "INSTALL_FAILED_INSUFFICIENT_STORAGE" {
					t.Fatalf("errorCode %v", fin["errorCode"])
				}
			})
		})
	}
}

func TestCancelBetweenNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(ctx context.Context, in agent.NodeInput) { f.control(t, agent.KindCancelRequested, 0) }
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		status, err := f.run(t)
		if err != nil || status != agent.RunCanceled || b.Calls() != 0 {
			t.Fatalf("status %s err %v b=%d", status, err, b.Calls())
		}
		v := checkStream(t, f.store, status)
		eq(t, kinds(v), []string{"run.started", "node.started:EnsureDevice#1", "node.finished:EnsureDevice#1", "run.canceled"})
		if v[3].Payload["canceledBeforeNode"] != "ProvisionApp" {
			t.Fatalf("canceled payload %v", v[3].Payload)
		}
		// A later cancel request is refused; an engine pass changes nothing.
		f.controlAfterEnd(t, agent.KindCancelRequested)
		if s, err := f.run(t); err != nil || s != agent.RunCanceled || len(f.store.AllEvents(testRunID)) != 4 {
			t.Fatalf("rerun %s %v", s, err)
		}
	})
}

func TestCancelBeforeStartByStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a)
		if err := f.store.SetStatus(context.Background(), testRunID, []agent.RunStatus{agent.RunPending}, agent.RunCancelRequested); err != nil {
			t.Fatal(err)
		}
		status, err := f.run(t)
		if err != nil || status != agent.RunCanceled || a.Calls() != 0 {
			t.Fatalf("status %s err %v", status, err)
		}
		eq(t, kinds(checkStream(t, f.store, status)), []string{"run.started", "run.canceled"})
	})
}

// A cancel that lands while the last node runs, or between its commit and
// the finishing CAS, still yields exactly one terminal event.
func TestCancelRacesLastNode(t *testing.T) {
	cases := map[string]func(f *fixture, t *testing.T){
		"control during last node": func(f *fixture, t *testing.T) {
			f.nodes[1].OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindCancelRequested, 0) }
		},
		"status during last node": func(f *fixture, t *testing.T) {
			f.nodes[1].OnRun = func(context.Context, agent.NodeInput) {
				_ = f.store.SetStatus(context.Background(), testRunID, []agent.RunStatus{agent.RunRunning}, agent.RunCancelRequested)
			}
		},
		"status just before the finishing CAS": func(f *fixture, t *testing.T) {
			f.store.BeforeCommit = func(s agent.Step) {
				if s.StatusTo == agent.RunFinished {
					_ = f.store.SetStatus(context.Background(), testRunID, []agent.RunStatus{agent.RunRunning}, agent.RunCancelRequested)
				}
			}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &agenttest.Node{NodeName: "EnsureDevice"}
				b := &agenttest.Node{NodeName: "WaitIdle"}
				f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
				setup(f, t)
				status, err := f.run(t)
				if err != nil || status != agent.RunCanceled {
					t.Fatalf("status %s err %v", status, err)
				}
				eq(t, kinds(checkStream(t, f.store, status)), []string{"run.started",
					"node.started:EnsureDevice#1", "node.finished:EnsureDevice#1",
					"node.started:WaitIdle#1", "node.finished:WaitIdle#1", "run.canceled"})
			})
		})
	}
	// A cancel after the terminal commit is too late: refused, nothing
	// recorded.
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a)
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("status %s err %v", status, err)
		}
		f.controlAfterEnd(t, agent.KindCancelRequested)
		checkStream(t, f.store, status)
	})
	// A request recorded between the engine's last look and its finishing
	// commit (one that changes no status: a policy switch) is not stranded:
	// the commit fails (ErrControlPending), the engine reads it and the
	// finishing commit takes it.
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0), policy(2, 1, 0)), a)
		var id string
		f.store.BeforeCommit = func(s agent.Step) {
			if s.StatusTo == agent.RunFinished && id == "" {
				id = f.control(t, agent.KindPolicySwitchRequested, 2)
			}
		}
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("status %s err %v", status, err)
		}
		v := checkStream(t, f.store, status)
		if e := v[checkApplied(t, v, id)[0]]; e.Kind != agent.KindRunFinished || e.Payload["policyVersion"] != float64(2) {
			t.Fatalf("switch applied by %s %v", e.Kind, e.Payload)
		}
		if p, _ := f.store.PendingControl(context.Background(), testRunID); len(p) != 0 {
			t.Fatalf("pending at the end: %+v", p)
		}
	})
}

func TestPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindPauseRequested, 0) }
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		type result struct {
			s   agent.RunStatus
			err error
		}
		done := make(chan result, 1)
		go func() { s, err := f.run(t); done <- result{s, err} }()
		time.Sleep(10 * time.Minute) // fake time: the engine polls all along
		synctest.Wait()
		r, _ := f.store.GetRun(context.Background(), agent.Admin(), testRunID)
		if r.Status != agent.RunPaused || b.Calls() != 0 {
			t.Fatalf("while paused: status %s, b calls %d", r.Status, b.Calls())
		}
		// A policy switch while paused applies once resumed.
		f.control(t, agent.KindResumeRequested, 0)
		res := <-done
		if res.err != nil || res.s != agent.RunFinished || b.Calls() != 1 {
			t.Fatalf("after resume: %s %v", res.s, res.err)
		}
		eq(t, kinds(checkStream(t, f.store, res.s)), []string{"run.started",
			"node.started:EnsureDevice#1", "node.finished:EnsureDevice#1", "run.paused", "run.resumed",
			"node.started:ProvisionApp#1", "node.finished:ProvisionApp#1", "run.finished"})
	})
}

func TestPausedThenCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindPauseRequested, 0) }
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		go func() {
			time.Sleep(time.Minute)
			f.control(t, agent.KindCancelRequested, 0)
		}()
		status, err := f.run(t)
		if err != nil || status != agent.RunCanceled || b.Calls() != 0 {
			t.Fatalf("status %s err %v", status, err)
		}
		eq(t, kinds(checkStream(t, f.store, status)), []string{"run.started",
			"node.started:EnsureDevice#1", "node.finished:EnsureDevice#1", "run.paused", "run.canceled"})
	})
}

func TestPolicySwitchAppliesToLaterNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) {
			f.control(t, agent.KindPolicySwitchRequested, 2)
			f.control(t, agent.KindPolicySwitchRequested, 99) // unknown: ignored
		}
		// Under v1 network_error is not retried; under v2 it is.
		b := &agenttest.Node{NodeName: "ProvisionApp", FailTimes: 1, FailWith: agent.ErrNetwork}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0), policy(2, 3, time.Second, agent.ErrNetwork)), a, b)
		var logged []string
		f.eng.Logf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("status %s err %v", status, err)
		}
		if a.Inputs()[0].PolicyVersion != 1 || b.Inputs()[0].PolicyVersion != 2 || b.Inputs()[0].Policy.Version() != 2 {
			t.Fatalf("policy versions a=%d b=%d", a.Inputs()[0].PolicyVersion, b.Inputs()[0].PolicyVersion)
		}
		v := checkStream(t, f.store, status)
		if v[1].Payload["policyVersion"] != float64(1) || v[3].Payload["policyVersion"] != float64(2) {
			t.Fatalf("started payloads %v / %v", v[1].Payload, v[3].Payload)
		}
		sn, _ := f.store.LatestSnapshot(context.Background(), agent.Admin(), testRunID)
		st, _ := agent.DecodeRunState(sn)
		var out agent.Common
		_ = json.Unmarshal(st.Outputs["ProvisionApp"], &out)
		var outA agent.Common
		_ = json.Unmarshal(st.Outputs["EnsureDevice"], &outA)
		if st.PolicyVersion != 2 || out.PolicyVersion != 2 || outA.PolicyVersion != 1 {
			t.Fatalf("state v%d, outputs v%d/v%d", st.PolicyVersion, outA.PolicyVersion, out.PolicyVersion)
		}
		if len(logged) != 1 {
			t.Fatalf("logged %q", logged)
		}
	})
}

func TestNodeTimeout(t *testing.T) {
	for _, ignoreCtx := range []bool{false, true} {
		t.Run(fmt.Sprint("ignoreCtx=", ignoreCtx), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &agenttest.Node{NodeName: "WaitIdle", BlockUntilDone: true, IgnoreCtx: ignoreCtx}
				p := policy(1, 2, time.Second, agent.ErrTimeout)
				p.Timeouts["WaitIdle"] = 3 * time.Second
				f := newFixture(t, agenttest.NewPolicies(p), a)
				t0 := time.Now()
				status, err := f.run(t)
				if err != nil || status != agent.RunFailed || a.Calls() != 2 {
					t.Fatalf("status %s err %v calls %d", status, err, a.Calls())
				}
				if ignoreCtx {
					a.Release()
				}
				// 2 attempts x 3 s + 1 s backoff (+ 1 s grace each when abandoned).
				want := 7 * time.Second
				if ignoreCtx {
					want = 9 * time.Second
				}
				if d := time.Since(t0); d != want {
					t.Fatalf("took %s, want %s", d, want)
				}
				v := checkStream(t, f.store, status)
				fin := v[len(v)-2].Payload
				attemptMillis := float64(3000)
				if ignoreCtx {
					attemptMillis = 4000 // deadline + grace
				}
				if fin["errorId"] != "timeout" || fin["durationMillis"] != attemptMillis {
					t.Fatalf("finished %v", fin)
				}
				if v[1].Payload["timeoutMillis"] != float64(3000) {
					t.Fatalf("started %v", v[1].Payload)
				}
			})
		})
	}
}

func TestPanicIsInternalError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice", Panic: true}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 3, 0, agent.ErrNetwork)), a)
		status, err := f.run(t)
		if err != nil || status != agent.RunFailed {
			t.Fatalf("status %s err %v", status, err)
		}
		v := checkStream(t, f.store, status)
		if v[len(v)-2].Payload["errorId"] != "internal_error" {
			t.Fatalf("%v", v[len(v)-2].Payload)
		}
	})
}

func TestUnknownNextNodeFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice", Next: "Nowhere"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a)
		status, err := f.run(t)
		if err != nil || status != agent.RunFailed {
			t.Fatalf("status %s err %v", status, err)
		}
		checkStream(t, f.store, status)
	})
}

// Stopping the daemon mid-node leaves the run RUNNING with no terminal
// event; a new engine resumes from the snapshot and does not re-run
// finished nodes.
func TestResumeAfterDaemonStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp", BlockUntilDone: true}
		b.OnRun = func(context.Context, agent.NodeInput) { stop() }
		c := &agenttest.Node{NodeName: "LaunchOrAttach"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b, c)
		status, err := f.eng.Run(ctx, testRunID, f.graph)
		if !errors.Is(err, context.Canceled) || status != agent.RunRunning {
			t.Fatalf("stop: status %s err %v", status, err)
		}
		eq(t, kinds(checkStream(t, f.store, status)), []string{"run.started", "node.started:EnsureDevice#1", "node.finished:EnsureDevice#1"})

		b.BlockUntilDone, b.OnRun = false, nil
		f.eng.IDs = agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(8))) // a new daemon
		status, err = f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("resume: status %s err %v", status, err)
		}
		if a.Calls() != 1 || b.Calls() != 2 || c.Calls() != 1 {
			t.Fatalf("calls %d %d %d", a.Calls(), b.Calls(), c.Calls())
		}
		eq(t, kinds(checkStream(t, f.store, status)), []string{"run.started",
			"node.started:EnsureDevice#1", "node.finished:EnsureDevice#1",
			"node.started:ProvisionApp#1", "node.finished:ProvisionApp#1",
			"node.started:LaunchOrAttach#1", "node.finished:LaunchOrAttach#1", "run.finished"})
		// The resumed node sees the earlier output from the snapshot and runs as step 1.
		in := b.Inputs()[1]
		if in.StepOrdinal != 1 || len(in.Outputs) != 1 || in.Outputs["EnsureDevice"] == nil {
			t.Fatalf("resumed input %+v", in)
		}
		sn, _ := f.store.LatestSnapshot(context.Background(), agent.Admin(), testRunID)
		st, _ := agent.DecodeRunState(sn)
		if st.Pass != 2 || st.Completed[0].Pass != 1 || st.Completed[1].Pass != 2 {
			t.Fatalf("passes %+v", st.Completed)
		}
	})
}

// A policy switch taken at a boundary is not lost when the daemon stops (or
// crashes) during the next node: the request stays pending until that node's
// commit, so the resumed run re-reads it and the node re-runs under the new
// policy; its node.started event names the request, once.
func TestPolicySwitchSurvivesStopDuringNextNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		var f *fixture
		var id string
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) { id = f.control(t, agent.KindPolicySwitchRequested, 2) }
		b := &agenttest.Node{NodeName: "ProvisionApp", BlockUntilDone: true}
		b.OnRun = func(context.Context, agent.NodeInput) { stop() }
		c := &agenttest.Node{NodeName: "LaunchOrAttach"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0), policy(2, 1, 0)), a, b, c)
		status, err := f.eng.Run(ctx, testRunID, f.graph)
		if !errors.Is(err, context.Canceled) || status != agent.RunRunning {
			t.Fatalf("stop: status %s err %v", status, err)
		}
		if b.Inputs()[0].PolicyVersion != 2 {
			t.Fatalf("first attempt of b under v%d, want v2", b.Inputs()[0].PolicyVersion)
		}
		if p, _ := f.store.PendingControl(context.Background(), testRunID); len(p) != 1 || p[0].ID != id {
			t.Fatalf("pending after the stop: %+v, want the switch %s", p, id)
		}
		// Not taken yet, so the run row still names the submitted version.
		if r, _ := f.store.GetRun(context.Background(), agent.Admin(), testRunID); r.PolicyVersion != 1 {
			t.Fatalf("run row policy version %d before the switch was taken, want 1", r.PolicyVersion)
		}

		b.BlockUntilDone, b.OnRun = false, nil
		f.eng.IDs = agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(8))) // a new daemon
		status, err = f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("resume: status %s err %v", status, err)
		}
		if got := b.Inputs()[1].PolicyVersion; got != 2 || c.Inputs()[0].PolicyVersion != 2 {
			t.Fatalf("after the restart b ran under v%d, c under v%d; want v2", got, c.Inputs()[0].PolicyVersion)
		}
		v := checkStream(t, f.store, status)
		at := checkApplied(t, v, id)
		if e := v[at[0]]; e.Kind != agent.KindNodeStarted || e.Node != "ProvisionApp" || e.Payload["policyVersion"] != float64(2) {
			t.Fatalf("switch applied by %s %s %v", e.Kind, e.Node, e.Payload)
		}
		if p, _ := f.store.PendingControl(context.Background(), testRunID); len(p) != 0 {
			t.Fatalf("pending at the end: %+v", p)
		}
		// The commit that took the switch set the row's version: run lists
		// (which read rows) agree with the detail (which reads events).
		if r, _ := f.store.GetRun(context.Background(), agent.Admin(), testRunID); r.PolicyVersion != 2 {
			t.Fatalf("run row policy version %d after the switch, want 2", r.PolicyVersion)
		}
	})
}

// A pause and a resume each name their request in the event of the status
// change they caused, across a daemon stop while paused. A policy switch
// read at the pause's boundary is not taken by the pause (which writes no
// snapshot): it survives the stop and the next node's commit takes it.
func TestPauseResumeAppliedOnceAcrossStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		var f *fixture
		var pause, sw string
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) {
			pause = f.control(t, agent.KindPauseRequested, 0)
			sw = f.control(t, agent.KindPolicySwitchRequested, 2)
		}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0), policy(2, 1, 0)), a, b)
		done := make(chan error, 1)
		go func() { _, err := f.eng.Run(ctx, testRunID, f.graph); done <- err }()
		synctest.Wait() // paused, polling
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("stop: %v", err)
		}
		resume := f.control(t, agent.KindResumeRequested, 0)
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished || b.Calls() != 1 {
			t.Fatalf("status %s err %v b=%d", status, err, b.Calls())
		}
		v := checkStream(t, f.store, status)
		at := checkApplied(t, v, pause, resume, sw)
		if v[at[0]].Kind != agent.KindRunPaused || v[at[1]].Kind != agent.KindRunResumed {
			t.Fatalf("pause applied by %s, resume by %s", v[at[0]].Kind, v[at[1]].Kind)
		}
		if e := v[at[2]]; e.Kind != agent.KindNodeStarted || e.Node != "ProvisionApp" || b.Inputs()[0].PolicyVersion != 2 {
			t.Fatalf("switch applied by %s %s; b ran under v%d", e.Kind, e.Node, b.Inputs()[0].PolicyVersion)
		}
	})
}

// A daemon stop during a retry backoff or a pause is resumable too: the
// backoff deadline and the attempt count come from the snapshot, the pause
// from runs.status.
func TestResumeDuringBackoffAndPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		a := &agenttest.Node{NodeName: "EnsureDevice", FailTimes: 1, FailWith: agent.ErrNetwork}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 3, 10*time.Second, agent.ErrNetwork)), a, b)
		go func() { time.Sleep(5 * time.Second); stop() }()
		status, err := f.eng.Run(ctx, testRunID, f.graph)
		if !errors.Is(err, context.Canceled) || status != agent.RunRunning || a.Calls() != 1 {
			t.Fatalf("stop in backoff: %s %v calls %d", status, err, a.Calls())
		}
		t0 := time.Now()
		f.control(t, agent.KindPauseRequested, 0)
		ctx2, stop2 := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Minute); stop2() }()
		status, err = f.eng.Run(ctx2, testRunID, f.graph)
		if !errors.Is(err, context.Canceled) || status != agent.RunPaused || a.Calls() != 1 {
			t.Fatalf("stop in pause: %s %v calls %d", status, err, a.Calls())
		}
		// The remaining 5 s of backoff elapsed before the pause was taken.
		if d := time.Since(t0); d != time.Minute {
			t.Fatalf("second pass ran %s", d)
		}
		f.control(t, agent.KindResumeRequested, 0)
		status, err = f.run(t)
		if err != nil || status != agent.RunFinished || a.Calls() != 2 || a.Inputs()[1].Attempt != 2 {
			t.Fatalf("final: %s %v calls %d", status, err, a.Calls())
		}
		checkStream(t, f.store, status)
	})
}

// Two engines on one run (a stale daemon and its replacement): the store's
// unique sequences and CAS leave one writer and exactly one terminal event.
func TestTwoEnginesOneRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &agenttest.Node{NodeName: "EnsureDevice", Sleep: time.Second}
		b := &agenttest.Node{NodeName: "ProvisionApp", Sleep: time.Second}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		eng2 := *f.eng
		eng2.IDs = agent.NewULIDs(agent.SystemClock{}, rand.New(rand.NewSource(9)))
		errs := make(chan error, 2)
		go func() { _, err := f.eng.Run(context.Background(), testRunID, f.graph); errs <- err }()
		go func() { _, err := eng2.Run(context.Background(), testRunID, f.graph); errs <- err }()
		e1, e2 := <-errs, <-errs
		taken := 0
		for _, e := range []error{e1, e2} {
			if errors.Is(e, agent.ErrSequenceTaken) {
				taken++
			} else if e != nil {
				t.Fatalf("unexpected error %v", e)
			}
		}
		r, _ := f.store.GetRun(context.Background(), agent.Admin(), testRunID)
		if r.Status != agent.RunFinished || taken != 1 {
			t.Fatalf("status %s, %d engines lost (errs %v / %v)", r.Status, taken, e1, e2)
		}
		checkStream(t, f.store, r.Status)
	})
}

func TestGraphValidation(t *testing.T) {
	n := &agenttest.Node{NodeName: "A"}
	if _, err := agent.NewGraph("g", "B", n); err == nil {
		t.Error("unknown start accepted")
	}
	if _, err := agent.NewGraph("g", "A", n, &agenttest.Node{NodeName: "A"}); err == nil {
		t.Error("duplicate accepted")
	}
	if _, err := agent.NewGraph("g", agent.End, &agenttest.Node{NodeName: agent.End}); err == nil {
		t.Error("End as a node accepted")
	}
	g, err := agent.NewGraph("setup", "A", n)
	if err != nil {
		t.Fatal(err)
	}
	st := agenttest.NewStore()
	_ = st.CreateRun(context.Background(), agent.Run{RunID: "r", Graph: "other", Status: agent.RunPending})
	eng := &agent.Engine{Store: st, Policies: agenttest.NewPolicies(policy(1, 1, 0))}
	if _, err := eng.Run(context.Background(), "r", g); err == nil {
		t.Error("graph mismatch accepted")
	}
	if _, err := eng.Run(context.Background(), "missing", g); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("missing run: %v", err)
	}
}
