package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Sleeper is the optional part of a Clock the engine waits with (pause
// polling, retry backoff, the grace after a node's deadline). A Clock without
// it waits on the Go runtime timers, which testing/synctest fakes.
type Sleeper interface {
	After(d time.Duration) <-chan time.Time
}

// After is time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Engine is the orchestrator: the single writer of a run's events. It runs
// a Graph's nodes one step at a time and after each attempt commits, in one
// Store.CommitStep, the attempt's events (agent.node.started, its
// agent.node.token_delta lines, agent.node.finished; sequences contiguous
// from Store.LastSequence+1, checksummed) and the snapshot (stepOrdinal,
// a fresh ULID resumeToken, RunState). Between steps, and before the
// terminal transition, it honors control requests (Store.PendingControl) and
// runs.status: cancel -> agent.run.canceled + CAS to CANCELED in one commit;
// pause -> PAUSED until resume; policy switch -> later steps use the new
// version. Never half-way through a node. A request is taken by the commit
// it leads to (Step.Controls: the status change, or the next step's commit
// for a policy switch), never before, and that commit's event names it
// (AppliedControl): a daemon stop or crash in between leaves it pending, so
// the resumed run honors it again. A terminal commit also requires that no
// other request is pending (Step.NoOtherControl), so none is stranded. The
// step that ends the run (its node finished the graph, or failed and is not
// retried) commits the terminal transition with it when the run is RUNNING
// and nothing is pending; else it commits alone and the boundary after it
// honors what is pending first.
//
// Retries are state-based (node-catalog.md): a failed attempt classified
// retryable at the adapter boundary (Error.Retryable) whose errorId the
// policy retries is recorded as its own step with the attempt count and
// the backoff deadline in RunState, and the next step runs the node again.
//
// Stopping the daemon (ctx canceled) is not canceling the run: the attempt
// in flight is discarded (nothing committed), the status stays as it is, and
// a later Run continues from the latest snapshot. The node of a discarded
// attempt runs again then, so nodes must be safe to repeat.
type Engine struct {
	Store    Store
	Policies PolicySource
	// Clock is the engine's time (event ts, backoff deadlines); SystemClock when nil.
	Clock Clock
	// IDs makes eventIds and resumeTokens; NewULIDs(Clock, nil) when nil.
	IDs IDGenerator
	// PollInterval is how often a paused run checks for resume/cancel
	// (default 500 ms: a human-driven resume feels immediate, a store poll
	// twice a second per paused run is cheap).
	PollInterval time.Duration
	// AbandonGrace is how long after its deadline a node may take to return
	// before the engine records a timeout without it (default 5 s).
	AbandonGrace time.Duration
	// Evidence, when set, captures artifacts after the attempt that ends
	// the graph (success with Next == End) or the run (a failure not
	// retried); their rows commit with the step and their refs go into the
	// snapshot and the node's agent.node.finished. nil captures nothing.
	Evidence Evidence
	// Handover, when set, prepares the device of a run that holds a lease
	// (its ctx carries a Fence) once per Run, before the first step: a
	// reset it did is committed as agent.device.reset, and its window bounds
	// the run's evidence (EvidenceRequest.Window). nil: no reset, and the
	// evidence window starts at Run.CreatedAt.
	Handover Handover
	// Recorder, when set, is told before each node attempt, when the run
	// pauses and when Run returns, so it records the device's screen for
	// the video evidence (issue 27); nil records nothing.
	Recorder Recorder
	// Logf reports what the engine ignored (an unknown policy version in a
	// switch request); nil drops it.
	Logf func(format string, args ...any)
	// LiveProgress is how long a node may run before its agent.node.started
	// and the progress lines it reported so far (NodeInput.Progress) are
	// committed ahead of its end, in a commit of their own; after that its
	// new lines commit every LiveProgressInterval while it runs. 0 means
	// 500 ms; negative commits everything at the node's end (one
	// transaction a step, as a node shorter than the delay always is).
	LiveProgress time.Duration
}

// LiveProgressInterval is how often a running node's new progress lines
// are committed once its start was (Engine.LiveProgress).
const LiveProgressInterval = time.Second

// GraphRunner is an Engine bound to one graph: Run(ctx, runID) is
// Engine.Run(ctx, runID, Graph), the daemon's service.Runner.
type GraphRunner struct {
	Engine *Engine
	Graph  *Graph
}

// Run drives runID through r.Graph; see Engine.Run for its errors.
func (r GraphRunner) Run(ctx context.Context, runID string) (RunStatus, error) {
	return r.Engine.Run(ctx, runID, r.Graph)
}

// Fail is Engine.Fail(ctx, runID, Graph, id, summary).
func (r GraphRunner) Fail(ctx context.Context, runID string, id ErrorID, summary string) (RunStatus, error) {
	return r.Engine.Fail(ctx, runID, r.Graph, id, summary)
}

// Run executes or resumes run runID with graph g until the run reaches a
// terminal status, and returns that status. A run already terminal returns
// its status at once. Errors: ctx done (daemon stop; the run stays
// resumable), a store failure, an error wrapping ErrSequenceTaken when another
// engine writes the same run, ErrNotFound for an unknown run, and a graph
// whose name differs from the run's Graph.
func (e *Engine) Run(ctx context.Context, runID string, g *Graph) (RunStatus, error) {
	r := &runner{e: e, g: g, clock: e.Clock, ids: e.IDs}
	if r.clock == nil {
		r.clock = SystemClock{}
	}
	if r.ids == nil {
		r.ids = NewULIDs(r.clock, nil)
	}
	if err := r.load(ctx, runID); err != nil {
		if errors.Is(err, errPolicyUnknown) {
			// The store that holds every accepted version (the fleet's, when
			// the source reads through to it) does not have it: no daemon can
			// run it, and retrying would only churn the device's lease.
			return r.failUnstarted(ctx, ErrInvalidRequest, fmt.Sprintf("policy version %d is not stored (no daemon of the fleet loaded it): the run cannot run", r.st.PolicyVersion))
		}
		return r.run.Status, err
	}
	if err := r.closeDiscarded(ctx); err != nil {
		return r.run.Status, err
	}
	if e.Recorder != nil && !r.run.Status.Terminal() {
		// Whatever ends this pass (the run's end, a cancel, a daemon stop),
		// no recording outlives it on the device.
		defer e.Recorder.Drop(context.WithoutCancel(ctx), runID)
	}
	return r.loop(ctx)
}

// closeDiscarded ends the event group of an attempt a daemon stop or crash
// discarded after its agent.node.started was committed live
// (Engine.LiveProgress): when the run's last event is that attempt's
// started or token_delta, it commits an agent.node.finished for it,
// FAILURE interrupted, retryable, with no snapshot (the state is the latest
// snapshot's, so the node runs again: the next attempt starts a new group
// with the same step and attempt numbers and a new resumeToken). Every
// started thus has its finished, as followers and checkers expect.
func (r *runner) closeDiscarded(ctx context.Context) error {
	if r.run.Status.Terminal() || r.seq == 0 {
		return nil
	}
	last, err := r.e.Store.Events(ctx, Admin(), r.run.RunID, r.seq-1)
	if err != nil {
		return fmt.Errorf("run %s: last event: %w", r.run.RunID, err)
	}
	if len(last) != 1 || (last[0].Kind != KindNodeStarted && last[0].Kind != KindNodeTokenDelta) {
		return nil
	}
	var p struct {
		NodeName    string `json:"nodeName"`
		StepOrdinal int    `json:"stepOrdinal"`
		Attempt     int    `json:"attempt"`
	}
	if err := json.Unmarshal(last[0].Payload, &p); err != nil {
		return fmt.Errorf("run %s: event %d: %w", r.run.RunID, last[0].Sequence, err)
	}
	id, retryable := ErrInterrupted, true
	summary := fmt.Sprintf("%s attempt %d was discarded: the daemon stopped before it ended; it runs again", p.NodeName, p.Attempt)
	out, err := stampCommon(map[string]json.RawMessage{}, Common{
		NodeName: p.NodeName, StepOrdinal: p.StepOrdinal, IterationOrdinalNumber: r.st.IterationOrdinalNumber,
		PolicyVersion: r.st.PolicyVersion, NodeExecutionOutcomeStatus: OutcomeFailure,
		ErrorID: &id, Retryable: &retryable, HumanReadableFailureSummary: &summary,
	})
	if err != nil {
		return err
	}
	fin, err := r.event(r.seq+1, KindNodeFinished, NodeFinishedPayload{
		PayloadBase: r.base(), NodeName: p.NodeName, StepOrdinal: p.StepOrdinal, Attempt: p.Attempt,
		NodeExecutionOutcomeStatus: OutcomeFailure, ErrorID: &id, Retryable: &retryable,
		HumanReadableFailureSummary: &summary, Output: out,
	})
	if err != nil {
		return err
	}
	if ok, err := r.commit(ctx, []Event{fin}, nil, nil, "", nil); err != nil || !ok {
		return fmt.Errorf("run %s: closing the discarded attempt: %w", r.run.RunID, cmp.Or(err, ErrStatusConflict))
	}
	return nil
}

// errPolicyUnknown marks load's failure to resolve the run's policy version
// with an error wrapping ErrNotFound.
var errPolicyUnknown = errors.New("policy version unknown")

// Fail ends run runID FAILED before its next node runs, with errorId id and
// summary (the scheduler's verdict on a run no daemon can serve, e.g.
// device_not_found for a device no daemon of the fleet has seen): one commit
// of agent.run.started (when the run never started), a state snapshot whose
// Failure names the node that would have run next, and agent.run.failed,
// by compare-and-set from PENDING, RUNNING or PAUSED. A run already terminal
// returns its status; a CAS conflict (a cancel came first) returns the
// status it found and no error. Errors: a store failure, ErrNotFound.
func (e *Engine) Fail(ctx context.Context, runID string, g *Graph, id ErrorID, summary string) (RunStatus, error) {
	r := &runner{e: e, g: g, clock: e.Clock, ids: e.IDs}
	if r.clock == nil {
		r.clock = SystemClock{}
	}
	if r.ids == nil {
		r.ids = NewULIDs(r.clock, nil)
	}
	if err := r.load(ctx, runID); err != nil && !errors.Is(err, errPolicyUnknown) {
		return r.run.Status, err
	}
	if r.run.Status.Terminal() {
		return r.run.Status, nil
	}
	return r.failUnstarted(ctx, id, summary)
}

// failUnstarted commits the failure of a run whose next node will not run
// (Fail). r is loaded, r.pol may be nil.
func (r *runner) failUnstarted(ctx context.Context, id ErrorID, summary string) (RunStatus, error) {
	if r.run.Status.Terminal() {
		return r.run.Status, nil
	}
	node := r.st.Next
	if node == "" || node == End {
		node = r.g.Start
	}
	var events []Event
	if r.seq == 0 {
		ev, err := r.startedEvent(1)
		if err != nil {
			return r.run.Status, err
		}
		events = append(events, ev)
	}
	st := r.st
	stepOrd := r.step + 1
	st.Next, st.NotBefore = "", ""
	st.Failure = &NodeFailure{Node: node, StepOrdinal: stepOrd, Pass: st.Pass, ErrorID: id, Summary: summary}
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return r.run.Status, fmt.Errorf("run %s: state: %w", r.run.RunID, err)
	}
	p := RunEndedPayload{PayloadBase: r.base(), Status: RunFailed, CompletedNodes: r.completedNames(), PolicyVersion: r.st.PolicyVersion,
		FailedNode: node, ErrorID: &id, Summary: summary}
	ev, err := r.event(r.seq+int64(len(events))+1, KindRunFailed, p)
	if err != nil {
		return r.run.Status, err
	}
	events = append(events, ev)
	snap := &Snapshot{RunID: r.run.RunID, StepOrdinal: stepOrd, NodeName: node, ResumeToken: r.ids.NewID(), State: stateJSON, CreatedAt: r.clock.Now()}
	if _, err := r.commit(ctx, events, snap, []RunStatus{RunPending, RunRunning, RunPaused}, RunFailed, nil); err != nil {
		return r.run.Status, err
	}
	return r.run.Status, nil
}

