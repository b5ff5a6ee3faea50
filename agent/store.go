package agent

import (
	"context"
	"errors"
)

// ErrNotFound is returned when a run, snapshot or key does not exist.
var ErrNotFound = errors.New("not found")

// ErrStatusConflict is returned when a compare-and-set on runs.status finds
// another status than expected: someone else already moved the run.
var ErrStatusConflict = errors.New("run status changed concurrently")

// Step is what the orchestrator commits after each node, atomically: the
// node's events (sequences already assigned, contiguous after the run's last),
// one outbox row per event, the state snapshot, and optionally a status
// transition by compare-and-set. If the CAS fails nothing is written and
// CommitStep returns ErrStatusConflict; if a sequence already exists, it
// returns an error wrapping ErrSequenceTaken and writes nothing.
type Step struct {
	RunID    string
	Events   []Event
	Snapshot *Snapshot
	// StatusFrom/StatusTo: when StatusTo is set, runs.status must be one of
	// StatusFrom (compare-and-set).
	StatusFrom []RunStatus
	StatusTo   RunStatus
	// Fence, when set, makes the commit conditional on that device lease
	// being active and unexpired (ErrLeaseLost otherwise, nothing written).
	Fence *Fence
	// Controls are the ids of the control requests this step honors. The
	// commit marks them taken; if one of them is not pending any more (taken
	// by another commit, or not of this run) it returns ErrControlTaken and
	// writes nothing, so a request is honored by exactly one commit.
	Controls []string
	// NoOtherControl makes the commit fail with ErrControlPending (nothing
	// written) when the run has a pending request not in Controls: a terminal
	// transition must not strand a request the engine has not seen.
	NoOtherControl bool
	// PolicyVersion, when > 0, becomes the run row's policy_version: the
	// version in force after the policy switch this step takes, so that
	// run lists show what the run's detail and events say.
	PolicyVersion int
	// Artifacts are evidence rows (ArtifactIndex) written in the step's
	// transaction; their blobs are already in the BlobStore. A row that
	// breaks CheckArtifact fails the commit with ErrInvalidArtifact and
	// nothing is written.
	Artifacts []Artifact
}

// ErrControlTaken is returned by CommitStep when a request in Step.Controls
// is no longer pending: another engine honored it (the run has two writers).
var ErrControlTaken = errors.New("control request already taken")

// ErrControlPending is returned by CommitStep with Step.NoOtherControl when a
// request the step does not honor is pending; the engine reads it and retries.
var ErrControlPending = errors.New("another control request is pending")

// MaxPendingControl bounds a run's pending control requests: beyond it
// RequestControl refuses with ErrControlBacklog. The engine takes all pending
// requests at each boundary, so only a flood reaches it; the bound also keeps
// a flood from starving the run's terminal commit (Step.NoOtherControl).
const MaxPendingControl = 64

// ErrControlBacklog is returned by RequestControl when the run already has
// MaxPendingControl pending requests (HTTP 429); nothing is recorded.
var ErrControlBacklog = errors.New("too many pending control requests")

// ErrRunTerminal is returned by RequestControl for a run that already ended
// (CANCELED, FINISHED, FAILED): nothing is recorded.
var ErrRunTerminal = errors.New("run already ended")

// ErrSequenceTaken means run_events(run_id, sequence) would be duplicated.
var ErrSequenceTaken = errors.New("event sequence already taken")

// RunFilter narrows ListRuns.
type RunFilter struct {
	Status []RunStatus
	Serial string
	// Limit caps the runs returned (<= 0: no cap).
	Limit int
	// After, when set, lists only the runs after it in ListRuns' order
	// (older, or as old with a smaller run id): the next page after a page
	// that ended at After (keyset pagination; RunKey).
	After *RunKey
}

// Store is the persistence port: the embedded store (one file) on a single
// host, Postgres in a fleet. Every implementation passes snapshots/storetest.
//
// Every read of runs, events and snapshots takes the caller's Scope: a
// tenant scope sees its tenant's runs only (another tenant's run is
// ErrNotFound, exactly like an unknown one; its events and snapshots are not
// found either), Admin() sees all, and the zero Scope is refused with an
// error wrapping ErrNoScope.
type Store interface {
	CreateRun(ctx context.Context, r Run) error
	GetRun(ctx context.Context, sc Scope, runID string) (Run, error)
	// ListRuns returns the runs sc sees that match f, newest first
	// (CreatedAt, then RunID, descending: RunKey order).
	ListRuns(ctx context.Context, sc Scope, f RunFilter) ([]Run, error)
	// CommitStep writes a Step in one transaction (see Step).
	CommitStep(ctx context.Context, s Step) error
	// LastSequence is the highest event sequence of the run (0 when none).
	LastSequence(ctx context.Context, runID string) (int64, error)
	// Events returns the run's events with sequence > after, in order
	// (none for a run sc does not see).
	Events(ctx context.Context, sc Scope, runID string, after int64) ([]Event, error)
	// Snapshot returns step N's snapshot; LatestSnapshot the highest step's.
	Snapshot(ctx context.Context, sc Scope, runID string, stepOrdinal int) (Snapshot, error)
	LatestSnapshot(ctx context.Context, sc Scope, runID string) (Snapshot, error)
	// SetStatus moves runs.status from one of from to to (compare-and-set).
	SetStatus(ctx context.Context, runID string, from []RunStatus, to RunStatus) error
	// RequestControl records a control request durably (committed when it
	// returns) and returns it with its ID and RequestedAt. A cancel also
	// moves runs.status from PENDING, RUNNING or PAUSED to CANCELED_REQUESTED
	// in the same transaction. Errors: ErrNotFound, ErrRunTerminal (the run
	// ended first; nothing recorded), ErrControlBacklog, an invalid kind.
	RequestControl(ctx context.Context, c Control) (Control, error)
	// PendingControl returns the run's requests not yet taken, in request
	// order. Reading takes nothing: a request is taken by the CommitStep that
	// honors it (Step.Controls).
	PendingControl(ctx context.Context, runID string) ([]Control, error)
	// Unpublished returns up to limit outbox rows not yet published, ordered by
	// (run, sequence); MarkPublished sets published_at.
	Unpublished(ctx context.Context, limit int) ([]OutboxRow, error)
	MarkPublished(ctx context.Context, runID string, sequence int64) error
	// GetKV/PutKV keep small agent state across restarts (Appium session ids
	// per device, provisioning verification cache). GetKV returns ErrNotFound.
	GetKV(ctx context.Context, key string) ([]byte, error)
	PutKV(ctx context.Context, key string, value []byte) error
	Close() error
}

// Publisher is what the outbox relay publishes to (NATS JetStream); msgID
// is the eventId, so a re-publish is deduplicated.
type Publisher interface {
	Publish(ctx context.Context, subject, msgID string, body []byte) error
}
