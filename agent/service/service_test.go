package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// gateNode is the graph's only node: each attempt tells started its run id
// and blocks until the run's gate is opened (success) or its ctx ends (the
// attempt is discarded).
type gateNode struct {
	mu      sync.Mutex
	gates   map[string]chan struct{}
	started chan string
	stopped chan string // attempts that ended on ctx
	starts  []string
}

func newGateNode() *gateNode {
	return &gateNode{gates: map[string]chan struct{}{}, started: make(chan string, 64), stopped: make(chan string, 64)}
}

func (g *gateNode) Name() string { return "Work" }

func (g *gateNode) gate(runID string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.gates[runID]
	if !ok {
		c = make(chan struct{})
		g.gates[runID] = c
	}
	return c
}

func (g *gateNode) open(runID string) { close(g.gate(runID)) }

func (g *gateNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	id := in.Run.RunID
	g.mu.Lock()
	g.starts = append(g.starts, id)
	g.mu.Unlock()
	g.started <- id
	out := &agenttest.Output{Echo: "work", Attempt: in.Attempt}
	select {
	case <-g.gate(id):
		return agent.NodeResult{Output: out, Next: agent.End}
	case <-ctx.Done():
		g.stopped <- id
		return agent.NodeResult{Output: out, Err: ctx.Err()}
	}
}

func (g *gateNode) startsOf(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, s := range g.starts {
		if s == id {
			n++
		}
	}
	return n
}

// waitStarted waits until the node starts for run id (failing on another run
// or the deadline).
func (g *gateNode) waitStarted(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-g.started:
		if got != id {
			t.Fatalf("node started for run %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("node never started for run %s", id)
	}
}

// noStart checks that no node starts within d.
func (g *gateNode) noStart(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-g.started:
		t.Fatalf("node started for run %s, want none", got)
	case <-time.After(d):
	}
}

type fixture struct {
	t     *testing.T
	store *sqlite.Store
	node  *gateNode
	graph *agent.Graph
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n := newGateNode()
	g, err := agent.NewGraph("test", "Work", n)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, store: st, node: n, graph: g}
}