type runner struct {
	e     *Engine
	g     *Graph
	clock Clock
	ids   IDGenerator
	run   Run
	st    RunState
	pol   RetryPolicy
	step  int   // last committed step ordinal, -1 before the first
	seq   int64 // last committed event sequence
	// held are the control requests read and applied in memory but not yet
	// taken by a commit; the next successful commit takes them.
	held []Control
	// handed: Engine.Handover was asked (once per Run); window is its
	// evidence window (nil without a Handover or a lease).
	handed bool
	window *EvidenceWindow
}

func (r *runner) logf(format string, args ...any) {
	if r.e.Logf != nil {
		r.e.Logf("%s", RedactString(fmt.Sprintf(format, args...)))
	}
}

func (r *runner) load(ctx context.Context, runID string) error {
	run, err := r.e.Store.GetRun(ctx, Admin(), runID)
	if err != nil {
		return fmt.Errorf("run %s: %w", runID, err)
	}
	r.run = run
	if run.Graph != "" && run.Graph != r.g.Name {
		return fmt.Errorf("run %s is of graph %q, engine was given %q", runID, run.Graph, r.g.Name)
	}
	if run.Status.Terminal() {
		return nil
	}
	if r.seq, err = r.e.Store.LastSequence(ctx, runID); err != nil {
		return fmt.Errorf("run %s: last sequence: %w", runID, err)
	}
	snap, err := r.e.Store.LatestSnapshot(ctx, Admin(), runID)
	switch {
	case errors.Is(err, ErrNotFound):
		r.step = -1
		r.st = RunState{
			Graph: r.g.Name, Next: r.g.Start, PolicyVersion: run.PolicyVersion, Seed: RunSeed(run),
			Attempts: map[string]int{}, Outputs: map[string]json.RawMessage{},
		}
	case err != nil:
		return fmt.Errorf("run %s: latest snapshot: %w", runID, err)
	default:
		if r.st, err = DecodeRunState(snap); err != nil {
			return err
		}
		r.step = snap.StepOrdinal
	}
	r.st.Pass++
	if r.pol, err = r.e.Policies.Policy(ctx, r.st.PolicyVersion); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("run %s: policy version %d: %w", runID, r.st.PolicyVersion, errors.Join(errPolicyUnknown, err))
		}
		return fmt.Errorf("run %s: policy version %d: %w", runID, r.st.PolicyVersion, err)
	}
	r.st.PolicyVersion = r.pol.Version()
	return nil
}

