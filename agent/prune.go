package agent

import (
	"context"
	"time"
)

// Pruner is the retention port of a store: it deletes ended runs and what
// only they refer to. Both stores (embedded SQLite, Postgres) implement it
// and pass snapshots/storetest's prune suite.
type Pruner interface {
	// PruneRuns deletes, in one transaction, up to limit runs (oldest last
	// status change first) that are terminal (FINISHED, FAILED, CANCELED)
	// and whose last status change (runs.updated_at) is before cutoff, each
	// with its events, outbox rows, state snapshots, control rows, evidence
	// artifact rows and ended device leases. A run that still has an unpublished outbox row, or an
	// active device lease, is never deleted: it is counted in Held and kept
	// until the relay published its rows (or its lease ended). Concurrent
	// callers (several daemons of a fleet, the CLI beside a daemon) are
	// safe: each run is deleted once, the others skip it. limit <= 0 means
	// 1000. Errors: the store's, with nothing deleted.
	PruneRuns(ctx context.Context, cutoff time.Time, limit int) (PruneResult, error)
}

// PruneResult counts what one PruneRuns call (or a cleaner's pass, summed)
// deleted, in rows.
type PruneResult struct {
	Runs      int64 `json:"runs"`
	Events    int64 `json:"events"`
	Outbox    int64 `json:"outbox"`
	Snapshots int64 `json:"snapshots"`
	Controls  int64 `json:"controls"`
	Leases    int64 `json:"leases"`
	// Held counts terminal runs older than the cutoff that were kept
	// because an outbox row of theirs is still unpublished (or a lease of
	// theirs is still active); HeldRuns names up to 100 of them.
	Held     int64    `json:"held"`
	HeldRuns []string `json:"heldRuns,omitempty"`
	// Artifacts counts cached artifact files deleted (the cleaner's pass).
	Artifacts int64 `json:"artifacts"`
	// EvidenceRows counts evidence artifact rows deleted with their runs;
	// EvidenceBlobs the evidence blobs no row named any more (the
	// cleaner's pass).
	EvidenceRows  int64 `json:"evidenceRows"`
	EvidenceBlobs int64 `json:"evidenceBlobs"`
}

// Add sums o into r (Held and HeldRuns are replaced: each call counts them
// anew over the whole store).
func (r *PruneResult) Add(o PruneResult) {
	r.Runs += o.Runs
	r.Events += o.Events
	r.Outbox += o.Outbox
	r.Snapshots += o.Snapshots
	r.Controls += o.Controls
	r.Leases += o.Leases
	r.Artifacts += o.Artifacts
	r.EvidenceRows += o.EvidenceRows
	r.EvidenceBlobs += o.EvidenceBlobs
	r.Held, r.HeldRuns = o.Held, o.HeldRuns
}
