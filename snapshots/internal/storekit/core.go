package storekit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// Store is what each store is (snapshots/sqlite and snapshots/postgres
// assert it once): agent's ports, and the relay's capabilities declared
// in one value.
type Store interface {
	agent.Store
	agent.Leases
	agent.Tokens
	agent.Pruner
	agent.ArtifactIndex
	agent.ParkedLister
	agent.RunCounter
	agent.RunQueue
	agent.StoreClock
	snapshots.Capable
}

// Tx is a dialect's queries inside one of its write transactions.
type Tx interface {
	StepTx
	LeaseTx
}

// Driver is what a dialect gives the core: its write transactions (with
// the locking they promise) and its reads. Its clock is in its queries
// (StepRun.Now, LeaseTx.LeaseNow, CASStatus's updated_at).
type Driver interface {
	// InTx runs fn in one write transaction and commits it when fn returns
	// nil (else rolls it back); notify: fn writes outbox rows, wake the
	// relays once committed. The commit's own error is returned as it is.
	InTx(ctx context.Context, notify bool, fn func(ctx context.Context, tx Tx) error) error
	// Conflict names the unique constraint err reports.
	Conflict(err error) Conflict
	StatusCAS
	ArtifactQueries
	QueueQueries
	// RenewActive renews the active, unexpired lease (serial, token) to
	// expire ttl after the lease clock's now, in one statement, and returns
	// it renewed; found false when no such lease is active.
	RenewActive(ctx context.Context, serial string, token int64, ttl time.Duration) (l agent.Lease, found bool, err error)
	// ReleaseActive releases the active lease (serial, token) at the lease
	// clock's now and returns the rows it changed (0 or 1).
	ReleaseActive(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) (int64, error)
	// ParkRow parks the unpublished outbox row (runID, sequence): published
	// and parked at the store's now, for reason (clipped already).
	ParkRow(ctx context.Context, runID string, sequence int64, reason string) error
	// ParkedRows lists up to limit parked rows, the last parked first.
	ParkedRows(ctx context.Context, limit int) ([]agent.ParkedEvent, error)
	// StatusCounts counts the runs of each status.
	StatusCounts(ctx context.Context) ([]StatusCount, error)
	// KV reads key's value; found false when key is not set.
	KV(ctx context.Context, key string) (v []byte, found bool, err error)
}

// StatusCount is one status's count of runs.
type StatusCount struct {
	Status agent.RunStatus
	Runs   int
}

// Core is the store core both stores embed: agent.Store's CommitStep and
// SetStatus, agent.Leases' AcquireLease, agent.ArtifactIndex and
// agent.RunQueue's QueuedRuns, over the store's Driver. The rest of each
// store (its reads, the relay's outbox queries, tokens, pruning) is the
// dialect's own SQL.
type Core struct{ D Driver }

// CommitStep writes the step atomically: the CAS on runs.status (when
// StatusTo is set), the fence, the control requests, the events with their
// outbox rows, the snapshot and the artifacts; any failure writes none of
// it. Errors wrap agent.ErrNotFound (no such run), agent.ErrStatusConflict,
// agent.ErrSequenceTaken, agent.ErrLeaseLost (stale Fence),
// agent.ErrControlTaken, agent.ErrControlPending, ErrSequenceGap,
// ErrSnapshotTaken, ErrInvalid or agent.ErrInvalidArtifact (see the
// package-level CommitStep).
func (c Core) CommitStep(ctx context.Context, st agent.Step) error {
	evs, err := PrepareStep(st)
	if err != nil {
		return err
	}
	return c.D.InTx(ctx, len(evs) > 0, func(ctx context.Context, tx Tx) error {
		return CommitStep(ctx, tx, st, evs)
	})
}

// GetRun returns the run or an error wrapping agent.ErrNotFound (also for
// a run of a tenant sc does not see, so it is not disclosed);
// agent.ErrNoScope for the zero Scope.
func (c Core) GetRun(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error) {
	if err := sc.Valid(); err != nil {
		return agent.Run{}, err
	}
	r, found, err := c.D.RunByID(ctx, runID)
	if err != nil {
		return agent.Run{}, err
	}
	if !found || !sc.Sees(r.TenantID) {
		return agent.Run{}, RunNotSeen(runID)
	}
	return r, nil
}

// SetStatus is the compare-and-set UPDATE runs SET status = to WHERE status
// IN (from). Errors wrap agent.ErrStatusConflict (the run's status read
// again names the conflict), agent.ErrNotFound or ErrInvalid (no from or
// to).
func (c Core) SetStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) error {
	if len(from) == 0 || to == "" {
		return fmt.Errorf("%w: SetStatus needs from and to", snapshots.ErrInvalid)
	}
	n, err := c.D.CASStatus(ctx, runID, from, to)
	if err != nil || n == 1 {
		return err
	}
	r, err := c.GetRun(ctx, agent.Admin(), runID)
	if err != nil {
		return err
	}
	return fmt.Errorf("run %s is %s, not one of %v: %w", runID, r.Status, from, agent.ErrStatusConflict)
}