func (r *runner) loop(ctx context.Context) (RunStatus, error) {
	for {
		if err := ctx.Err(); err != nil {
			return r.run.Status, err
		}
		switch {
		case r.run.Status.Terminal():
			return r.run.Status, nil
		case r.run.Status == RunPending:
			if err := r.start(ctx); err != nil {
				return r.run.Status, err
			}
			continue
		}
		if err := r.waitUntil(ctx, r.st.NotBefore); err != nil {
			return r.run.Status, err
		}
		done, err := r.boundary(ctx)
		if err != nil || done {
			return r.run.Status, err
		}
		switch kind, to, end := r.ending(); {
		case end:
			err = r.finish(ctx, kind, to)
		default:
			if !r.handed {
				// Before the first step this pass drives on the device, just
				// after its boundary (a run canceled first touches no device).
				if err = r.handover(ctx); err != nil {
					break
				}
			}
			err = r.runStep(ctx)
		}
		if err != nil {
			return r.run.Status, err
		}
	}
}

// refresh re-reads the run row (status).
func (r *runner) refresh(ctx context.Context) error {
	run, err := r.e.Store.GetRun(ctx, Admin(), r.run.RunID)
	if err != nil {
		return fmt.Errorf("run %s: %w", r.run.RunID, err)
	}
	r.run = run
	return nil
}

