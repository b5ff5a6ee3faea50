package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// apiEnv is the real HTTP API over a real run service on the embedded store
// (in a temp dir), driving runs of a two-node test graph with the engine.
// Runs whose serial starts with "blocked" wait in their first node until
// the test closes gate.
type apiEnv struct {
	svc  *service.Service
	st   *sqlite.Store
	url  string
	gate chan struct{}
	// eventsServed is closed when the API first begins serving a run's
	// events (GET /v1/runs/{id}/events): a follower is connected.
	eventsServed chan struct{}
}

func newAPIEnv(t *testing.T, opts ...func(*service.Config)) *apiEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &apiEnv{st: st, gate: make(chan struct{}), eventsServed: make(chan struct{})}
	first := &agenttest.Node{NodeName: "first", Next: "second", OnRun: func(ctx context.Context, in agent.NodeInput) {
		if strings.HasPrefix(in.Run.Serial, "blocked") {
			select {
			case <-e.gate:
			case <-ctx.Done():
			}
		}
	}}
	second := &agenttest.Node{NodeName: "second", Next: agent.End}
	g, err := agent.NewGraph("test", "first", first, second)
	if err != nil {
		t.Fatal(err)
	}
	pols := agenttest.NewPolicies(&agenttest.Policy{V: 1, MaxAttempts: 1, Timeouts: map[string]time.Duration{}},
		&agenttest.Policy{V: 2, MaxAttempts: 1, Timeouts: map[string]time.Duration{}})
	newID := func() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }
	cfg := service.Config{
		Store: st, Leases: st, NewID: newID, Holder: "test:" + newID(), Tick: 50 * time.Millisecond, LeaseTTL: 5 * time.Second,
		Prepare: servicetest.Prepare(func(ctx context.Context, runID string, body []byte) (agent.Run, error) {
			var req struct {
				Serial string `json:"serial"`
			}
			if err := json.Unmarshal(body, &req); err != nil || req.Serial == "" {
				return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.serial: required")
			}
			return agent.Run{RunID: runID, TenantID: "local", Status: agent.RunPending, Serial: req.Serial, Graph: "test",
				Input: body, PolicyVersion: 1}, nil
		}),
		Policy: pols,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.svc, err = service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: e.svc.Store(), Policies: pols, PollInterval: 20 * time.Millisecond}
	e.svc.SetRunner(service.RunnerFunc(func(ctx context.Context, runID string) (agent.RunStatus, error) {
		return eng.Run(ctx, runID, g)
	}))
	if err := e.svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(httpapi.Config{Service: e.svc, Graph: g})
	var served sync.Once
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			served.Do(func() { close(e.eventsServed) })
		}
		api.ServeHTTP(w, r)
	}))
	e.url = hs.URL
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.svc.Shutdown(sctx)
		hs.Close()
		st.Close()
	})
	return e
}

