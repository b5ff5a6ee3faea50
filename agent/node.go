package agent

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// OutcomeStatus is nodeExecutionOutcomeStatus.
type OutcomeStatus string

const (
	OutcomeSuccess OutcomeStatus = "SUCCESS"
	OutcomeFailure OutcomeStatus = "FAILURE"
)

// Common is the block of fields every node Output carries
// (screengraph-nodes.md, "Common Node Output fields"). Node outputs embed it:
//
//	type EnsureDeviceOutput struct {
//		RunID                string               `json:"runId"`
//		DeviceRuntimeContext DeviceRuntimeContext `json:"deviceRuntimeContext"`
//		agent.Common
//	}
//
// The engine owns these fields: after a node returns it overwrites them
// (nodeName, stepOrdinal, iterationOrdinalNumber, policyVersion, resumeToken,
// randomSeed from the step; the outcome fields from NodeResult.Err), so a node
// may leave them zero. errorId, retryable and humanReadableFailureSummary are
// JSON null on success, as in the spec's examples.
type Common struct {
	NodeName                    string        `json:"nodeName"`
	StepOrdinal                 int           `json:"stepOrdinal"`
	IterationOrdinalNumber      int           `json:"iterationOrdinalNumber"`
	PolicyVersion               int           `json:"policyVersion"`
	ResumeToken                 string        `json:"resumeToken"`
	RandomSeed                  int64         `json:"randomSeed"`
	NodeExecutionOutcomeStatus  OutcomeStatus `json:"nodeExecutionOutcomeStatus"`
	ErrorID                     *ErrorID      `json:"errorId"`
	Retryable                   *bool         `json:"retryable"`
	HumanReadableFailureSummary *string       `json:"humanReadableFailureSummary"`
}

// commonKeys are Common's JSON names, in declaration order.
var commonKeys = []string{
	"nodeName", "stepOrdinal", "iterationOrdinalNumber", "policyVersion", "resumeToken",
	"randomSeed", "nodeExecutionOutcomeStatus", "errorId", "retryable", "humanReadableFailureSummary",
}

// Failed reports whether c says FAILURE.
func (c Common) Failed() bool { return c.NodeExecutionOutcomeStatus == OutcomeFailure }

// TokenDelta is one streamed progress or log line of a node, recorded as an
// agent.node.token_delta event between the node's started and finished events.
type TokenDelta struct {
	// Kind is "log" or "progress".
	Kind string `json:"kind"`
	Text string `json:"text"`
	// Percent is the progress in [0,100] for Kind "progress".
	Percent *float64 `json:"percent,omitempty"`
	// At is when the node produced the line; zero means when the node returned.
	At time.Time `json:"-"`
}

// Log returns a "log" TokenDelta.
func Log(format string, args ...any) TokenDelta {
	return TokenDelta{Kind: "log", Text: fmt.Sprintf(format, args...)}
}

// Progress returns a "progress" TokenDelta.
func Progress(percent float64, text string) TokenDelta {
	return TokenDelta{Kind: "progress", Text: text, Percent: &percent}
}

// End is the NodeResult.Next of a node that ends the graph.
const End = "<end>"

// NodeInput is what the engine hands a node for one attempt.
type NodeInput struct {
	Run                    Run
	NodeName               string
	StepOrdinal            int
	Attempt                int // 1-based attempt of this node (state-based retry)
	IterationOrdinalNumber int
	PolicyVersion          int
	// Policy is the policy in force for this step; wiring code that needs the
	// whole document (modes, idle heuristics) type-asserts it to its own type.
	Policy      RetryPolicy
	ResumeToken string
	// RandomSeed is this step's seed (0 <= seed <= MaxSafeInteger), derived
	// from the run's seed, the step ordinal and the node name.
	RandomSeed int64
	// Outputs are the outputs (JSON objects, common fields included) of the
	// nodes finished so far, by node name.
	Outputs map[string]json.RawMessage
	// Carry is the state the earlier nodes passed on (NodeResult.Carry).
	Carry map[string]json.RawMessage
	Clock Clock
	// Progress, when set, takes the node's progress and log lines as they
	// happen (safe from any goroutine; At defaults to now): the engine
	// commits them while the node runs (Engine.LiveProgress), so a follower
	// sees a long node live. Lines given here are not returned again in
	// NodeResult.Deltas.
	Progress func(TokenDelta)
}

// Rand returns a PCG generator seeded with RandomSeed: the only randomness a
// node should use, so a replayed step draws the same numbers.
func (in NodeInput) Rand() *rand.Rand {
	return rand.New(rand.NewPCG(uint64(in.RandomSeed), uint64(in.StepOrdinal)))
}

// Common returns the common fields of this step with a SUCCESS outcome, for
// nodes that fill their Output's Common themselves.
func (in NodeInput) Common() Common {
	return Common{
		NodeName: in.NodeName, StepOrdinal: in.StepOrdinal, IterationOrdinalNumber: in.IterationOrdinalNumber,
		PolicyVersion: in.PolicyVersion, ResumeToken: in.ResumeToken, RandomSeed: in.RandomSeed,
		NodeExecutionOutcomeStatus: OutcomeSuccess,
	}
}