// commit writes events (sequences from r.seq+1, in order) and an optional
// snapshot with an optional CAS, taking the held control requests ctrl (its
// events name them: applied(ctrl)). A terminal transition also requires that
// no other request is pending. It reports false, nil on a CAS conflict or
// such a pending request (nothing written; r.run refreshed). arts are the
// step's evidence rows.
func (r *runner) commit(ctx context.Context, events []Event, snap *Snapshot, from []RunStatus, to RunStatus, ctrl []Control, arts ...Artifact) (bool, error) {
	for i := range events {
		if events[i].Sequence != r.seq+int64(i)+1 {
			return false, fmt.Errorf("internal: event %d has sequence %d, want %d", i, events[i].Sequence, r.seq+int64(i)+1)
		}
	}
	st := Step{RunID: r.run.RunID, Events: events, Snapshot: snap, StatusFrom: from, StatusTo: to, Fence: FenceFrom(ctx),
		NoOtherControl: to.Terminal(), Artifacts: arts}
	for _, c := range ctrl {
		st.Controls = append(st.Controls, c.ID)
		if c.Kind == KindPolicySwitchRequested {
			st.PolicyVersion = r.st.PolicyVersion // the row shows the version in force
		}
	}
	err := r.e.Store.CommitStep(ctx, st)
	if errors.Is(err, ErrStatusConflict) || errors.Is(err, ErrControlPending) {
		return false, r.refresh(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("run %s: commit: %w", r.run.RunID, err)
	}
	r.seq += int64(len(events))
	if to != "" {
		r.run.Status = to
	}
	r.held = slices.DeleteFunc(r.held, func(h Control) bool { return slices.ContainsFunc(ctrl, func(c Control) bool { return c.ID == h.ID }) })
	return true, nil
}

// takeable is what a commit takes of the held requests: all of them when it
// writes a snapshot or ends the run; else (a pause or resume, which writes no
// snapshot) all but the policy switches, which stay pending until a commit
// persists the new version in the run's state: taken by an event alone, a
// switch would be lost to a crash before the next snapshot.
func (r *runner) takeable(all bool) []Control {
	if all {
		return slices.Clone(r.held)
	}
	var out []Control
	for _, c := range r.held {
		if c.Kind != KindPolicySwitchRequested {
			out = append(out, c)
		}
	}
	return out
}

// applied lists requests for the event of the commit that takes them.
func applied(ctrl []Control) []AppliedControl {
	var out []AppliedControl
	for _, c := range ctrl {
		out = append(out, AppliedControl{RequestID: c.ID, Kind: c.Kind, PolicyVersion: c.PolicyVersion})
	}
	return out
}

// readControl returns the run's pending requests not held yet and holds them.
func (r *runner) readControl(ctx context.Context) ([]Control, error) {
	pending, err := r.e.Store.PendingControl(ctx, r.run.RunID)
	if err != nil {
		return nil, fmt.Errorf("run %s: pending control: %w", r.run.RunID, err)
	}
	var fresh []Control
	for _, c := range pending {
		if !slices.ContainsFunc(r.held, func(h Control) bool { return h.ID == c.ID }) {
			fresh = append(fresh, c)
		}
	}
	r.held = append(r.held, fresh...)
	return fresh, nil
}

// captureEvidence asks Engine.Evidence for the artifacts of an attempt that
// ends the graph or the run (nothing otherwise), and fills in what the
// engine owns of each row: its id, run, tenant, node, step and time.
func (r *runner) captureEvidence(ctx context.Context, node string, step, attempt int, fe *Error, next string, out json.RawMessage, now time.Time) ([]Artifact, []TokenDelta) {
	if r.e.Evidence == nil {
		return nil, nil
	}
	final := (fe == nil && next == End) || (fe != nil && r.st.Failure != nil && r.st.Failure.StepOrdinal == step)
	if !final {
		return nil, nil
	}
	req := EvidenceRequest{Run: r.run, Node: node, StepOrdinal: step, Attempt: attempt, Failed: fe != nil,
		Policy: r.pol, Outputs: cloneRaw(r.st.Outputs), Window: r.window}
	if fe != nil {
		req.ErrorID = fe.ID
	}
	req.Outputs[node] = out
	arts, lines := r.e.Evidence.Capture(ctx, req)
	for i := range arts {
		a := &arts[i]
		if a.ArtifactID == "" {
			a.ArtifactID = r.ids.NewID()
		}
		a.RunID, a.TenantID, a.Node, a.StepOrdinal = r.run.RunID, r.run.TenantID, node, step
		if a.CreatedAt.IsZero() {
			a.CreatedAt = now
		}
	}
	return arts, lines
}

// handover asks Engine.Handover to prepare the leased device and commits
// the reset it reports as agent.device.reset (no snapshot, no status change).
func (r *runner) handover(ctx context.Context) error {
	r.handed = true
	f := FenceFrom(ctx)
	if r.e.Handover == nil || f == nil {
		return nil
	}
	res := r.e.Handover.Handover(ctx, HandoverRequest{Run: r.run, Fence: *f})
	if err := ctx.Err(); err != nil {
		return err // daemon stop: the next pass hands over again
	}
	w := res.Window
	r.window = &w
	if res.Reset == nil {
		return nil
	}
	p := *res.Reset
	p.PayloadBase = r.base()
	ev, err := r.event(r.seq+1, KindDeviceReset, p)
	if err != nil {
		return err
	}
	_, err = r.commit(ctx, []Event{ev}, nil, nil, "", nil)
	return err
}

// setStatus is a CAS without events; false, nil on a conflict (r.run refreshed).
func (r *runner) setStatus(ctx context.Context, from []RunStatus, to RunStatus) (bool, error) {
	err := r.e.Store.SetStatus(ctx, r.run.RunID, from, to)
	if errors.Is(err, ErrStatusConflict) {
		return false, r.refresh(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("run %s: status %s: %w", r.run.RunID, to, err)
	}
	r.run.Status = to
	return true, nil
}

func (r *runner) base() PayloadBase {
	return PayloadBase{TenantID: r.run.TenantID, ProjectID: r.run.ProjectID, RunID: r.run.RunID}
}

func (r *runner) event(seq int64, kind string, payload any) (Event, error) {
	return NewEvent(r.run, seq, kind, payload, r.clock, r.ids)
}

func (r *runner) startedEvent(seq int64) (Event, error) {
	return r.event(seq, KindRunStarted, RunStartedPayload{
		PayloadBase: r.base(), Graph: r.g.Name, StartNode: r.g.Start, Serial: r.run.Serial,
		PolicyVersion: r.st.PolicyVersion, RandomSeed: r.st.Seed,
	})
}

// start emits agent.run.started with PENDING -> RUNNING.
func (r *runner) start(ctx context.Context) error {
	ev, err := r.startedEvent(r.seq + 1)
	if err != nil {
		return err
	}
	_, err = r.commit(ctx, []Event{ev}, nil, []RunStatus{RunPending}, RunRunning, nil)
	return err
}

func (r *runner) completedNames() []string {
	names := make([]string, 0, len(r.st.Completed))
	for _, c := range r.st.Completed {
		names = append(names, c.Node)
	}
	return names
}

// cancel commits agent.run.canceled with the CAS to CANCELED (preceded by
// agent.run.started when the run never started), taking every pending
// request. It reports done.
func (r *runner) cancel(ctx context.Context) (bool, error) {
	for i := range cancelAttempts {
		if r.run.Status.Terminal() {
			return true, nil
		}
		if i > 0 {
			// A request came in meanwhile: the cancel takes it too.
			fresh, err := r.readControl(ctx)
			if err != nil {
				return false, err
			}
			var cancel, paused bool
			r.apply(ctx, fresh, &cancel, &paused)
		}
		var events []Event
		ctrl := r.takeable(true)
		if r.seq == 0 {
			ev, err := r.startedEvent(1)
			if err != nil {
				return false, err
			}
			events = append(events, ev)
		}
		ev, err := r.event(r.seq+int64(len(events))+1, KindRunCanceled, RunEndedPayload{
			PayloadBase: r.base(), Status: RunCanceled, CompletedNodes: r.completedNames(),
			CanceledBeforeNode: r.nextForReport(), PolicyVersion: r.st.PolicyVersion, AppliedControl: applied(ctrl),
		})
		if err != nil {
			return false, err
		}
		events = append(events, ev)
		ok, err := r.commit(ctx, events, nil, []RunStatus{RunPending, RunRunning, RunPaused, RunCancelRequested}, RunCanceled, ctrl)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, fmt.Errorf("run %s: cancel: status or control requests keep changing (now %s)", r.run.RunID, r.run.Status)
}

// cancelAttempts bounds cancel's retries after a conflict (a status change
// or a request recorded meanwhile): each retry reads what changed.
const cancelAttempts = 8

func (r *runner) nextForReport() string {
	if r.st.Next == End {
		return ""
	}
	return r.st.Next
}

// ending reports whether the run's state ends it: failed (a failure not
// retried) or finished (the next node is End), with the event and status.
func (r *runner) ending() (kind string, to RunStatus, end bool) {
	switch {
	case r.st.Failure != nil:
		return KindRunFailed, RunFailed, true
	case r.st.Next == End:
		return KindRunFinished, RunFinished, true
	}
	return "", "", false
}

// endEvent is agent.run.finished / agent.run.failed (kind, status to) at
// sequence seq, naming the requests ctrl its commit takes.
func (r *runner) endEvent(seq int64, kind string, to RunStatus, ctrl []Control) (Event, error) {
	p := RunEndedPayload{PayloadBase: r.base(), Status: to, CompletedNodes: r.completedNames(), PolicyVersion: r.st.PolicyVersion, AppliedControl: applied(ctrl)}
	if f := r.st.Failure; f != nil {
		id := f.ErrorID
		p.FailedNode, p.ErrorID, p.Summary = f.Node, &id, f.Summary
	}
	return r.event(seq, kind, p)
}

// finish commits agent.run.finished / agent.run.failed with RUNNING -> to.
// On a CAS conflict (a cancel or pause request moved the status) it returns
// nil and the loop's next boundary decides.
func (r *runner) finish(ctx context.Context, kind string, to RunStatus) error {
	ctrl := r.takeable(true)
	ev, err := r.endEvent(r.seq+1, kind, to, ctrl)
	if err != nil {
		return err
	}
	_, err = r.commit(ctx, []Event{ev}, nil, []RunStatus{RunRunning}, to, ctrl)
	return err
}

// commitEnding commits a step that ends the run (ending) together with
// the run's end, in one transaction: the step's events, its snapshot, the
// end event after them and RUNNING -> to. The store refuses it, writing
// nothing, when a control request is pending or the status moved (a
// pause, a cancel): then it reports false and the step commits alone, so
// the boundary after it honours them, as without the merge. One commit,
// and one boundary's reads, fewer per run.
func (r *runner) commitEnding(ctx context.Context, a stepAttempt, events []Event, snap *Snapshot, arts []Artifact) (bool, error) {
	kind, to, end := r.ending()
	if !end || r.run.Status != RunRunning {
		return false, nil
	}
	// The step takes every held request (a.ctrl); none is left for the
	// end event to name, as finish after the step's commit would find.
	fin, err := r.endEvent(r.seq+int64(len(events))+1, kind, to, nil)
	if err != nil {
		return false, err
	}
	all := append(events[:len(events):len(events)], fin)
	return r.commit(ctx, all, snap, []RunStatus{RunRunning}, to, a.ctrl, arts...)
}

// boundary honors control between steps. It reports done when the run
// became (or already was) terminal.
func (r *runner) boundary(ctx context.Context) (bool, error) {
	ctrl, done, err := r.readState(ctx)
	if done || err != nil {
		return done, err
	}
	paused := r.run.Status == RunPaused
	cancel := r.run.Status == RunCancelRequested
	r.apply(ctx, ctrl, &cancel, &paused)
	for {
		switch {
		case cancel:
			// Stopped before the run shows CANCELED; Run's return drops it.
			r.pauseRecording(ctx)
			return r.cancel(ctx)
		case !paused && r.run.Status != RunPaused:
			return false, nil
		case !paused:
			done, again, err := r.settle(ctx, KindRunResumed, RunPaused, RunRunning, &cancel, &paused)
			if !again {
				return done, err
			}
			continue
		case r.run.Status != RunPaused:
			// Stopped before the run shows PAUSED: a paused run records nothing.
			r.pauseRecording(ctx)
			done, again, err := r.settle(ctx, KindRunPaused, RunRunning, RunPaused, &cancel, &paused)
			if again {
				continue
			}
			if done || err != nil {
				return done, err
			}
		}
		if done, err := r.waitPaused(ctx, &cancel, &paused); done || err != nil {
			return done, err
		}
	}
}

// readState reads the run's new control requests (readControl) and its
// status; done when the run is terminal.
func (r *runner) readState(ctx context.Context) (ctrl []Control, done bool, err error) {
	if ctrl, err = r.readControl(ctx); err != nil {
		return nil, false, err
	}
	if err := r.refresh(ctx); err != nil {
		return nil, false, err
	}
	return ctrl, r.run.Status.Terminal(), nil
}

// pauseRecording stops the run's recording (Engine.Recorder), if any.
func (r *runner) pauseRecording(ctx context.Context) {
	if r.e.Recorder != nil {
		r.e.Recorder.Pause(ctx, r.run.RunID)
	}
}

// settle commits a pause or resume (pauseTransition); again when its CAS
// lost to a change that leaves the run open, for boundary to decide anew.
func (r *runner) settle(ctx context.Context, kind string, from, to RunStatus, cancel, paused *bool) (done, again bool, err error) {
	ok, err := r.pauseTransition(ctx, kind, from, to)
	if err != nil || ok {
		return false, false, err
	}
	done, err = r.afterConflict(cancel, paused)
	return done, !done && err == nil, err
}

// waitPaused waits one poll interval in PAUSED for a resume or a cancel, by
// request or by status, and reads them. A paused run records nothing.
func (r *runner) waitPaused(ctx context.Context, cancel, paused *bool) (bool, error) {
	r.pauseRecording(ctx)
	if err := r.sleep(ctx, r.pollInterval()); err != nil {
		return false, err
	}
	ctrl, done, err := r.readState(ctx)
	if done || err != nil {
		return done, err
	}
	switch r.run.Status {
	case RunCancelRequested:
		*cancel = true
	case RunRunning: // resumed by status
		*paused = false
	}
	r.apply(ctx, ctrl, cancel, paused)
	return false, nil
}

// pauseTransition commits agent.run.paused / agent.run.resumed with the
// status CAS from -> to; false, nil on a conflict (r.run refreshed).
func (r *runner) pauseTransition(ctx context.Context, kind string, from, to RunStatus) (bool, error) {
	ctrl := r.takeable(false)
	ev, err := r.event(r.seq+1, kind, RunPausedPayload{
		PayloadBase: r.base(), Status: to, CompletedNodes: r.completedNames(),
		NextNode: r.nextForReport(), PolicyVersion: r.st.PolicyVersion, AppliedControl: applied(ctrl),
	})
	if err != nil {
		return false, err
	}
	return r.commit(ctx, []Event{ev}, nil, []RunStatus{from}, to, ctrl)
}

// afterConflict re-reads the decision inputs after a status CAS lost.
func (r *runner) afterConflict(cancel, paused *bool) (bool, error) {
	switch r.run.Status {
	case RunCanceled, RunFinished, RunFailed:
		return true, nil
	case RunCancelRequested:
		*cancel = true
	case RunPaused:
		*paused = true
	}
	return false, nil
}

func (r *runner) apply(ctx context.Context, ctrl []Control, cancel, paused *bool) {
	for _, c := range ctrl {
		switch c.Kind {
		case KindCancelRequested:
			*cancel = true
		case KindPauseRequested:
			*paused = true
		case KindResumeRequested:
			*paused = false
		case KindPolicySwitchRequested:
			pol, err := r.e.Policies.Policy(ctx, c.PolicyVersion)
			if err != nil {
				r.logf("run %s: policy switch to version %d ignored: %v", r.run.RunID, c.PolicyVersion, err)
				continue
			}
			r.pol = pol
			r.st.PolicyVersion = pol.Version()
		default:
			r.logf("run %s: unknown control kind %q ignored", r.run.RunID, c.Kind)
		}
	}
}

func (r *runner) pollInterval() time.Duration {
	if r.e.PollInterval > 0 {
		return r.e.PollInterval
	}
	return 500 * time.Millisecond
}

func (r *runner) after(d time.Duration) <-chan time.Time {
	if s, ok := r.clock.(Sleeper); ok {
		return s.After(d)
	}
	return time.After(d)
}

func (r *runner) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.after(d):
		return nil
	}
}

func (r *runner) waitUntil(ctx context.Context, ts string) error {
	if ts == "" {
		return nil
	}
	t, err := time.Parse(TimestampLayout, ts)
	if err != nil {
		return fmt.Errorf("run %s: bad notBefore %q: %w", r.run.RunID, ts, err)
	}
	return r.sleep(ctx, t.Sub(r.clock.Now()))
}

// runStep runs one attempt of r.st.Next and commits it.
func (r *runner) runStep(ctx context.Context) error {
	a := r.newAttempt()
	if r.e.Recorder != nil {
		r.e.Recorder.NodeStarting(ctx, RecordRequest{Run: r.run, Node: a.name, Policy: r.pol,
			Outputs: cloneRaw(r.st.Outputs), Window: r.window})
	}
	in := NodeInput{
		Run: r.run, NodeName: a.name, StepOrdinal: a.step, Attempt: a.attempt,
		IterationOrdinalNumber: r.st.IterationOrdinalNumber, PolicyVersion: r.st.PolicyVersion,
		Policy: r.pol, ResumeToken: a.token, RandomSeed: StepSeed(r.st.Seed, a.step, a.name),
		Outputs: cloneRaw(r.st.Outputs), Carry: cloneRaw(r.st.Carry), Clock: r.clock,
	}
	started, err := r.event(r.seq+1, KindNodeStarted, NodeStartedPayload{
		PayloadBase: r.base(), NodeName: a.name, StepOrdinal: a.step, Attempt: a.attempt,
		PolicyVersion: r.st.PolicyVersion, ResumeToken: a.token, TimeoutMillis: a.timeout.Milliseconds(),
		AppliedControl: applied(a.ctrl),
	})
	if err != nil {
		return err
	}
	// A step that honors a control (a policy switch) commits its started
	// event, which names the control, with the snapshot that takes it:
	// taken earlier, the switch would be lost to a crash before the step's
	// end (takeable). Its progress is then seen at the node's end.
	live := r.startLive(ctx, started, a.name, a.step, a.attempt, len(a.ctrl) == 0)
	in.Progress = live.add
	t0 := r.clock.Now()
	var res NodeResult
	deadlineHit := false
	if node, ok := r.g.Node(a.name); ok {
		res, deadlineHit = r.invoke(ctx, node, in, a.timeout)
	} else {
		res = NodeResult{Err: Errorf(ErrInternal, "graph %q has no node %q", r.g.Name, a.name)}
	}
	startedDone, pending := live.stop()
	if err := ctx.Err(); err != nil {
		// Daemon stop: discard the attempt, the run stays resumable. Its
		// started and progress lines already committed stay in the log
		// (the resumed attempt starts again with a new resumeToken).
		return err
	}
	now := r.clock.Now()
	obj, fe := r.outcome(a, res, deadlineHit)
	common := in.Common()
	fin := NodeFinishedPayload{
		PayloadBase: r.base(), NodeName: a.name, StepOrdinal: a.step, Attempt: a.attempt,
		NodeExecutionOutcomeStatus: OutcomeSuccess, DurationMillis: now.Sub(t0).Milliseconds(),
	}
	if fe == nil {
		r.advance(a, res, &fin)
	} else {
		r.failStep(a, fe, now, &fin, &common)
	}
	out, err := stampCommon(obj, common)
	if err != nil {
		return err
	}
	fin.Output = out
	if fe == nil {
		r.st.Outputs[a.name] = out
	} else if f := r.st.Failure; f != nil && f.Node == a.name && f.StepOrdinal == a.step {
		f.Output = out
	}
	arts, lines := r.captureEvidence(ctx, a.name, a.step, a.attempt, fe, res.Next, out, now)
	if err := ctx.Err(); err != nil {
		return err // daemon stop during the capture: as during the node
	}
	var first []Event
	if !startedDone {
		first = append(first, started)
	}
	return r.commitStep(ctx, a, first, append(append(pending, res.Deltas...), lines...), fin, arts, now)
}

// stepAttempt is what runStep fixes before a node runs.
type stepAttempt struct {
	name          string
	step, attempt int
	token         string
	timeout       time.Duration
	ctrl          []Control // the control requests the step's commit takes
}

func (r *runner) newAttempt() stepAttempt {
	name := r.st.Next
	return stepAttempt{
		name: name, step: r.step + 1, attempt: r.st.Attempts[name] + 1, token: r.ids.NewID(),
		timeout: r.pol.Timeout(name), ctrl: r.takeable(true),
	}
}

// outcome reads a node's result: its output object and its failure (nil
// on success), from the error it returned, the output's own failure fields,
// the deadline, or a next node the graph does not have.
func (r *runner) outcome(a stepAttempt, res NodeResult, deadlineHit bool) (map[string]json.RawMessage, *Error) {
	obj, fe := outputObject(res.Output)
	if fe == nil {
		fe = Classify(res.Err)
	}
	if fe == nil {
		fe = failureFromOutput(obj)
	}
	if fe != nil && deadlineHit {
		fe = &Error{ID: ErrTimeout, Retryable: DefaultRetryable(ErrTimeout), Msg: fmt.Sprintf("%s exceeded its %s timeout", a.name, a.timeout), Err: fe}
	}
	if fe == nil {
		if _, ok := r.g.Node(res.Next); !ok && res.Next != End {
			fe = Errorf(ErrInternal, "%s returned unknown next node %q", a.name, res.Next)
		}
	}
	return obj, fe
}

// advance moves the run's state past a node that succeeded.
func (r *runner) advance(a stepAttempt, res NodeResult, fin *NodeFinishedPayload) {
	st := &r.st
	fin.NextNode = res.Next
	st.Completed = append(st.Completed, CompletedNode{Node: a.name, StepOrdinal: a.step, Pass: st.Pass})
	delete(st.Attempts, a.name)
	st.Next, st.NotBefore = res.Next, ""
	for k, v := range res.Carry {
		if st.Carry == nil {
			st.Carry = map[string]json.RawMessage{}
		}
		st.Carry[k] = v
	}
}

// failStep records a failed attempt: a retry after the policy's backoff,
// or the run's failure; fin and common carry the failure fields.
func (r *runner) failStep(a stepAttempt, fe *Error, now time.Time, fin *NodeFinishedPayload, common *Common) {
	st := &r.st
	id := fe.ID
	// Classification at the boundary wins: the policy may narrow retries
	// (its retryOn), never make a failure classified permanent retryable
	// (an HTTP 404 artifact_unavailable stays not retryable).
	retryable := fe.Retryable && r.pol.Retryable(a.name, id)
	summary := failureSummary(fe)
	common.NodeExecutionOutcomeStatus = OutcomeFailure
	common.ErrorID, common.Retryable, common.HumanReadableFailureSummary = &id, &retryable, &summary
	fin.NodeExecutionOutcomeStatus = OutcomeFailure
	fin.ErrorID, fin.ErrorCode, fin.Retryable, fin.HumanReadableFailureSummary = &id, fe.Code, &retryable, &summary
	retry, backoff := false, time.Duration(0)
	if retryable {
		retry, backoff = r.pol.Decide(a.name, id, a.attempt)
	}
	st.Attempts[a.name] = a.attempt
	if retry {
		st.NotBefore = FormatTS(now.Add(backoff))
		ms := backoff.Milliseconds()
		fin.RetryBackoffMillis = &ms
		return
	}
	st.Next, st.NotBefore = "", ""
	st.Failure = &NodeFailure{
		Node: a.name, StepOrdinal: a.step, Pass: st.Pass, ErrorID: id, Code: fe.Code,
		Summary: summary, Retryable: retryable, Attempts: a.attempt,
	}
}

// commitStep commits a step: events (the started event when not yet
// committed), its progress lines, agent.node.finished with the evidence
// arts, and the snapshot of the state after it.
func (r *runner) commitStep(ctx context.Context, a stepAttempt, events []Event, lines []TokenDelta, fin NodeFinishedPayload, arts []Artifact, now time.Time) error {
	st := &r.st
	for _, art := range arts {
		fin.Artifacts = append(fin.Artifacts, art.ArtifactRef)
		st.Artifacts = append(st.Artifacts, StepArtifact{Node: a.name, StepOrdinal: a.step, ArtifactRef: art.ArtifactRef})
	}
	events, err := r.deltaEvents(events, a.name, a.step, a.attempt, lines)
	if err != nil {
		return err
	}
	finEv, err := r.event(r.seq+int64(len(events))+1, KindNodeFinished, fin)
	if err != nil {
		return err
	}
	events = append(events, finEv)
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("run %s: state: %w", r.run.RunID, err)
	}
	snap := &Snapshot{RunID: r.run.RunID, StepOrdinal: a.step, NodeName: a.name, ResumeToken: a.token, State: stateJSON, CreatedAt: now}
	if ok, err := r.commitEnding(ctx, a, events, snap, arts); err != nil || ok {
		if ok {
			r.step = a.step
		}
		return err
	}
	if _, err := r.commit(ctx, events, snap, nil, "", a.ctrl, arts...); err != nil {
		return err
	}
	r.step = a.step
	return nil
}

