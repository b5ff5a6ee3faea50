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
}

// ErrSequenceTaken means run_events(run_id, sequence) would be duplicated.
var ErrSequenceTaken = errors.New("event sequence already taken")

// RunFilter narrows ListRuns.
type RunFilter struct {
	Status []RunStatus
	Serial string
	// TenantID, when set, keeps only that tenant's runs (a tenant's API token).
	TenantID string
	Limit    int
}

// Store is the persistence port: the embedded store (one file) on a single
// host, Postgres in a fleet. Every implementation passes snapshots/storetest.
type Store interface {
	CreateRun(ctx context.Context, r Run) error
	GetRun(ctx context.Context, runID string) (Run, error)
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// CommitStep writes a Step in one transaction (see Step).
	CommitStep(ctx context.Context, s Step) error
	// LastSequence is the highest event sequence of the run (0 when none).
	LastSequence(ctx context.Context, runID string) (int64, error)
	// Events returns the run's events with sequence > after, in order.
	Events(ctx context.Context, runID string, after int64) ([]Event, error)
	// Snapshot returns step N's snapshot; LatestSnapshot the highest step's.
	Snapshot(ctx context.Context, runID string, stepOrdinal int) (Snapshot, error)
	LatestSnapshot(ctx context.Context, runID string) (Snapshot, error)
	// SetStatus moves runs.status from one of from to to (compare-and-set).
	SetStatus(ctx context.Context, runID string, from []RunStatus, to RunStatus) error
	// RequestControl records a control request; TakeControl returns and
	// consumes the run's pending requests in the order they were made.
	RequestControl(ctx context.Context, c Control) error
	TakeControl(ctx context.Context, runID string) ([]Control, error)
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