// prepare accepts {"serial": S} (required).
func prepare(_ context.Context, runID string, body []byte) (agent.Run, error) {
	var req struct {
		Serial *string `json:"serial"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return agent.Run{}, agent.Wrap(agent.ErrInvalidRequest, err, "$: not a run request")
	}
	if req.Serial == nil || *req.Serial == "" {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.serial: required")
	}
	return agent.Run{RunID: runID, Serial: *req.Serial, Graph: "test", Input: body, TenantID: "t1", PolicyVersion: 1}, nil
}

// newService makes a started-ready service on the fixture's store, with a
// real engine over the gate node. mod adjusts the config.
func (f *fixture) newService(holder string, mod func(*service.Config)) *service.Service {
	f.t.Helper()
	cfg := service.Config{
		Store: f.store, Leases: f.store, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
		Holder: holder, HolderPrefix: "serve:", LeaseTTL: 2 * time.Second, Tick: 20 * time.Millisecond,
		RetryAfter: 50 * time.Millisecond, Logf: f.t.Logf,
	}
	if mod != nil {
		mod(&cfg)
	}
	svc, err := service.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	svc.SetRunner(service.RunnerFunc(func(ctx context.Context, runID string) (agent.RunStatus, error) {
		return eng.Run(ctx, runID, f.graph)
	}))
	return svc
}

func start(t *testing.T, svc *service.Service) {
	t.Helper()
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}

func submit(t *testing.T, svc *service.Service, serial string) string {
	t.Helper()
	r, err := svc.Submit(context.Background(), agent.Admin(), []byte(fmt.Sprintf(`{"serial":%q}`, serial)))
	if err != nil {
		t.Fatal(err)
	}
	// A started scheduler may lease the run between the insert and the
	// re-read, so RUNNING is as right an answer as PENDING here.
	if (r.Status != agent.RunPending && r.Status != agent.RunRunning) || r.Serial != serial {
		t.Fatalf("submitted run %+v", r)
	}
	return r.RunID
}

func (f *fixture) status(id string) agent.RunStatus {
	f.t.Helper()
	r, err := f.store.GetRun(context.Background(), agent.Admin(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r.Status
}

// releasedHistory is the lease history of serial once no lease of it is
// active any more (waiting up to 10 s).
func (f *fixture) releasedHistory(serial string) []agent.Lease {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := f.history(serial)
		if !slices.ContainsFunc(h, func(l agent.Lease) bool { return l.ReleasedAt == nil }) || time.Now().After(deadline) {
			return h
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStatus polls until run id has status want.
func (f *fixture) waitStatus(id string, want agent.RunStatus) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.status(id)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("run %s is %s, want %s", id, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) kinds(id string) []string {
	f.t.Helper()
	evs, err := f.store.Events(context.Background(), agent.Admin(), id, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			f.t.Errorf("run %s: event %d has sequence %d", id, i, e.Sequence)
		}
		out = append(out, e.Kind)
	}
	return out
}

func count(kinds []string, k string) int {
	n := 0
	for _, x := range kinds {
		if x == k {
			n++
		}
	}
	return n
}

func (f *fixture) history(serial string) []agent.Lease {
	f.t.Helper()
	h, err := f.store.LeaseHistory(context.Background(), agent.Admin(), serial)
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

// Three runs on one device run strictly one after another in submission
// order, waiting PENDING meanwhile; a run on another device overlaps them.
func TestQueuedRunsWaitInSubmissionOrder(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	a1, a2, a3 := submit(t, svc, "dev-a"), submit(t, svc, "dev-a"), submit(t, svc, "dev-a")
	start(t, svc)
	f.node.waitStarted(t, a1)
	b1 := submit(t, svc, "dev-b")
	f.node.waitStarted(t, b1) // dev-b runs while a1 holds dev-a: overlap
	if f.status(a1) != agent.RunRunning || f.status(b1) != agent.RunRunning {
		t.Errorf("a1 %s, b1 %s: want both RUNNING", f.status(a1), f.status(b1))
	}
	f.node.noStart(t, 100*time.Millisecond)
	for _, id := range []string{a2, a3} {
		if s := f.status(id); s != agent.RunPending {
			t.Errorf("queued run %s is %s, want PENDING", id, s)
		}
	}
	f.node.open(a1)
	f.waitStatus(a1, agent.RunFinished)
	f.node.waitStarted(t, a2) // not a3: submission order
	if s := f.status(a3); s != agent.RunPending {
		t.Errorf("a3 is %s while a2 runs, want PENDING", s)
	}
	f.node.noStart(t, 100*time.Millisecond)
	f.node.open(a2)
	f.node.waitStarted(t, a3)
	f.node.open(a3)
	f.node.open(b1)
	for _, id := range []string{a2, a3, b1} {
		f.waitStatus(id, agent.RunFinished)
	}

	// dev-a's leases: a1, a2, a3 in order, each released (finished) before
	// the next was acquired. The service releases a lease after the run's
	// final commit, so the last release may trail the status by a moment.
	h := f.releasedHistory("dev-a")
	var runs []string
	for i, l := range h {
		runs = append(runs, l.RunID)
		if l.ReleasedAt == nil || l.ReleaseReason != agent.LeaseFinished {
			t.Errorf("lease %d of %s: released %v (%s), want finished", l.FencingToken, l.RunID, l.ReleasedAt, l.ReleaseReason)
		}
		if i > 0 && h[i-1].ReleasedAt != nil && l.AcquiredAt.Before(*h[i-1].ReleasedAt) {
			t.Errorf("lease of %s acquired at %v before %s's was released at %v", l.RunID, l.AcquiredAt, h[i-1].RunID, *h[i-1].ReleasedAt)
		}
	}
	if !slices.Equal(runs, []string{a1, a2, a3}) {
		t.Errorf("dev-a leased to %v, want %v", runs, []string{a1, a2, a3})
	}
	for _, id := range []string{a1, a2, a3, b1} {
		if n := f.node.startsOf(id); n != 1 {
			t.Errorf("run %s: node ran %d times", id, n)
		}
	}
}

// A cancel of a queued run ends it CANCELED with exactly one
// agent.run.canceled, without the node running and without a device lease.
func TestCancelQueuedRun(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	start(t, svc)
	a1 := submit(t, svc, "dev-a")
	f.node.waitStarted(t, a1)
	a2 := submit(t, svc, "dev-a")
	if _, err := svc.Control(context.Background(), agent.Admin(), a2, agent.KindCancelRequested, 0); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(a2, agent.RunCanceled)
	kinds := f.kinds(a2)
	if count(kinds, agent.KindRunCanceled) != 1 || count(kinds, agent.KindNodeStarted) != 0 {
		t.Errorf("canceled queued run's events %v: want one agent.run.canceled, no node", kinds)
	}
	if f.node.startsOf(a2) != 0 {
		t.Errorf("node ran for the canceled queued run")
	}
	for _, l := range f.history("") {
		if l.RunID == a2 {
			t.Errorf("the canceled queued run took a lease: %+v", l)
		}
	}
	if s := f.status(a1); s != agent.RunRunning {
		t.Errorf("a1 is %s, want RUNNING (a2's cancel must not touch it)", s)
	}
	// A second cancel: the run has ended.
	if _, err := svc.Control(context.Background(), agent.Admin(), a2, agent.KindCancelRequested, 0); !errors.Is(err, service.ErrRunTerminal) {
		t.Errorf("cancel of a canceled run: %v, want ErrRunTerminal", err)
	}
	f.node.open(a1)
	f.waitStatus(a1, agent.RunFinished)
	if kinds := f.kinds(a2); count(kinds, agent.KindRunCanceled) != 1 {
		t.Errorf("events of a2 after a1 ended: %v", kinds)
	}
}

// Shutdown discards the node in flight, releases the leases (shutdown) and
// leaves the run RUNNING; a new service on the store resumes it, first taking
// back a lease a dead daemon (same HolderPrefix) held, but not a lease of a
// holder of another kind.
func TestShutdownThenStartTakesBackAndResumes(t *testing.T) {
	f := newFixture(t)
	svc1 := f.newService("serve:host:1:a", nil)
	if err := svc1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := submit(t, svc1, "dev-a")
	f.node.waitStarted(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-f.node.stopped:
		if id != r {
			t.Fatalf("stopped %s", id)
		}
	default:
		t.Fatal("Shutdown returned with the node still running")
	}
	if s := f.status(r); s != agent.RunRunning {
		t.Errorf("after Shutdown the run is %s, want RUNNING (resumable)", s)
	}
	h := f.history("dev-a")
	if len(h) != 1 || h[0].ReleasedAt == nil || h[0].ReleaseReason != agent.LeaseShutdown {
		t.Fatalf("lease history after Shutdown: %+v, want one lease released shutdown", h)
	}
	if act, _ := f.store.ActiveLeases(ctx, agent.Admin()); len(act) != 0 {
		t.Errorf("active leases after Shutdown: %+v", act)
	}
	if _, err := svc1.Submit(ctx, agent.Admin(), []byte(`{"serial":"dev-a"}`)); !errors.Is(err, service.ErrStopping) {
		t.Errorf("Submit after Shutdown: %v, want ErrStopping", err)
	}
	before := f.kinds(r)
	if count(before, agent.KindRunFinished) != 0 || count(before, agent.KindNodeFinished) != 0 {
		t.Errorf("events after Shutdown %v: the discarded node committed", before)
	}

	// A daemon that died holding the run's device, and a one-shot run on
	// another device (not a daemon: its lease stays).
	dead, err := f.store.AcquireLease(ctx, "dev-a", "serve:host:2:dead", r, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.store.AcquireLease(ctx, "dev-z", "run:4242", ulid.Make().String(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The dead daemon also held a device for a run nobody resumes (same-run
	// takeover cannot free it): only Start's take-back does.
	deadB, err := f.store.AcquireLease(ctx, "dev-b", "serve:host:2:dead", ulid.Make().String(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	svc2 := f.newService("serve:host:3:b", nil)
	start(t, svc2)
	hb := f.history("dev-b")
	if len(hb) != 1 || hb[0].FencingToken != deadB.FencingToken || hb[0].ReleasedAt == nil || hb[0].ReleaseReason != agent.LeaseHolderLost {
		t.Errorf("dead daemon's lease of dev-b after Start: %+v, want released holder_lost", hb)
	}
	f.node.waitStarted(t, r)
	var deadNow, otherNow *agent.Lease
	for _, l := range f.history("") {
		switch l.FencingToken {
		case dead.FencingToken:
			deadNow = &l
		case other.FencingToken:
			otherNow = &l
		}
	}
	if deadNow == nil || deadNow.ReleasedAt == nil || deadNow.ReleaseReason != agent.LeaseHolderLost {
		t.Errorf("dead daemon's lease: %+v, want released holder_lost", deadNow)
	}
	if otherNow == nil || otherNow.ReleasedAt != nil {
		t.Errorf("one-shot run's lease: %+v, want still active", otherNow)
	}
	act, err := f.store.ActiveLeases(ctx, agent.Admin())
	if err != nil {
		t.Fatal(err)
	}
	var mine bool
	for _, l := range act {
		if l.Serial == "dev-a" {
			mine = l.Holder == "serve:host:3:b" && l.RunID == r
		}
	}
	if !mine {
		t.Errorf("dev-a not leased to the new daemon for %s: %+v", r, act)
	}
	f.node.open(r)
	f.waitStatus(r, agent.RunFinished)
	kinds := f.kinds(r)
	if count(kinds, agent.KindRunFinished) != 1 || count(kinds, agent.KindNodeFinished) != 1 || count(kinds, agent.KindRunStarted) != 1 {
		t.Errorf("resumed run's events %v: want one run.started, node.finished, run.finished", kinds)
	}
}

// A lease lost behind the service's back (released, then taken by another
// holder) stops the run: the node's ctx ends, nothing terminal is committed,
// and the run is not rescheduled while the other holder has the device.
func TestLostLeaseStopsRun(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", func(c *service.Config) {
		c.LeaseTTL = 300 * time.Millisecond
		c.Heartbeat = 20 * time.Millisecond
	})
	start(t, svc)
	r := submit(t, svc, "dev-a")
	f.node.waitStarted(t, r)
	ctx := context.Background()
	act, err := f.store.ActiveLeases(ctx, agent.Admin())
	if err != nil || len(act) != 1 || act[0].RunID != r {
		t.Fatalf("active leases %+v %v", act, err)
	}
	if err := f.store.ReleaseLease(ctx, "dev-a", act[0].FencingToken, agent.LeaseExpired); err != nil {
		t.Fatal(err)
	}
	thief, err := f.store.AcquireLease(ctx, "dev-a", "other-host", ulid.Make().String(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-f.node.stopped:
		if id != r {
			t.Fatalf("stopped %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run kept running after its lease was lost")
	}
	waitFor(t, "the run to leave the service", func() bool { return svc.ActiveRuns() == 0 })
	// Rescheduling (RetryAfter 50 ms, Tick 20 ms) finds the device held.
	f.node.noStart(t, 300*time.Millisecond)
	if s := f.status(r); s != agent.RunRunning {
		t.Errorf("run is %s, want RUNNING (resumable)", s)
	}
	if kinds := f.kinds(r); count(kinds, agent.KindNodeFinished) != 0 || count(kinds, agent.KindRunFinished) != 0 {
		t.Errorf("events after the lost lease %v", kinds)
	}
	// The thief's lease is untouched by the service (it never released it).
	for _, l := range f.history("dev-a") {
		if l.FencingToken == thief.FencingToken && l.ReleasedAt != nil {
			t.Errorf("the other holder's lease was released: %+v", l)
		}
	}
	// Once the other holder is done, the run resumes and finishes.
	if err := f.store.ReleaseLease(ctx, "dev-a", thief.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	f.node.waitStarted(t, r)
	f.node.open(r)
	f.waitStatus(r, agent.RunFinished)
}

func TestControlErrors(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	start(t, svc)
	ctx := context.Background()
	for _, kind := range []string{agent.KindCancelRequested, agent.KindPauseRequested, agent.KindResumeRequested} {
		if _, err := svc.Control(ctx, agent.Admin(), ulid.Make().String(), kind, 0); !errors.Is(err, agent.ErrNotFound) {
			t.Errorf("%s of an unknown run: %v, want ErrNotFound", kind, err)
		}
	}
	if _, err := svc.Control(ctx, agent.Admin(), ulid.Make().String(), agent.KindPolicySwitchRequested, 1); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("policy switch of an unknown run: %v, want ErrNotFound", err)
	}
	r := submit(t, svc, "dev-a")
	f.node.waitStarted(t, r)
	var ae *agent.Error
	if _, err := svc.Control(ctx, agent.Admin(), r, "agent.run.explode", 0); !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
		t.Errorf("unknown kind: %v, want invalid_request_error", err)
	}
	if _, err := svc.Control(ctx, agent.Admin(), r, agent.KindPolicySwitchRequested, 0); !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
		t.Errorf("policy switch without a version: %v, want invalid_request_error", err)
	}
	f.node.open(r)
	f.waitStatus(r, agent.RunFinished)
	for _, kind := range []string{agent.KindCancelRequested, agent.KindPauseRequested, agent.KindResumeRequested} {
		if _, err := svc.Control(ctx, agent.Admin(), r, kind, 0); !errors.Is(err, service.ErrRunTerminal) {
			t.Errorf("%s of a finished run: %v, want ErrRunTerminal", kind, err)
		}
	}
	if _, err := svc.Control(ctx, agent.Admin(), r, agent.KindPolicySwitchRequested, 1); !errors.Is(err, service.ErrRunTerminal) {
		t.Errorf("policy switch of a finished run: %v, want ErrRunTerminal", err)
	}
	if ctl, err := f.store.PendingControl(ctx, r); err != nil || len(ctl) != 0 {
		t.Errorf("refused control requests were recorded: %+v %v", ctl, err)
	}
}

func TestSubmitInvalidStoresNothing(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	ctx := context.Background()
	for _, c := range []struct{ body, path string }{
		{`{"serial": `, "$"},
		{`not json`, "$"},
		{`{}`, "$.serial"},
		{`{"serial": ""}`, "$.serial"},
	} {
		_, err := svc.Submit(ctx, agent.Admin(), []byte(c.body))
		var ae *agent.Error
		if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.HasPrefix(ae.Msg, c.path+":") {
			t.Errorf("Submit(%s): %v, want invalid_request_error naming %s", c.body, err, c.path)
		}
	}
	runs, err := f.store.ListRuns(ctx, agent.Admin(), agent.RunFilter{})
	if err != nil || len(runs) != 0 {
		t.Errorf("refused submissions stored %d runs (%v)", len(runs), err)
	}
}

// TestHeartbeatRenewsWhileRunRuns: the heartbeat renews the lease while the
// run runs and the run's end releases it as finished. Under the race
// detector (make test) it guards the lease the heartbeat replaces (under the
// service's lock) against reads by the run's goroutine without it: the
// runner here shares no lock with the heartbeat, so nothing orders such a
// read before the heartbeat's write.
func TestHeartbeatRenewsWhileRunRuns(t *testing.T) {
	f := newFixture(t)
	gate := make(chan struct{})
	svc := f.newService("serve:test:1", func(c *service.Config) {
		c.LeaseTTL = 2 * time.Second
		c.Heartbeat = 5 * time.Millisecond
	})
	// The runner synchronizes with nothing until the gate opens (telling
	// the test it started, or even asking ctx.Done(), which the heartbeat
	// asks too, would order its goroutine before the heartbeat's write): the
	// test waits on the store.
	svc.SetRunner(service.RunnerFunc(func(_ context.Context, runID string) (agent.RunStatus, error) {
		<-gate
		err := f.store.SetStatus(context.Background(), runID, []agent.RunStatus{agent.RunPending}, agent.RunFinished)
		return agent.RunFinished, err
	}))
	start(t, svc)
	var opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the service's shutdown (cleanups run last first)
	submit(t, svc, "dev-a")
	ctx := context.Background()
	waitFor(t, "two renewals", func() bool {
		act, err := f.store.ActiveLeases(ctx, agent.Admin())
		return err == nil && len(act) == 1 && act[0].RenewedAt.Sub(act[0].AcquiredAt) >= 10*time.Millisecond
	})
	open()
	waitFor(t, "the lease's release", func() bool {
		h := f.history("dev-a")
		return len(h) == 1 && h[0].ReleasedAt != nil && h[0].ReleaseReason == agent.LeaseFinished
	})
}

// TestStopTakingEndsFollowers: the first step of a daemon's stop ends every
// event stream at once (an open follower held the HTTP shutdown for its 15 s
// budget before) and refuses new runs; the run goes on until Shutdown, which
// releases its lease for the restart.
func TestStopTakingEndsFollowers(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:test:1", nil)
	start(t, svc)
	r := submit(t, svc, "dev-a")
	f.node.waitStarted(t, r)
	followed := make(chan error, 1)
	go func() {
		followed <- svc.Follow(context.Background(), agent.Admin(), r, 0, func(agent.Event) error { return nil })
	}()
	select {
	case err := <-followed:
		t.Fatalf("Follow returned before the stop: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	svc.StopTaking()
	select {
	case err := <-followed:
		if !errors.Is(err, service.ErrStopping) {
			t.Fatalf("Follow = %v, want ErrStopping", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow still open after StopTaking")
	}
	if _, err := svc.Submit(context.Background(), agent.Admin(), []byte(`{"serial":"dev-b"}`)); !errors.Is(err, service.ErrStopping) {
		t.Fatalf("Submit after StopTaking = %v, want ErrStopping", err)
	}
	if s := f.status(r); s != agent.RunRunning {
		t.Fatalf("run is %s after StopTaking, want RUNNING", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if h := f.history("dev-a"); len(h) != 1 || h[0].ReleaseReason != agent.LeaseShutdown {
		t.Fatalf("lease after shutdown %+v, want released (shutdown)", h)
	}
}