// deltaEvents appends an agent.node.token_delta event for each line to
// events, with the sequences that follow r.seq and events.
func (r *runner) deltaEvents(events []Event, name string, stepOrd, attempt int, lines []TokenDelta) ([]Event, error) {
	for _, d := range lines {
		clk := r.clock
		if !d.At.IsZero() {
			clk = fixedClock(d.At)
		}
		ev, err := NewEvent(r.run, r.seq+int64(len(events))+1, KindNodeTokenDelta, TokenDeltaPayload{
			PayloadBase: r.base(), NodeName: name, StepOrdinal: stepOrd, Attempt: attempt, TokenDelta: d,
		}, clk, r.ids)
		if err != nil {
			return nil, err
		}
		events = append(events, ev)
	}
	return events, nil
}

// liveProgress commits a running node's agent.node.started and progress
// lines before the node ends (Engine.LiveProgress), so that followers see
// a long node (a boot wait, a download) while it runs. Its commits hold
// events and outbox rows only, fenced by the run's lease like the step's:
// no snapshot, no status, no control taken, so what a crash recovers is
// unchanged (the latest snapshot); the step's own commit still writes the
// rest of the attempt's events, agent.node.finished and the snapshot in one
// transaction. It runs on its own goroutine while the runner waits in
// invoke; stop hands r.seq back before the runner reads it again.
type liveProgress struct {
	r                    *runner
	ctx                  context.Context
	started              Event
	name                 string
	step, attempt        int
	mu                   sync.Mutex
	pending              []TokenDelta
	startedDone, stopped bool
	failed               bool
	quit, done           chan struct{}
}