func (e *apiEnv) submit(t *testing.T, serial string) string {
	t.Helper()
	r, err := e.svc.Submit(context.Background(), agent.Admin(), []byte(`{"serial":"`+serial+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	return r.RunID
}

func (e *apiEnv) waitStatus(t *testing.T, id string, want agent.RunStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.svc.Get(context.Background(), agent.Admin(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %s", id, r.Status, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *apiEnv) flags(output string) controlFlags {
	return controlFlags{serverFlags{e.url}, outputFlag{output}}
}

// cliRun runs fn with stdout and stderr captured, bounded by 20 s.
func cliRun(t *testing.T, fn func(ctx context.Context) error) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return captureOutput(t, func() error { return fn(ctx) })
}

// wantExit2 checks a failed command: exit code 2 and a message containing want.
func wantExit2(t *testing.T, err error, want string) {
	t.Helper()
	var ee cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 2 {
		t.Fatalf("want exit code 2, got %v", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// errorReport parses the agent error format printed under --output json.
type errorReportView struct {
	Success *bool            `json:"success"`
	Error   string           `json:"error"`
	Errors  []map[string]any `json:"errors"`
}

func errorReport(t *testing.T, out string) errorReportView {
	t.Helper()
	var rep errorReportView
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not the agent error format: %v\n%s", err, out)
	}
	if rep.Success == nil || *rep.Success || rep.Error == "" || len(rep.Errors) != 1 || rep.Errors[0]["message"] == "" {
		t.Fatalf("not a failure in the agent error format: %s", out)
	}
	return rep
}

func TestClientControlCommands(t *testing.T) {
	e := newAPIEnv(t)
	id := e.submit(t, "blocked-1")
	e.waitStatus(t, id, agent.RunRunning)

	out, err := cliRun(t, func(ctx context.Context) error { return (&pauseCmd{e.flags("text"), id}).Run(ctx) })
	if err != nil || strings.TrimSpace(out) != "pause of run "+id+" recorded" {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&policySwitchCmd{e.flags("json"), id, 2}).Run(ctx)
	})
	var cr httpapi.ControlResponse
	if err != nil || json.Unmarshal([]byte(out), &cr) != nil || cr.RequestID == "" ||
		cr != (httpapi.ControlResponse{RunID: id, Kind: agent.KindPolicySwitchRequested, RequestID: cr.RequestID, Recorded: true}) {
		t.Fatalf("policy switch --output json: %v\n%s", err, out)
	}
	close(e.gate) // the node ends; the pause takes effect at the boundary
	e.waitStatus(t, id, agent.RunPaused)
	out, err = cliRun(t, func(ctx context.Context) error { return (&resumeCmd{e.flags("text"), id}).Run(ctx) })
	if err != nil || !strings.Contains(out, "resume of run "+id+" recorded") {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	e.waitStatus(t, id, agent.RunFinished)
	// The second node ran under the switched policy.
	evs, _ := e.svc.Events(context.Background(), agent.Admin(), id, 0)
	var v2 bool
	for _, ev := range evs {
		var p struct {
			NodeName string `json:"nodeName"`
			Output   struct {
				PolicyVersion int `json:"policyVersion"`
			} `json:"output"`
		}
		json.Unmarshal(ev.Payload, &p)
		v2 = v2 || (ev.Kind == agent.KindNodeFinished && p.NodeName == "second" && p.Output.PolicyVersion == 2)
	}
	if !v2 {
		t.Errorf("the policy switch did not apply to the next node")
	}

	// A finished run: 409, in text and json.
	_, err = cliRun(t, func(ctx context.Context) error { return (&cancelCmd{e.flags("text"), id}).Run(ctx) })
	wantExit2(t, err, "run "+id+" already ended")
	out, err = cliRun(t, func(ctx context.Context) error { return (&pauseCmd{e.flags("json"), id}).Run(ctx) })
	wantExit2(t, err, "already ended")
	if rep := errorReport(t, out); !strings.Contains(rep.Error, "FINISHED") {
		t.Errorf("409 body: %s", out)
	}

	// An unknown run: 404.
	const none = "01J0000000000000000000NONE"
	for _, output := range []string{"text", "json"} {
		out, err = cliRun(t, func(ctx context.Context) error { return (&cancelCmd{e.flags(output), none}).Run(ctx) })
		wantExit2(t, err, "unknown run "+none)
		if output == "json" {
			errorReport(t, out)
		} else if out != "" {
			t.Errorf("text failure printed %q (main prints the error)", out)
		}
	}
	// An unknown policy version: the daemon's 400.
	id2 := e.submit(t, "blocked-2") // the gate is open: it finishes
	out, err = cliRun(t, func(ctx context.Context) error { return (&policySwitchCmd{e.flags("json"), none, 9}).Run(ctx) })
	wantExit2(t, err, "400")
	if rep := errorReport(t, out); rep.Errors[0]["category"] != agent.CategoryAPIValidation {
		t.Errorf("400 body: %s", out)
	}
	e.waitStatus(t, id2, agent.RunFinished)

	// No daemon: a clear error naming the server, in the agent error format too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	for _, output := range []string{"text", "json"} {
		out, err = cliRun(t, func(ctx context.Context) error {
			return (&resumeCmd{controlFlags{serverFlags{dead}, outputFlag{output}}, id}).Run(ctx)
		})
		wantExit2(t, err, "no daemon answers at "+dead)
		if !strings.Contains(err.Error(), "screengraph-agent serve") {
			t.Errorf("no hint to start the daemon: %v", err)
		}
		if output == "json" {
			rep := errorReport(t, out)
			if rep.Errors[0]["error_id"] != string(agent.ErrNetwork) {
				t.Errorf("connection refused: %s", out)
			}
		}
	}
}

func TestRunsThroughServer(t *testing.T) {
	e := newAPIEnv(t)
	id := e.submit(t, "emu-1")
	e.waitStatus(t, id, agent.RunFinished)
	srv := serverFlags{e.url}
	sf := storeFlags{} // --server given: no local store is read

	out, err := cliRun(t, func(ctx context.Context) error {
		return (&runsListCmd{storeFlags: sf, serverFlags: srv, outputFlag: outputFlag{"text"}, Limit: 5}).Run(ctx)
	})
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "FINISHED") || !strings.Contains(out, "emu-1") {
		t.Fatalf("runs list: %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsListCmd{storeFlags: sf, serverFlags: srv, outputFlag: outputFlag{"json"}, Status: "finished", Serial: "emu-1"}).Run(ctx)
	})
	var list struct{ Runs []agent.Run }
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Runs) != 1 || list.Runs[0].RunID != id {
		t.Fatalf("runs list --output json: %v\n%s", err, out)
	}

	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsShowCmd{sf, srv, outputFlag{"text"}, id}).Run(ctx)
	})
	if err != nil || !strings.Contains(out, "status FINISHED") || !strings.Contains(out, "completed second (step 1)") {
		t.Fatalf("runs show: %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsShowCmd{sf, srv, outputFlag{"json"}, id}).Run(ctx)
	})
	var show struct {
		Run          agent.Run       `json:"run"`
		State        *agent.RunState `json:"state"`
		LastSequence int64           `json:"lastSequence"`
	}
	if err != nil || json.Unmarshal([]byte(out), &show) != nil || show.Run.Status != agent.RunFinished || show.State == nil ||
		len(show.State.Completed) != 2 || show.LastSequence < 6 {
		t.Fatalf("runs show --output json: %v\n%s", err, out)
	}

	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{storeFlags: sf, serverFlags: srv, outputFlag: outputFlag{"json"}, RunID: id}).Run(ctx)
	})
	var evs struct{ Events []agent.Event }
	if err != nil || json.Unmarshal([]byte(out), &evs) != nil || int64(len(evs.Events)) != show.LastSequence ||
		evs.Events[len(evs.Events)-1].Kind != agent.KindRunFinished {
		t.Fatalf("runs events --output json: %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{storeFlags: sf, serverFlags: srv, outputFlag: outputFlag{"text"}, RunID: id, After: 1}).Run(ctx)
	})
	if err != nil || !strings.HasPrefix(out, "SEQ") || strings.Contains(out, agent.KindRunStarted) || !strings.Contains(out, agent.KindRunFinished) {
		t.Fatalf("runs events --after 1: %v\n%s", err, out)
	}

	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsInspectCmd{sf, srv, outputFlag{"json"}, id, 0}).Run(ctx)
	})
	var sv snapshots.StepView
	if err != nil || json.Unmarshal([]byte(out), &sv) != nil || sv.Snapshot.NodeName != "first" || sv.Run.RunID != id || len(sv.Events) < 2 {
		t.Fatalf("runs inspect --step 0: %v\n%s", err, out)
	}
	for _, ev := range sv.Events {
		if !strings.HasPrefix(ev.Kind, "agent.node.") {
			t.Errorf("step 0 event %s", ev.Kind)
		}
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsInspectCmd{sf, srv, outputFlag{"text"}, id, -1}).Run(ctx)
	})
	if err != nil || !strings.Contains(out, "step 1  node second") {
		t.Fatalf("runs inspect (latest): %v\n%s", err, out)
	}

	// A step the run lacks is named as such, not as an unknown run (issue 16).
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsInspectCmd{sf, srv, outputFlag{"json"}, id, 99}).Run(ctx)
	})
	wantExit2(t, err, "run "+id+" has no step 99 (steps 0..1)")
	if rep := errorReport(t, out); !strings.Contains(rep.Error, "no step 99") || strings.Contains(rep.Error, "unknown run") {
		t.Errorf("runs inspect --step 99 --output json: %s", out)
	}

	const none = "01J0000000000000000000NONE"
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsShowCmd{sf, srv, outputFlag{"json"}, none}).Run(ctx)
	})
	wantExit2(t, err, "unknown run "+none)
	errorReport(t, out)
}

