package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// Node is a scriptable agent.Node. Its knobs, applied per attempt in this
// order: BlockUntilDone, Sleep, FailTimes/FailWith, Panic, then success with
// Output, Next, Deltas and Carry. OnRun runs first on every attempt.
type Node struct {
	NodeName string
	// Next is the successor returned on success (agent.End to finish).
	Next string
	// FailTimes makes the first FailTimes attempts fail with FailWith
	// (FailCode as its Code); FailTimes < 0 fails every attempt.
	FailTimes int
	FailWith  agent.ErrorID
	FailCode  string
	// FailNotRetryable classifies the failures as not retryable whatever
	// FailWith's default (agent.DefaultRetryable), as an adapter does for an
	// HTTP 404 artifact_unavailable.
	FailNotRetryable bool
	// FailMsg is the failure's message ("<name> scripted failure <n>" when empty).
	FailMsg string
	// Detail is copied into the Output's "detail" field on every attempt.
	Detail map[string]any
	// FailViaOutput reports failures through the Output's common fields
	// instead of NodeResult.Err.
	FailViaOutput bool
	// BlockUntilDone blocks the attempt until its ctx is done, then returns
	// ctx's error (classified by the engine).
	BlockUntilDone bool
	// IgnoreCtx with BlockUntilDone: block forever (until Release), ignoring ctx.
	IgnoreCtx bool
	// Sleep waits this long (runtime timers; fake under synctest) before returning.
	Sleep time.Duration
	// Panic makes every attempt panic.
	Panic bool
	// Deltas are returned on every attempt.
	Deltas []agent.TokenDelta
	// Carry is returned on success.
	Carry map[string]json.RawMessage
	// OnRun, when set, is called at the start of each attempt.
	OnRun func(ctx context.Context, in agent.NodeInput)

	mu      sync.Mutex
	inputs  []agent.NodeInput
	release chan struct{}
	once    sync.Once
}

// Output is the fake node's output: a marker field plus the common fields.
type Output struct {
	Echo    string         `json:"echo"`
	Attempt int            `json:"attempt"`
	Detail  map[string]any `json:"detail,omitempty"`
	agent.Common
}

var _ agent.Node = (*Node)(nil)

func (n *Node) Name() string { return n.NodeName }

func (n *Node) rel() chan struct{} {
	n.once.Do(func() { n.release = make(chan struct{}) })
	return n.release
}

// Release unblocks IgnoreCtx attempts.
func (n *Node) Release() { close(n.rel()) }

func (n *Node) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	n.mu.Lock()
	n.inputs = append(n.inputs, in)
	calls := len(n.inputs)
	n.mu.Unlock()
	if n.OnRun != nil {
		n.OnRun(ctx, in)
	}
	out := &Output{Echo: "from " + n.NodeName, Attempt: in.Attempt, Detail: n.Detail}
	if n.BlockUntilDone {
		if n.IgnoreCtx {
			<-n.rel()
			return agent.NodeResult{Output: out, Next: n.Next}
		}
		<-ctx.Done()
		return agent.NodeResult{Output: out, Err: ctx.Err(), Deltas: n.Deltas}
	}
	if n.Sleep > 0 {
		select {
		case <-time.After(n.Sleep):
		case <-ctx.Done():
			return agent.NodeResult{Output: out, Err: ctx.Err()}
		}
	}
	if n.FailTimes < 0 || calls <= n.FailTimes {
		e := &agent.Error{ID: n.FailWith, Code: n.FailCode, Retryable: agent.DefaultRetryable(n.FailWith) && !n.FailNotRetryable,
			Msg: fmt.Sprintf("%s scripted failure %d", n.NodeName, calls)}
		if n.FailMsg != "" {
			e.Msg = n.FailMsg
		}
		if n.FailViaOutput {
			out.NodeExecutionOutcomeStatus = agent.OutcomeFailure
			out.ErrorID = &e.ID
			out.Retryable = &e.Retryable
			out.HumanReadableFailureSummary = &e.Msg
			return agent.NodeResult{Output: out, Deltas: n.Deltas}
		}
		return agent.NodeResult{Output: out, Err: e, Deltas: n.Deltas}
	}
	if n.Panic {
		panic("scripted panic in " + n.NodeName)
	}
	return agent.NodeResult{Output: out, Next: n.Next, Deltas: n.Deltas, Carry: n.Carry}
}

// Calls is the number of attempts so far.
func (n *Node) Calls() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.inputs)
}

// Inputs returns the NodeInput of every attempt so far.
func (n *Node) Inputs() []agent.NodeInput {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]agent.NodeInput(nil), n.inputs...)
}

// Policy is a simple agent.RetryPolicy: one retry rule for every node.
type Policy struct {
	V           int
	Timeouts    map[string]time.Duration
	MaxAttempts int
	Backoff     time.Duration // fixed backoff between attempts
	RetryOn     []agent.ErrorID
}

var _ agent.RetryPolicy = (*Policy)(nil)

func (p *Policy) Version() int                      { return p.V }
func (p *Policy) Timeout(node string) time.Duration { return p.Timeouts[node] }

func (p *Policy) Retryable(node string, id agent.ErrorID) bool {
	for _, r := range p.RetryOn {
		if r == id {
			return true
		}
	}
	return false
}

func (p *Policy) Decide(node string, id agent.ErrorID, attempt int) (bool, time.Duration) {
	if !p.Retryable(node, id) || attempt >= p.MaxAttempts {
		return false, 0
	}
	return true, p.Backoff
}

// Policies is an agent.PolicySource over a fixed set; version 0 is Current.
type Policies struct {
	Current int
	ByV     map[int]agent.RetryPolicy
}

var _ agent.PolicySource = (*Policies)(nil)

// NewPolicies returns a source holding ps, the first as current.
func NewPolicies(ps ...*Policy) *Policies {
	s := &Policies{ByV: map[int]agent.RetryPolicy{}}
	for i, p := range ps {
		if i == 0 {
			s.Current = p.V
		}
		s.ByV[p.V] = p
	}
	return s
}

func (s *Policies) Policy(_ context.Context, v int) (agent.RetryPolicy, error) {
	if v == 0 {
		v = s.Current
	}
	p, ok := s.ByV[v]
	if !ok {
		return nil, fmt.Errorf("policy version %d: %w", v, agent.ErrNotFound)
	}
	return p, nil
}