func (r *runner) startLive(ctx context.Context, started Event, name string, step, attempt int, allowed bool) *liveProgress {
	l := &liveProgress{r: r, ctx: ctx, started: started, name: name, step: step, attempt: attempt,
		quit: make(chan struct{}), done: make(chan struct{})}
	delay := r.e.LiveProgress
	if delay == 0 {
		delay = 500 * time.Millisecond
	}
	if delay < 0 || !allowed {
		close(l.done)
		return l
	}
	go l.run(delay)
	return l
}

// add records one of the node's lines (NodeInput.Progress); after stop
// (an abandoned node still reporting) it is dropped.
func (l *liveProgress) add(d TokenDelta) {
	if d.At.IsZero() {
		d.At = l.r.clock.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.pending = append(l.pending, d)
	}
}

func (l *liveProgress) run(delay time.Duration) {
	defer close(l.done)
	for wait := delay; ; wait = LiveProgressInterval {
		select {
		case <-l.quit:
			return
		case <-l.ctx.Done():
			return
		case <-l.r.after(wait):
		}
		if !l.flush() {
			return
		}
	}
}

// flush commits the started event (once) and the lines added since the
// last flush. A failed commit (a lost lease, the store down) ends the live
// commits: its lines go back to pending for the step's commit, which then
// meets the same condition and reports it as a step commit does.
func (l *liveProgress) flush() bool {
	l.mu.Lock()
	lines := l.pending
	l.pending = nil
	l.mu.Unlock()
	if l.startedDone && len(lines) == 0 {
		return true
	}
	var events []Event
	if !l.startedDone {
		events = append(events, l.started)
	}
	events, err := l.r.deltaEvents(events, l.name, l.step, l.attempt, lines)
	ok := false
	if err == nil {
		ok, err = l.r.commit(l.ctx, events, nil, nil, "", nil)
	}
	if err != nil || !ok {
		l.mu.Lock()
		l.pending = append(lines, l.pending...)
		l.failed = true
		l.mu.Unlock()
		if err != nil && l.ctx.Err() == nil {
			l.r.logf("run %s: %s: progress commit: %v (the rest commits with the step)", l.r.run.RunID, l.name, err)
		}
		return false
	}
	l.startedDone = true
	return true
}

