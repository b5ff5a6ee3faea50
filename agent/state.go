package agent

import (
	"encoding/json"
	"fmt"
)

// RunState is the JSON in agent_state_snapshot.state: everything a restarted
// engine needs to continue a run without re-running finished nodes, and what
// the agent error format reports. Its JSON shape:
//
//	{"graph":"setup","next":"ProvisionApp","policyVersion":1,"seed":123,
//	 "pass":1,"iterationOrdinalNumber":0,"attempts":{"ProvisionApp":1},
//	 "notBefore":"2025-10-23T12:00:01.500Z",
//	 "completed":[{"node":"EnsureDevice","stepOrdinal":0,"pass":1}],
//	 "outputs":{"EnsureDevice":{…}},"carry":{…},"failure":null}
type RunState struct {
	Graph string `json:"graph"`
	// Next is the node to run next, End when the graph ended, "" after a
	// final failure.
	Next          string `json:"next"`
	PolicyVersion int    `json:"policyVersion"`
	// Seed is the run's seed (RunSeed).
	Seed int64 `json:"seed"`
	// Pass counts engine passes over the run: 1 for the first, +1 for each
	// resume after a daemon stop. A node completed in an earlier pass than
	// the failing one is "cached" in the agent error format.
	Pass                   int `json:"pass"`
	IterationOrdinalNumber int `json:"iterationOrdinalNumber"`
	// Attempts are the failed attempts of a node so far (state-based
	// retry); the entry goes when the node succeeds.
	Attempts map[string]int `json:"attempts"`
	// NotBefore is the earliest start of the next attempt after a backoff
	// (TimestampLayout), "" for none.
	NotBefore string                     `json:"notBefore,omitempty"`
	Completed []CompletedNode            `json:"completed"`
	Outputs   map[string]json.RawMessage `json:"outputs"`
	Carry     map[string]json.RawMessage `json:"carry,omitempty"`
	Failure   *NodeFailure               `json:"failure"`
	// Artifacts point at the evidence the run's steps kept (never bytes).
	Artifacts []StepArtifact `json:"artifacts,omitempty"`
}

// CompletedNode is one node that finished with SUCCESS.
type CompletedNode struct {
	Node        string `json:"node"`
	StepOrdinal int    `json:"stepOrdinal"`
	Pass        int    `json:"pass"`
}

// NodeFailure is the final (not retried) failure of a run's node.
type NodeFailure struct {
	Node        string  `json:"node"`
	StepOrdinal int     `json:"stepOrdinal"`
	Pass        int     `json:"pass"`
	ErrorID     ErrorID `json:"errorId"`
	// Code refines ErrorID (Error.Code), e.g. INSTALL_FAILED_INSUFFICIENT_STORAGE.
	Code      string `json:"code,omitempty"`
	Summary   string `json:"humanReadableFailureSummary"`
	Retryable bool   `json:"retryable"`
	// Attempts is how many attempts the node had, this one included.
	Attempts int `json:"attempts"`
	// Output is the failed attempt's Output (common fields included), the
	// rich context of the agent error format.
	Output json.RawMessage `json:"output,omitempty"`
}

// DecodeRunState parses a snapshot's State.
func DecodeRunState(s Snapshot) (RunState, error) {
	var st RunState
	if err := json.Unmarshal(s.State, &st); err != nil {
		return RunState{}, fmt.Errorf("run %s snapshot step %d: %w", s.RunID, s.StepOrdinal, err)
	}
	if st.Attempts == nil {
		st.Attempts = map[string]int{}
	}
	if st.Outputs == nil {
		st.Outputs = map[string]json.RawMessage{}
	}
	return st, nil
}
