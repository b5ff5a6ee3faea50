// Package agent holds the domain of the ScreenGraph device agent: runs and their
// status machine, the event envelope and its checksum, error ids, and the ports
// (Store, Publisher, Clock) the orchestrator consumes. It imports no other
// package of the project; everything else imports it.
package agent

import (
	"context"
	"encoding/json"
	"time"
)

// RunStatus is runs.status. Terminal statuses are set only by compare-and-set,
// so a run has exactly one terminal event.
type RunStatus string

const (
	RunPending         RunStatus = "PENDING"
	RunRunning         RunStatus = "RUNNING"
	RunPaused          RunStatus = "PAUSED"
	RunCancelRequested RunStatus = "CANCELED_REQUESTED"
	RunCanceled        RunStatus = "CANCELED"
	RunFinished        RunStatus = "FINISHED"
	RunFailed          RunStatus = "FAILED"
)

// RunStatuses lists every RunStatus, for validating ?status= filters.
var RunStatuses = []RunStatus{RunPending, RunRunning, RunPaused, RunCancelRequested, RunCanceled, RunFinished, RunFailed}

// Terminal reports whether s ends a run.
func (s RunStatus) Terminal() bool { return s == RunCanceled || s == RunFinished || s == RunFailed }

// Run is one execution of a graph (the setup chain) against one device.
type Run struct {
	RunID     string    `json:"runId"`
	TenantID  string    `json:"tenantId"`
	ProjectID string    `json:"projectId,omitempty"`
	Status    RunStatus `json:"status"`
	// Serial is the device the run holds; Graph names the graph ("setup").
	Serial string `json:"serial"`
	Graph  string `json:"graph"`
	// Input is the run request (node inputs, policy reference) as submitted.
	Input         json.RawMessage `json:"input"`
	PolicyVersion int             `json:"policyVersion"`
	CreatedAt     time.Time       `json:"createdAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
}

// Event kinds (screengraph-nodes.md).
const (
	KindRunStarted  = "agent.run.started"
	KindRunFinished = "agent.run.finished"
	KindRunFailed   = "agent.run.failed"
	KindRunCanceled = "agent.run.canceled"
	// KindRunPaused and KindRunResumed are committed with the PAUSED and
	// back-to-RUNNING transitions (not in the node spec; the daemon adds them
	// so subscribers see control take effect).
	KindRunPaused  = "agent.run.paused"
	KindRunResumed = "agent.run.resumed"
	// KindDeviceReset is committed before a run's first step on a device
	// whose previous lease was another tenant's run (or one no longer
	// known): the device was reset for it (Handover). Not in the node spec
	// either; same envelope and subject as every event of the run.
	KindDeviceReset = "agent.device.reset"

	KindNodeStarted    = "agent.node.started"
	KindNodeTokenDelta = "agent.node.token_delta"
	KindNodeFinished   = "agent.node.finished"

	// Incoming control events.
	KindCancelRequested       = "agent.run.cancellation_requested"
	KindPauseRequested        = "agent.run.pause_requested"
	KindResumeRequested       = "agent.run.resume_requested"
	KindPolicySwitchRequested = "agent.policy.switch_requested"
)

// EventVersion is the envelope version every event carries.
const EventVersion = "1"

// Event is the canonical envelope. Sequence is assigned by the orchestrator
// (1..n per run, no gaps); Checksum = hex(sha256(eventId|runId|sequence|kind|canonical(payload))).
type Event struct {
	EventID   string          `json:"eventId"`
	RunID     string          `json:"runId"`
	TenantID  string          `json:"tenantId"`
	ProjectID string          `json:"projectId,omitempty"`
	Sequence  int64           `json:"sequence"`
	TS        string          `json:"ts"` // ISO-8601 UTC, RFC 3339 with milliseconds
	Kind      string          `json:"kind"`
	Version   string          `json:"version"`
	Payload   json.RawMessage `json:"payload"`
	Checksum  string          `json:"checksum"`
}

// Snapshot is agent_state_snapshot: the small state saved after each step,
// enough to resume the run without re-running finished nodes and to inspect
// step N. State holds pointers to artifacts, never the artifacts.
type Snapshot struct {
	RunID       string          `json:"runId"`
	StepOrdinal int             `json:"stepOrdinal"`
	NodeName    string          `json:"nodeName"`
	ResumeToken string          `json:"resumeToken"`
	State       json.RawMessage `json:"state"`
	CreatedAt   time.Time       `json:"createdAt"`
}

// OutboxRow is an event waiting for the relay (a run_events row with no
// published_at: each event is its own outbox entry).
type OutboxRow struct {
	RunID       string
	Sequence    int64
	EventID     string
	Subject     string
	Body        []byte // the event envelope, JSON
	PublishedAt *time.Time
}

// RunCounter is implemented by stores that count runs by status with one
// grouped query (for /metrics, instead of listing every run).
type RunCounter interface {
	CountRunsByStatus(ctx context.Context) (map[RunStatus]int, error)
}

// ParkedEvent is an outbox row the relay parked instead of publishing: its
// message can never be published (over the NATS server's max_payload, or
// rejected by the stream for good). Bytes is the envelope's size.
type ParkedEvent struct {
	RunID    string    `json:"runId"`
	Sequence int64     `json:"sequence"`
	EventID  string    `json:"eventId"`
	Subject  string    `json:"subject"`
	Bytes    int       `json:"bytes"`
	Reason   string    `json:"reason"`
	ParkedAt time.Time `json:"parkedAt"`
}

// ParkedLister is implemented by stores whose relay parks outbox rows: the
// parked rows, newest first, at most limit.
type ParkedLister interface {
	ParkedEvents(ctx context.Context, limit int) ([]ParkedEvent, error)
}

// Control is a control request recorded for a run and honored between nodes.
// A request is pending until the engine commits the step or status change it
// leads to: that commit (Step.Controls) marks it taken and names it in the
// commit's event (AppliedControl), so a crash in between leaves it pending and
// the resumed run honors it then.
type Control struct {
	// ID identifies the request: a ULID, so ids sort in request order. The
	// store assigns it (RequestControl returns it).
	ID    string `json:"requestId"`
	RunID string `json:"runId"`
	// Kind is one of the incoming control kinds (KindCancelRequested, …).
	Kind string `json:"kind"`
	// PolicyVersion is set for a policy switch.
	PolicyVersion int       `json:"policyVersion,omitempty"`
	RequestedAt   time.Time `json:"requestedAt"`
}

// Clock is time as an input, so tests drive it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().UTC().
func (SystemClock) Now() time.Time { return time.Now().UTC() }