func TestRunsEventsFollowEndsWithRun(t *testing.T) {
	e := newAPIEnv(t)
	id := e.submit(t, "blocked-1")
	e.waitStatus(t, id, agent.RunRunning)
	released := make(chan time.Time, 1)
	go func() {
		<-e.eventsServed // the follower is connected: the run ends while it follows
		released <- time.Now()
		close(e.gate)
	}()
	start := time.Now()
	out, err := cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{serverFlags: serverFlags{e.url}, outputFlag: outputFlag{"json"}, RunID: id, Follow: true}).Run(ctx)
	})
	if err != nil {
		t.Fatalf("runs events --follow: %v\n%s", err, out)
	}
	rel := <-released
	if rel.Before(start) {
		t.Fatal("the run was released before following began")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var seq int64
	for _, l := range lines {
		var ev agent.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("not one event a line: %q", l)
		}
		if seq++; ev.Sequence != seq {
			t.Fatalf("sequence %d, want %d", ev.Sequence, seq)
		}
	}
	var last agent.Event
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if last.Kind != agent.KindRunFinished {
		t.Fatalf("follow ended on %s, not the run's end", last.Kind)
	}

	// Text, on an ended run: the rows, and it returns.
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{serverFlags: serverFlags{e.url}, outputFlag: outputFlag{"text"}, RunID: id, Follow: true}).Run(ctx)
	})
	if err != nil || !strings.HasPrefix(out, "SEQ") || strings.Count(out, "\n") != len(lines)+1 {
		t.Fatalf("runs events --follow (text): %v\n%s", err, out)
	}
	// Unknown run.
	_, err = cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{serverFlags: serverFlags{e.url}, outputFlag: outputFlag{"text"}, RunID: "01J0000000000000000000NONE", Follow: true}).Run(ctx)
	})
	wantExit2(t, err, "unknown run")
}

