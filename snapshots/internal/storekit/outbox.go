package storekit

import (
	"context"
	"fmt"
	"github.com/screengraph/screengraph-agent/agent"
)

// MaxParkedReason bounds a stored reason (a publisher's error text).
const MaxParkedReason = 512

func ClipReason(s string) string {
	s = agent.RedactString(s)
	if len(s) > MaxParkedReason {
		s = s[:MaxParkedReason]
	}
	return s
}

// ParkError is a failed park of the outbox row (runID, sequence).
func ParkError(runID string, sequence int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
}

// ParkedLimit is ParkedEvents' limit: 100 when unset.
func ParkedLimit(limit int) int {
	if limit <= 0 {
		return 100
	}
	return limit
}

// QueueQueries are a dialect's reads of the run queue (agent.RunQueue).
type QueueQueries interface {
	// QueuedByName returns, for each device name of names (normalized as
	// agent.RunQueue says), up to tenants tenants' per oldest PENDING runs.
	QueuedByName(ctx context.Context, names []string, per, tenants int) ([]agent.Run, error)
	// OldestPending returns the n oldest PENDING runs.
	OldestPending(ctx context.Context, n int) ([]agent.Run, error)
	// OldestStarted returns the n oldest RUNNING, PAUSED or
	// CANCELED_REQUESTED runs.
	OldestStarted(ctx context.Context, n int) ([]agent.Run, error)
}

// QueuedRuns is agent.RunQueue.QueuedRuns over d: PerTenant defaults to 1,
// MaxTenants to 64; the runs oldest first, each once.
func QueuedRuns(ctx context.Context, d QueueQueries, q agent.QueueQuery) ([]agent.Run, error) {
	per, tenants := q.PerTenant, q.MaxTenants
	if per <= 0 {
		per = 1
	}
	if tenants <= 0 {
		tenants = 64
	}
	var out []agent.Run
	if len(q.Names) > 0 {
		runs, err := d.QueuedByName(ctx, q.Names, per, tenants)
		if err != nil {
			return nil, fmt.Errorf("queued runs: %w", err)
		}
		out = runs
	}
	if q.Oldest > 0 {
		runs, err := d.OldestPending(ctx, q.Oldest)
		if err != nil {
			return nil, fmt.Errorf("oldest queued runs: %w", err)
		}
		out = append(out, runs...)
	}
	if q.Started > 0 {
		runs, err := d.OldestStarted(ctx, q.Started)
		if err != nil {
			return nil, fmt.Errorf("started runs: %w", err)
		}
		out = append(out, runs...)
	}
	return OldestFirst(out), nil
}

// Queue statements both dialects run as they are: the oldest PENDING runs
// and the oldest started ones (cols: the dialect's run columns, then one
// placeholder for the limit).
func SQLOldestPending(cols, limit string) string {
	return `SELECT ` + cols + ` FROM runs WHERE status = 'PENDING' ORDER BY created_at, run_id LIMIT ` + limit
}

func SQLOldestStarted(cols, limit string) string {
	return `SELECT ` + cols + ` FROM runs WHERE status IN ('RUNNING', 'PAUSED', 'CANCELED_REQUESTED') ORDER BY created_at, run_id LIMIT ` + limit
}
