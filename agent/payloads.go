package agent

import "encoding/json"

// The payloads the engine writes, by event kind. Every payload carries
// tenantId (+ projectId when set) and runId (screengraph-nodes.md,
// "Multi-Tenancy"). Numbers in payloads stay within MaxSafeInteger.

// PayloadBase is the part every engine payload starts with.
type PayloadBase struct {
	TenantID  string `json:"tenantId"`
	ProjectID string `json:"projectId,omitempty"`
	RunID     string `json:"runId"`
}

// RunStartedPayload is agent.run.started's payload.
type RunStartedPayload struct {
	PayloadBase
	Graph         string `json:"graph"`
	StartNode     string `json:"startNode"`
	Serial        string `json:"serial,omitempty"`
	PolicyVersion int    `json:"policyVersion"`
	RandomSeed    int64  `json:"randomSeed"`
}

// NodeStartedPayload is agent.node.started's payload.
type NodeStartedPayload struct {
	PayloadBase
	NodeName      string `json:"nodeName"`
	StepOrdinal   int    `json:"stepOrdinal"`
	Attempt       int    `json:"attempt"`
	PolicyVersion int    `json:"policyVersion"`
	ResumeToken   string `json:"resumeToken"`
	// TimeoutMillis is the attempt's deadline (0 = none).
	TimeoutMillis int64 `json:"timeoutMillis"`
	// AppliedControl: the control requests this step's commit honors (a
	// policy switch, or requests that changed no status).
	AppliedControl []AppliedControl `json:"appliedControl,omitempty"`
}

// AppliedControl names a control request in the event of the commit that
// honored it; each request id appears in exactly one event of its run.
type AppliedControl struct {
	RequestID     string `json:"requestId"`
	Kind          string `json:"kind"`
	PolicyVersion int    `json:"policyVersion,omitempty"`
}

// TokenDeltaPayload is agent.node.token_delta's payload.
type TokenDeltaPayload struct {
	PayloadBase
	NodeName    string `json:"nodeName"`
	StepOrdinal int    `json:"stepOrdinal"`
	Attempt     int    `json:"attempt"`
	TokenDelta
}

// NodeFinishedPayload is agent.node.finished's payload: the outcome, the
// node's full Output (common fields included) and what the engine decided.
type NodeFinishedPayload struct {
	PayloadBase
	NodeName                    string        `json:"nodeName"`
	StepOrdinal                 int           `json:"stepOrdinal"`
	Attempt                     int           `json:"attempt"`
	NodeExecutionOutcomeStatus  OutcomeStatus `json:"nodeExecutionOutcomeStatus"`
	ErrorID                     *ErrorID      `json:"errorId"`
	ErrorCode                   string        `json:"errorCode,omitempty"`
	Retryable                   *bool         `json:"retryable"`
	HumanReadableFailureSummary *string       `json:"humanReadableFailureSummary"`
	// DurationMillis is the attempt's duration by the engine's Clock.
	DurationMillis int64           `json:"durationMillis"`
	Output         json.RawMessage `json:"output"`
	// NextNode is the successor on success (End's value "<end>" ends the graph).
	NextNode string `json:"nextNode,omitempty"`
	// RetryBackoffMillis is set when the engine scheduled another attempt.
	RetryBackoffMillis *int64 `json:"retryBackoffMillis,omitempty"`
	// Artifacts point at the evidence kept after this attempt (never bytes).
	Artifacts []ArtifactRef `json:"artifacts,omitempty"`
}

// RunEndedPayload is the payload of agent.run.finished, agent.run.failed and
// agent.run.canceled.
type RunEndedPayload struct {
	PayloadBase
	Status         RunStatus `json:"status"`
	CompletedNodes []string  `json:"completedNodes"`
	// FailedNode, ErrorID, Summary: agent.run.failed only.
	FailedNode string   `json:"failedNode,omitempty"`
	ErrorID    *ErrorID `json:"errorId,omitempty"`
	Summary    string   `json:"humanReadableFailureSummary,omitempty"`
	// CanceledBeforeNode: agent.run.canceled only; the node that would have run next.
	CanceledBeforeNode string `json:"canceledBeforeNode,omitempty"`
	PolicyVersion      int    `json:"policyVersion"`
	// AppliedControl: the control requests honored by this commit.
	AppliedControl []AppliedControl `json:"appliedControl,omitempty"`
}

// RunPausedPayload is the payload of agent.run.paused and agent.run.resumed,
// committed with the status change at a node boundary.
type RunPausedPayload struct {
	PayloadBase
	Status         RunStatus `json:"status"`
	CompletedNodes []string  `json:"completedNodes"`
	// NextNode is the node that runs once the run is resumed ("" before the
	// final transition).
	NextNode      string `json:"nextNode,omitempty"`
	PolicyVersion int    `json:"policyVersion"`
	// AppliedControl: the control requests honored by this commit.
	AppliedControl []AppliedControl `json:"appliedControl,omitempty"`
}