// stop ends the live commits and returns whether the started event was
// committed and the lines not committed yet, for the step's commit.
func (l *liveProgress) stop() (startedDone bool, pending []TokenDelta) {
	close(l.quit)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	return l.startedDone, l.pending
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// invoke runs one attempt under the node's timeout. It reports whether the
// node's own deadline (not the daemon's ctx) expired.
func (r *runner) invoke(ctx context.Context, node Node, in NodeInput, timeout time.Duration) (NodeResult, bool) {
	nctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		nctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	ch := make(chan NodeResult, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- NodeResult{Err: Errorf(ErrInternal, "node %s panicked: %v", in.NodeName, p)}
			}
		}()
		ch <- node.Run(nctx, in)
	}()
	hit := func() bool { return ctx.Err() == nil && errors.Is(nctx.Err(), context.DeadlineExceeded) }
	select {
	case res := <-ch:
		return res, hit()
	case <-nctx.Done():
	}
	grace := r.e.AbandonGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	select {
	case res := <-ch:
		return res, hit()
	case <-r.after(grace):
		return NodeResult{Err: Errorf(ErrTimeout, "%s did not return within %s after its deadline; abandoned", in.NodeName, grace)}, hit()
	}
}

// outputObject encodes a node's Output as a JSON object.
func outputObject(out any) (map[string]json.RawMessage, *Error) {
	obj := map[string]json.RawMessage{}
	if out == nil {
		return obj, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return obj, Wrap(ErrInternal, err, "node output does not encode as JSON")
	}
	if string(b) == "null" {
		return obj, nil
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return map[string]json.RawMessage{}, Wrap(ErrInternal, err, "node output is not a JSON object")
	}
	return obj, nil
}