func TestRunsResumeRefusedBesideDaemon(t *testing.T) {
	dir := t.TempDir()
	lock, _, err := sqlite.LockDataDir(dir, "") // as serve holds it
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	out, err := cliRun(t, func(ctx context.Context) error {
		return (&runsResumeCmd{storeFlags: storeFlags{dir}, Output: "json", RunID: "01J0000000000000000000NONE"}).Run(ctx, &Globals{LogLevel: "warn"})
	})
	wantExit2(t, err, "a daemon serves data dir "+dir+"; it resumes runs itself")
	errorReport(t, out)
}

func TestRunsResumeUnknownOrEndedRun(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ended = "01J00000000000000000000END"
	if err := st.CreateRun(ctx, agent.Run{RunID: ended, TenantID: "local", Status: agent.RunPending, Serial: "emu-1", Graph: nodes.SetupGraphName, PolicyVersion: 1, Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetStatus(ctx, ended, []agent.RunStatus{agent.RunPending}, agent.RunFailed); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err = cliRun(t, func(ctx context.Context) error {
		return (&runsResumeCmd{storeFlags: storeFlags{dir}, Output: "text", RunID: "01J0000000000000000000NONE"}).Run(ctx, &Globals{LogLevel: "warn"})
	})
	wantExit2(t, err, "not found")
	_, err = cliRun(t, func(ctx context.Context) error {
		return (&runsResumeCmd{storeFlags: storeFlags{dir}, Output: "text", RunID: ended}).Run(ctx, &Globals{LogLevel: "warn"})
	})
	wantExit2(t, err, "already ended (FAILED)")
	// The lock was released: a daemon could start now.
	lock, _, err := sqlite.LockDataDir(dir, "")
	if err != nil {
		t.Fatalf("runs resume left the data dir locked: %v", err)
	}
	lock.Close()
}

// TestRunsResumeFinishesPausedRun: a run of the setup graph whose four nodes
// all finished, left PAUSED by a stopped process, is resumed by `runs
// resume`: no node runs again (the real graph would need a device and
// Appium), the run ends FINISHED with one agent.run.resumed and one
// agent.run.finished, and its lease is released.
func TestRunsResumeFinishesPausedRun(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.NewStore(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	id := ulid.MustNew(ulid.Now(), rand.Reader).String()
	if err := st.CreateRun(ctx, agent.Run{RunID: id, TenantID: "local", Status: agent.RunPending, Serial: "emulator-5554",
		Graph: nodes.SetupGraphName, PolicyVersion: 1, Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	names := []string{nodes.NodeEnsureDevice, nodes.NodeProvisionApp, nodes.NodeLaunchOrAttach, nodes.NodeWaitIdle}
	var ns []agent.Node
	for i, n := range names {
		node := &agenttest.Node{NodeName: n, Next: agent.End}
		if i+1 < len(names) {
			node.Next = names[i+1]
		} else {
			// The process is asked to pause during the last node, then stops.
			node.OnRun = func(ctx context.Context, in agent.NodeInput) {
				st.RequestControl(ctx, agent.Control{RunID: id, Kind: agent.KindPauseRequested, RequestedAt: time.Now()})
			}
		}
		ns = append(ns, node)
	}
	g, err := agent.NewGraph(nodes.SetupGraphName, names[0], ns...)
	if err != nil {
		t.Fatal(err)
	}
	ectx, stop := context.WithCancel(ctx)
	go func() {
		for ectx.Err() == nil {
			if r, err := st.GetRun(ctx, agent.Admin(), id); err == nil && r.Status == agent.RunPaused {
				stop()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	status, err := (&agent.Engine{Store: st, Policies: pols, PollInterval: 10 * time.Millisecond}).Run(ectx, id, g)
	stop()
	if status != agent.RunPaused || !errors.Is(err, context.Canceled) {
		t.Fatalf("setting up a paused run: %s, %v", status, err)
	}
	before, _ := st.LastSequence(ctx, id)
	st.Close()

	out, err := cliRun(t, func(ctx context.Context) error {
		return (&runsResumeCmd{storeFlags: storeFlags{dir}, ADBServer: "127.0.0.1:1", Appium: "http://127.0.0.1:1", Output: "json", RunID: id}).
			Run(ctx, &Globals{LogLevel: "error"})
	})
	var rep struct {
		Success bool            `json:"success"`
		Status  agent.RunStatus `json:"status"`
		Outputs map[string]json.RawMessage
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || !rep.Success || rep.Status != agent.RunFinished || len(rep.Outputs) != 4 {
		t.Fatalf("runs resume: %v\n%s", err, out)
	}
	st, err = sqlite.Open(ctx, filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, err := st.Events(ctx, agent.Admin(), id, before)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	if strings.Join(kinds, ",") != agent.KindRunResumed+","+agent.KindRunFinished {
		t.Fatalf("events after the resume: %v (no node may run again)", kinds)
	}
	if ls, err := st.ActiveLeases(ctx, agent.Admin()); err != nil || len(ls) != 0 {
		t.Fatalf("leases left held: %v %v", ls, err)
	}

	// Without a daemon, --data-dir reads the local store; --follow of an
	// ended run prints its events and returns.
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsEventsCmd{storeFlags: storeFlags{dir}, outputFlag: outputFlag{"json"}, RunID: id, Follow: true}).Run(ctx)
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || int64(len(lines)) != before+2 || !strings.Contains(lines[len(lines)-1], agent.KindRunFinished) {
		t.Fatalf("runs events --follow (local): %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&runsShowCmd{storeFlags: storeFlags{dir}, outputFlag: outputFlag{"text"}, RunID: id}).Run(ctx)
	})
	if err != nil || !strings.Contains(out, "status FINISHED") || !strings.Contains(out, "graph setup") {
		t.Fatalf("runs show (local): %v\n%s", err, out)
	}
}

// TestClientCLIParsing: the commands parse as documented; --server comes
// from SCREENGRAPH_SERVER when not given.
func TestClientCLIParsing(t *testing.T) {
	t.Setenv("SCREENGRAPH_SERVER", "http://10.0.0.7:7420")
	parse := func(args ...string) (*commands, string) {
		t.Helper()
		var c commands
		p, err := kong.New(&c, kong.Name("screengraph-agent"), kong.Vars{"default_listen": DefaultListen}, kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		kctx, err := p.Parse(args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return &c, kctx.Command()
	}
	c, cmd := parse("policy", "switch", "R1", "--version", "3", "--output", "json")
	if cmd != "policy switch <run-id>" || c.Policy.Switch.Version != 3 || c.Policy.Switch.RunID != "R1" || c.Policy.Switch.Server != "http://10.0.0.7:7420" {
		t.Fatalf("policy switch: %q %+v", cmd, c.Policy.Switch)
	}
	c, _ = parse("cancel", "R2", "--server", "http://h:1")
	if c.Cancel.Server != "http://h:1" || c.Cancel.Output != "text" {
		t.Fatalf("cancel: %+v", c.Cancel)
	}
	c, _ = parse("runs", "events", "R3", "--follow")
	if !c.Runs.Events.Follow || c.Runs.Events.Server != "http://10.0.0.7:7420" {
		t.Fatalf("runs events: %+v", c.Runs.Events)
	}
	c, cmd = parse("runs", "resume", "R4", "--data-dir", "/tmp/d", "--appium", "http://a:4723")
	if cmd != "runs resume <run-id>" || c.Runs.Resume.DataDir != "/tmp/d" || c.Runs.Resume.RunID != "R4" {
		t.Fatalf("runs resume: %q %+v", cmd, c.Runs.Resume)
	}
	for _, args := range [][]string{{"pause", "R", "resume"}, {"policy", "switch", "R"}} {
		var c commands
		p, _ := kong.New(&c, kong.Vars{"default_listen": DefaultListen}, kong.Exit(func(int) {}))
		if _, err := p.Parse(args); err == nil {
			t.Errorf("%v parsed", args)
		}
	}
}

// deviceList is a DeviceLister with fixed devices: the daemon's side of
// `devices --server` (the adb part is the service's, tested there).
type deviceList []service.Device

func (l deviceList) Devices(context.Context) ([]service.Device, error) { return l, nil }

// `devices --server URL` asks that daemon, as the runs commands do (issue
// 16: it ignored --server and asked the local adb server).
func TestDevicesThroughServer(t *testing.T) {
	e := newAPIEnv(t, func(c *service.Config) {
		c.Devices = deviceList{{Serial: "emu-daemon-7", State: "device", Model: "sdk_gphone64", APILevel: 34, BootReady: true}}
	})
	out, err := cliRun(t, func(ctx context.Context) error {
		return (&devicesCmd{serverFlags: serverFlags{e.url}, Output: "text", Timeout: time.Second}).Run(ctx)
	})
	if err != nil || !strings.Contains(out, "emu-daemon-7") || !strings.Contains(out, "sdk_gphone64") || !strings.Contains(out, "ready") {
		t.Fatalf("devices --server: %v\n%s", err, out)
	}
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&devicesCmd{serverFlags: serverFlags{e.url}, Output: "json", Timeout: time.Second}).Run(ctx)
	})
	var body struct{ Devices []service.Device }
	if err != nil || json.Unmarshal([]byte(out), &body) != nil || len(body.Devices) != 1 || body.Devices[0].Serial != "emu-daemon-7" || body.Devices[0].APILevel != 34 {
		t.Fatalf("devices --server --output json: %v\n%s", err, out)
	}
	// --adb-server on the command line wins over --server from the
	// environment (SCREENGRAPH_SERVER): the adb server is asked, not the
	// daemon (here a closed port, so an adb error).
	out, err = cliRun(t, func(ctx context.Context) error {
		return (&devicesCmd{serverFlags: serverFlags{e.url}, ADBServer: "127.0.0.1:1", Output: "text", Timeout: time.Second}).Run(ctx)
	})
	if err == nil || strings.Contains(out, "emu-daemon-7") {
		t.Fatalf("devices --adb-server with --server set asked the daemon: %v\n%s", err, out)
	}
}

// `runs events --follow` prints a token_delta's text whole (issue 16: it was
// cut at 80 bytes).
func TestEventPrinterWholePayload(t *testing.T) {
	text := strings.Repeat("streamed tokens of a long answer ", 6) + "END"
	payload := `{"node":"Agent","text":"` + text + `"}`
	out, err := captureOutput(t, func() error {
		return render.EventPrinter("text")(agent.Event{Sequence: 4, Kind: "agent.token_delta", EventID: "01J0000000000000000000TOKE", Payload: []byte(payload)})
	})
	if err != nil || !strings.Contains(out, payload) {
		t.Fatalf("followed event row cuts the payload (%d bytes): %v\n%s", len(payload), err, out)
	}
}