// AcquireLease implements agent.Leases.AcquireLease (see the package-level
// AcquireLease) in one write transaction; a unique violation found only at
// the commit is its agent error too.
func (c Core) AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if err := CheckLeaseRequest(device, holder, runID, ttl); err != nil {
		return agent.Lease{}, err
	}
	var l agent.Lease
	err := c.D.InTx(ctx, false, func(ctx context.Context, tx Tx) error {
		var err error
		l, err = AcquireLease(ctx, tx, device, holder, runID, ttl)
		return err
	})
	if err != nil {
		return agent.Lease{}, LeaseConflict(c.D.Conflict(err), err, device, runID)
	}
	return l, nil
}

// Artifacts implements agent.ArtifactIndex: nothing of a run sc does not
// see (agent.ErrNotFound, as for an unknown run).
func (c Core) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := c.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	return c.D.RunArtifacts(ctx, runID)
}

// Artifact implements agent.ArtifactIndex.
func (c Core) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	if _, err := c.GetRun(ctx, sc, runID); err != nil {
		return agent.Artifact{}, err
	}
	a, found, err := c.D.RunArtifact(ctx, runID, artifactID)
	if err == nil && !found {
		err = ArtifactNotFound(runID, artifactID)
	}
	return a, err
}

// ArtifactBlobsInUse implements agent.ArtifactIndex, asking the dialect in
// batches of MaxBlobsInUseQuery.
func (c Core) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	used := map[string]bool{}
	for batch := range slices.Chunk(sums, MaxBlobsInUseQuery) {
		in, err := c.D.SumsInUse(ctx, batch)
		if err != nil {
			return nil, err
		}
		for _, v := range in {
			used[v] = true
		}
	}
	return used, nil
}

// QueuedRuns implements agent.RunQueue.QueuedRuns.
func (c Core) QueuedRuns(ctx context.Context, q agent.QueueQuery) ([]agent.Run, error) {
	return QueuedRuns(ctx, c.D, q)
}

// RenewLease implements agent.Leases.RenewLease: ErrInvalid for ttl <= 0,
// agent.ErrLeaseLost when the lease is no longer active and unexpired.
func (c Core) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	if err := CheckRenew(serial, token, ttl); err != nil {
		return agent.Lease{}, err
	}
	l, found, err := c.D.RenewActive(ctx, serial, token, ttl)
	if err == nil && !found {
		err = LeaseLost(serial, token)
	}
	return l, err
}

// ReleaseLease implements agent.Leases.ReleaseLease: ErrInvalid without a
// reason, agent.ErrLeaseLost when the lease is not active.
func (c Core) ReleaseLease(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) error {
	if err := CheckRelease(serial, token, reason); err != nil {
		return err
	}
	n, err := c.D.ReleaseActive(ctx, serial, token, reason)
	if err == nil && n == 0 {
		err = LeaseLost(serial, token)
	}
	return err
}

// ParkOutbox implements snapshots.OutboxParker: the row (run, sequence)
// leaves the queue, parked with reason (redacted, at most MaxParkedReason
// bytes); a row already published or parked is left as is.
func (c Core) ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error {
	return ParkError(runID, sequence, c.D.ParkRow(ctx, runID, sequence, ClipReason(reason)))
}

// ParkedEvents implements agent.ParkedLister: up to limit (default 100)
// parked rows, the last parked first; an empty list, not nil, for none.
func (c Core) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	out, err := c.D.ParkedRows(ctx, ParkedLimit(limit))
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []agent.ParkedEvent{}
	}
	return out, nil
}

// CountRunsByStatus implements agent.RunCounter.
func (c Core) CountRunsByStatus(ctx context.Context) (map[agent.RunStatus]int, error) {
	counts, err := c.D.StatusCounts(ctx)
	if err != nil {
		return nil, err
	}
	by := make(map[agent.RunStatus]int, len(counts))
	for _, sc := range counts {
		by[sc.Status] = sc.Runs
	}
	return by, nil
}

// GetKV implements agent.Store.GetKV: an error wrapping agent.ErrNotFound
// for a key not set; a value stored empty is an empty, non-nil slice.
func (c Core) GetKV(ctx context.Context, key string) ([]byte, error) {
	v, found, err := c.D.KV(ctx, key)
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, fmt.Errorf("kv %q: %w", key, agent.ErrNotFound)
	case v == nil:
		return []byte{}, nil
	}
	return v, nil
}

// ScanStatusCount scans a (status, count) row.
func ScanStatusCount(r RowScanner) (StatusCount, error) {
	var (
		sc     StatusCount
		status string
	)
	err := r.Scan(&status, &sc.Runs)
	sc.Status = agent.RunStatus(status)
	return sc, err
}