// failureFromOutput reads a failure a node reported through its Output's
// common fields instead of NodeResult.Err. Its "retryable" (when not null) is
// the node's classification; else the errorId's default.
func failureFromOutput(obj map[string]json.RawMessage) *Error {
	var c Common
	for _, k := range []string{"nodeExecutionOutcomeStatus", "errorId", "retryable", "humanReadableFailureSummary"} {
		if v, ok := obj[k]; ok {
			one, _ := json.Marshal(map[string]json.RawMessage{k: v})
			_ = json.Unmarshal(one, &c)
		}
	}
	if !c.Failed() {
		return nil
	}
	e := &Error{ID: ErrInternal, Msg: "node reported FAILURE without errorId"}
	if c.ErrorID != nil && *c.ErrorID != "" {
		e = &Error{ID: *c.ErrorID, Retryable: DefaultRetryable(*c.ErrorID)}
		if c.Retryable != nil {
			e.Retryable = *c.Retryable
		}
	}
	if c.HumanReadableFailureSummary != nil {
		e.Msg = *c.HumanReadableFailureSummary
	}
	return e
}

// stampCommon writes the engine-owned common fields over obj's.
func stampCommon(obj map[string]json.RawMessage, c Common) (json.RawMessage, error) {
	cb, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var cm map[string]json.RawMessage
	if err := json.Unmarshal(cb, &cm); err != nil {
		return nil, err
	}
	for _, k := range commonKeys {
		obj[k] = cm[k]
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return CanonicalJSON(b)
}

func failureSummary(e *Error) string {
	if e.Msg == "" {
		return e.Error()
	}
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func cloneRaw(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
