package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// ErrorReport is the agent error format (spec/agent-error-format.md, after
// pflow's format_execution_errors) of a failed run, as the CLI's
// `--output json` and the HTTP API print it:
//
//	{"success":false,"error":"…",
//	 "errors":[{"category":"execution_failure","node_id":"ProvisionApp","message":"…","fixable":false,
//	            "error_id":"install_failed","error_code":"INSTALL_FAILED_…","attempts":1,…}],
//	 "execution":{"steps":[{"node_id":"EnsureDevice","status":"completed","cached":false},…]},
//	 "checkpoint":{"completed_nodes":["EnsureDevice"],"failed_node":"ProvisionApp"}}
//
// Everything in it is passed through Redact.
type ErrorReport struct {
	Success    bool         `json:"success"`
	Error      string       `json:"error"`
	Errors     []ErrorEntry `json:"errors"`
	Execution  Execution    `json:"execution"`
	Checkpoint Checkpoint   `json:"checkpoint"`
}

// ErrorEntry is one element of errors[]. Context holds the rich context
// (error_id, error_code, attempts, step_ordinal, policy_version, retryable,
// output); its keys are written beside the fixed ones.
type ErrorEntry struct {
	Category string
	NodeID   string
	Message  string
	Fixable  bool
	Context  map[string]any
}

// MarshalJSON flattens Context into the entry, as in the spec's example.
func (e ErrorEntry) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range e.Context {
		m[k] = v
	}
	m["category"], m["node_id"], m["message"], m["fixable"] = e.Category, e.NodeID, e.Message, e.Fixable
	return json.Marshal(m)
}

// Execution lists every node of the graph with what happened to it.
type Execution struct {
	Steps []ExecutionStep `json:"steps"`
}

// Step statuses of the agent error format.
const (
	StepCompleted   = "completed"
	StepFailed      = "failed"
	StepNotExecuted = "not_executed"
)

// ExecutionStep is one element of execution.steps. Cached is true for a
// node whose output was restored from a snapshot by a resumed engine rather
// than produced in the pass that failed.
type ExecutionStep struct {
	NodeID string `json:"node_id"`
	Status string `json:"status"`
	Cached bool   `json:"cached"`
}

// Checkpoint says where a resume (after repair) would continue.
type Checkpoint struct {
	CompletedNodes []string `json:"completed_nodes"`
	FailedNode     string   `json:"failed_node"`
}

// Error categories (agent-error-format.md): api_validation when the run
// request itself must change (bad input, wrong artifact or activity),
// execution_failure for everything that went wrong while running.
// CategoryAuth (a refusal, never a run's failure) when the caller's
// credentials must change: a missing, unknown or revoked token (401) or one
// without the right (403).
const (
	CategoryAPIValidation    = "api_validation"
	CategoryExecutionFailure = "execution_failure"
	CategoryAuth             = "auth"
)

var requestErrors = map[ErrorID]bool{
	ErrInvalidRequest: true, ErrSignatureMismatch: true, ErrVersionDowngrade: true, ErrActivityNotFound: true,
}

// ErrNoFailure is returned by NewErrorReport for a run state without a final failure.
var ErrNoFailure = errors.New("run has no failed node")

// NewErrorReport builds the report of a failed run from its last RunState
// (DecodeRunState of LatestSnapshot) and its graph. fixable is true when the
// request can be repaired (api_validation) or the policy deems the error
// retryable. Errors: ErrNoFailure.
func NewErrorReport(g *Graph, st RunState) (ErrorReport, error) {
	f := st.Failure
	if f == nil {
		return ErrorReport{}, ErrNoFailure
	}
	category := CategoryExecutionFailure
	if requestErrors[f.ErrorID] {
		category = CategoryAPIValidation
	}
	ctx := map[string]any{
		"error_id": string(f.ErrorID), "attempts": f.Attempts, "step_ordinal": f.StepOrdinal,
		"policy_version": st.PolicyVersion, "retryable": f.Retryable,
	}
	if f.Code != "" {
		ctx["error_code"] = f.Code
	}
	if len(f.Output) > 0 {
		var out any
		if err := json.Unmarshal(f.Output, &out); err == nil {
			ctx["output"] = out
		}
	}
	msg := RedactString(f.Summary)
	rep := ErrorReport{
		Success: false,
		Error:   RedactString(fmt.Sprintf("%s failed: %s", f.Node, f.Summary)),
		Errors: []ErrorEntry{{
			Category: category, NodeID: f.Node, Message: msg,
			Fixable: category == CategoryAPIValidation || f.Retryable,
			Context: Redact(ctx).(map[string]any),
		}},
		Checkpoint: Checkpoint{CompletedNodes: []string{}, FailedNode: f.Node},
	}
	done := map[string]CompletedNode{}
	for _, c := range st.Completed {
		done[c.Node] = c
		rep.Checkpoint.CompletedNodes = append(rep.Checkpoint.CompletedNodes, c.Node)
	}
	names := g.NodeNames()
	// Nodes the state names but the graph does not (a changed graph) still show.
	for n := range done {
		if _, ok := g.Node(n); !ok {
			names = append(names, n)
		}
	}
	sort.SliceStable(names[len(g.order):], func(i, j int) bool { return names[len(g.order)+i] < names[len(g.order)+j] })
	for _, n := range names {
		s := ExecutionStep{NodeID: n, Status: StepNotExecuted}
		switch c, ok := done[n]; {
		case n == f.Node:
			s.Status = StepFailed
		case ok:
			s.Status, s.Cached = StepCompleted, c.Pass < f.Pass
		}
		rep.Execution.Steps = append(rep.Execution.Steps, s)
	}
	return rep, nil
}

// LoadErrorReport reads the run's latest snapshot and builds its report.
// Errors: ErrNotFound (no snapshot), ErrNoFailure.
func LoadErrorReport(ctx context.Context, s Store, g *Graph, runID string) (ErrorReport, error) {
	snap, err := s.LatestSnapshot(ctx, Admin(), runID)
	if err != nil {
		return ErrorReport{}, err
	}
	st, err := DecodeRunState(snap)
	if err != nil {
		return ErrorReport{}, err
	}
	return NewErrorReport(g, st)
}