// NodeResult is what a node returns. Nodes do not panic and do not persist:
// the engine records everything in one CommitStep.
type NodeResult struct {
	// Output is the node's Output: a JSON-encodable value that encodes to a
	// JSON object (usually a struct embedding Common). nil means {}.
	Output any
	// Next is the name of the node to run next, or End. Ignored on failure.
	Next string
	// Err is the failure, nil on success. It is classified with Classify
	// (an *Error keeps its id; a context deadline is timeout). A node may
	// instead report failure through its Output's Common (FAILURE + errorId).
	Err error
	// Deltas are the node's progress/log lines, recorded in order.
	Deltas []TokenDelta
	// Carry is merged into the run's carried state (keys replace keys) on
	// success; keep it small (pointers to artifacts, not artifacts).
	Carry map[string]json.RawMessage
}

// Node is one step of a graph (EnsureDevice, ProvisionApp, …).
type Node interface {
	Name() string
	// Run does the node's work. ctx carries the node's timeout and is
	// canceled when the daemon stops; a node returns promptly when it is done.
	Run(ctx context.Context, in NodeInput) NodeResult
}

// Graph is a set of named nodes and the node to start with. Nodes choose
// their successor (NodeResult.Next), as in node-catalog.md's BaseNode.
type Graph struct {
	Name  string
	Start string
	nodes map[string]Node
	order []string
}

// NewGraph builds a graph; the nodes' declaration order is the order the
// agent error format lists them in. Errors: no nodes, a duplicate or empty
// name, the reserved name End, or a start node that is not among nodes.
func NewGraph(name, start string, nodes ...Node) (*Graph, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("graph %q: no nodes", name)
	}
	g := &Graph{Name: name, Start: start, nodes: map[string]Node{}}
	for _, n := range nodes {
		nn := n.Name()
		if nn == "" || nn == End {
			return nil, fmt.Errorf("graph %q: invalid node name %q", name, nn)
		}
		if _, dup := g.nodes[nn]; dup {
			return nil, fmt.Errorf("graph %q: duplicate node %q", name, nn)
		}
		g.nodes[nn] = n
		g.order = append(g.order, nn)
	}
	if _, ok := g.nodes[start]; !ok {
		return nil, fmt.Errorf("graph %q: start node %q not in graph", name, start)
	}
	return g, nil
}

// Node returns the named node.
func (g *Graph) Node(name string) (Node, bool) { n, ok := g.nodes[name]; return n, ok }

// NodeNames returns the node names in declaration order.
func (g *Graph) NodeNames() []string { return append([]string(nil), g.order...) }

// RetryPolicy is the part of a policy document the engine needs; package
// policy implements it. Durations are wall time.
type RetryPolicy interface {
	// Version is the policy's version number (>= 1).
	Version() int
	// Timeout is the deadline of one attempt of node; 0 means none.
	Timeout(node string) time.Duration
	// Decide says whether a failed attempt (1-based) of node with id gets
	// another attempt, and after which backoff. The engine asks only for
	// failures classified retryable (Error.Retryable): a policy narrows
	// retries, it never makes a permanent failure retryable.
	Decide(node string, id ErrorID, attempt int) (retry bool, backoff time.Duration)
	// Retryable says whether the policy retries id for node at all. The
	// output's "retryable" field is Error.Retryable && Retryable(node, id).
	Retryable(node string, id ErrorID) bool
}

// PolicySource resolves policy versions; version 0 means the current one.
// Errors wrap ErrNotFound for an unknown version.
type PolicySource interface {
	Policy(ctx context.Context, version int) (RetryPolicy, error)
}

// RunSeed is the seed of a run: the number "randomSeed" in the run's Input
// when it is an integer in [0, MaxSafeInteger], otherwise derived from the
// runId (the first 8 bytes of sha256("screengraph/run-seed|"+runId), masked
// to 53 bits). Replaying a run therefore needs no stored seed.
func RunSeed(r Run) int64 {
	var in struct {
		RandomSeed *json.Number `json:"randomSeed"`
	}
	if len(r.Input) > 0 && json.Unmarshal(r.Input, &in) == nil && in.RandomSeed != nil {
		if v, err := strconv.ParseInt(in.RandomSeed.String(), 10, 64); err == nil && v >= 0 && v <= MaxSafeInteger {
			return v
		}
	}
	return seed53("screengraph/run-seed|" + r.RunID)
}

// StepSeed derives the randomSeed of step stepOrdinal running node from the
// run's seed: the first 8 bytes of sha256("<runSeed>|<stepOrdinal>|<node>"),
// masked to 53 bits so it survives RFC 8785 encoding.
func StepSeed(runSeed int64, stepOrdinal int, node string) int64 {
	return seed53(strconv.FormatInt(runSeed, 10) + "|" + strconv.Itoa(stepOrdinal) + "|" + node)
}

func seed53(s string) int64 {
	sum := sha256.Sum256([]byte(s))
	return int64(binary.BigEndian.Uint64(sum[:8]) & MaxSafeInteger)
}
