package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// The store core: the transaction logic of a step commit, the status
// compare-and-set, a lease acquisition, the artifact index and the run queue
// live here once; each dialect (snapshots/sqlite, snapshots/postgres) is a
// driver of the queries below, run in the transaction it opened, with its
// own clock (River's layout: one engine, one narrow driver per database,
// one driver test suite, snapshots/storetest).

// Conflict names the unique constraint a write violated, as a dialect's
// driver reads it from its database's error (Conflicts).
type Conflict int

const (
	NoConflict          Conflict = iota
	ConflictSequence             // run_events (run_id, sequence)
	ConflictSnapshot             // agent_state_snapshot (run_id, step_ordinal)
	ConflictArtifact             // artifacts primary key
	ConflictLeaseDevice          // one active lease per device
	ConflictLeaseRun             // one active lease per run
)

// StepRun is what a step commit reads of its run, with the run locked
// against the run's other commits and control requests: the tenant, the
// status, the last event sequence (0: none), the step ordinal of its latest
// snapshot (-1: none) and the time the commit stamps (updated_at, taken_at,
// a snapshot's or artifact's default created_at).
type StepRun struct {
	Tenant       string
	Status       agent.RunStatus
	Last         int64
	LastSnapshot int
	Now          time.Time
}

// StepSnapshot is a step's snapshot as InsertEvents writes it on the step's
// last event row (migration 00014), created at Created.
type StepSnapshot struct {
	agent.Snapshot
	Created time.Time
}

// StepTx is a dialect's queries of one step commit, inside the transaction
// the dialect opened. Times are UTC, microseconds (StoreTime).
type StepTx interface {
	// LockRun reads the run (StepRun); found false when there is none. Its
	// LastSnapshot is the step ordinal of the snapshot on the run's last
	// event row carrying one, or of agent_state_snapshot's highest, whichever
	// is higher: snapshots are committed in ascending step order (CommitStep
	// refuses any other), so that is the run's highest without reading its
	// every row.
	LockRun(ctx context.Context, runID string) (r StepRun, found bool, err error)
	// FenceLease reads the lease (serial, token), locked so that a takeover
	// waits for the commit, and the lease clock's now; found false when
	// there is no such lease.
	FenceLease(ctx context.Context, serial string, token int64) (l agent.Lease, found bool, now time.Time, err error)
	// TakeControls marks the run's pending requests ids taken at now and
	// returns how many it marked.
	TakeControls(ctx context.Context, runID string, ids []string, now time.Time) (int64, error)
	// PendingControls counts the run's requests not taken.
	PendingControls(ctx context.Context, runID string) (int, error)
	// UpdateStatus sets the run's status from (its current one) to to.
	UpdateStatus(ctx context.Context, runID string, from, to agent.RunStatus, now time.Time) error
	// UpdatePolicyVersion sets the run's policy version.
	UpdatePolicyVersion(ctx context.Context, runID string, version int) error
	// InsertEvents writes the events (run_events, each its own outbox entry,
	// unpublished) in sequence order, each with the step's ordinal, and the
	// step's snapshot on the last one (migration 00014); sn nil: no snapshot
	// in the step.
	InsertEvents(ctx context.Context, evs []PreparedEvent, sn *StepSnapshot) error
	// InsertSnapshot writes sn of runID, created at created, into
	// agent_state_snapshot: the snapshot of a step without events.
	InsertSnapshot(ctx context.Context, runID string, sn agent.Snapshot, created time.Time) error
	// InsertArtifact writes a of runID and tenant, created at created.
	InsertArtifact(ctx context.Context, runID, tenant string, a agent.Artifact, created time.Time) error
	// Conflict names the unique constraint err reports (NoConflict: none).
	Conflict(err error) Conflict
}

// CommitStep writes st in tx (agent.Store.CommitStep): the run's checks
// (CheckStepAgainstRun), the fence, the control requests, the status CAS,
// the policy version, the events, the snapshot and the artifacts, in that
// order. evs are PrepareStep's. Any error leaves the caller to roll tx
// back; the errors wrap the agent and snapshots errors CommitStep names.
func CommitStep(ctx context.Context, tx StepTx, st agent.Step, evs []PreparedEvent) error {
	run, found, err := tx.LockRun(ctx, st.RunID)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("run %s: %w", st.RunID, agent.ErrNotFound)
	}
	if err := CheckStepAgainstRun(st, evs, run.Tenant, run.Status, run.Last); err != nil {
		return err
	}
	if err := checkFence(ctx, tx, st.Fence); err != nil {
		return err
	}
	if err := takeControl(ctx, tx, st, run.Now); err != nil {
		return err
	}
	if err := updateRun(ctx, tx, st, run); err != nil {
		return err
	}
	sn, err := stepSnapshot(st, run)
	if err != nil {
		return err
	}
	if len(evs) > 0 {
		if err := tx.InsertEvents(ctx, evs, sn); err != nil {
			return eventConflict(tx.Conflict(err), st.RunID, evs, err)
		}
	} else if err := insertSnapshot(ctx, tx, st.RunID, sn); err != nil {
		return err
	}
	for _, a := range st.Artifacts {
		err := tx.InsertArtifact(ctx, st.RunID, run.Tenant, a, ArtifactCreated(a, run.Now))
		if tx.Conflict(err) == ConflictArtifact {
			return fmt.Errorf("%w: artifact id %s already recorded", agent.ErrInvalidArtifact, a.ArtifactID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFence checks the step's fence (none: nothing to check) against its
// lease, read locked.
func checkFence(ctx context.Context, tx StepTx, f *agent.Fence) error {
	if f == nil {
		return nil
	}
	l, found, now, err := tx.FenceLease(ctx, f.Serial, f.Token)
	if err != nil {
		return err
	}
	return CheckFence(f, l, found, now)
}

// updateRun writes the step's status CAS and policy version to its run.
func updateRun(ctx context.Context, tx StepTx, st agent.Step, run StepRun) error {
	if st.StatusTo != "" {
		// The run is locked since LockRun, so the status read there is
		// current; the dialect's UPDATE repeats it as its own CAS.
		if err := tx.UpdateStatus(ctx, st.RunID, run.Status, st.StatusTo, run.Now); err != nil {
			return err
		}
	}
	if st.PolicyVersion > 0 {
		return tx.UpdatePolicyVersion(ctx, st.RunID, st.PolicyVersion)
	}
	return nil
}

// stepSnapshot is the step's snapshot (nil: none), created at its
// CreatedAt or now. Its step ordinal must be above the run's latest
// snapshot's (ErrSnapshotTaken otherwise): a run's snapshots are stored on
// their steps' event rows, with no key of their own (migration 00014), and
// committed in step order is how one is known to be unique from the run's
// latest alone. The engine numbers its steps upwards (runner.step + 1).
func stepSnapshot(st agent.Step, run StepRun) (*StepSnapshot, error) {
	sn := st.Snapshot
	if sn == nil {
		return nil, nil
	}
	if sn.StepOrdinal <= run.LastSnapshot {
		return nil, fmt.Errorf("run %s step %d (latest snapshot: step %d): %w", st.RunID, sn.StepOrdinal, run.LastSnapshot, snapshots.ErrSnapshotTaken)
	}
	created := run.Now
	if !sn.CreatedAt.IsZero() {
		created = StoreTime(sn.CreatedAt)
	}
	return &StepSnapshot{Snapshot: *sn, Created: created}, nil
}

// insertSnapshot writes the snapshot of a step without events (none:
// nothing) into agent_state_snapshot.
func insertSnapshot(ctx context.Context, tx StepTx, runID string, sn *StepSnapshot) error {
	if sn == nil {
		return nil
	}
	err := tx.InsertSnapshot(ctx, runID, sn.Snapshot, sn.Created)
	if tx.Conflict(err) == ConflictSnapshot {
		return fmt.Errorf("run %s step %d: %w", runID, sn.StepOrdinal, snapshots.ErrSnapshotTaken)
	}
	return err
}

// eventConflict is InsertEvents' error err as the step commit returns it.
// The only unique key an event insert can violate is (run_id, sequence):
// event_id has none since migration 00014.
func eventConflict(c Conflict, runID string, evs []PreparedEvent, err error) error {
	span := fmt.Sprintf("run %s sequences %d-%d", runID, evs[0].Sequence, evs[len(evs)-1].Sequence)
	if c == ConflictSequence {
		return fmt.Errorf("%s: %v: %w", span, err, agent.ErrSequenceTaken)
	}
	return err
}

// takeControl marks the step's requests taken (Step.Controls) and checks
// Step.NoOtherControl. The run is locked, so no request of the run is
// recorded while the step commits.
func takeControl(ctx context.Context, tx StepTx, st agent.Step, now time.Time) error {
	if len(st.Controls) > 0 {
		n, err := tx.TakeControls(ctx, st.RunID, st.Controls, now)
		if err != nil {
			return err
		}
		if n != int64(len(st.Controls)) {
			return fmt.Errorf("run %s: %d of %d control requests not pending: %w", st.RunID, int64(len(st.Controls))-n, len(st.Controls), agent.ErrControlTaken)
		}
	}
	if st.NoOtherControl {
		other, err := tx.PendingControls(ctx, st.RunID)
		if err != nil {
			return err
		}
		if other > 0 {
			return fmt.Errorf("run %s: %d control requests pending: %w", st.RunID, other, agent.ErrControlPending)
		}
	}
	return nil
}

// StatusCAS is a dialect's compare-and-set of a run's status.
type StatusCAS interface {
	// CASStatus is UPDATE runs SET status = to WHERE run_id AND status IN
	// (from), stamping updated_at with the dialect's clock; it returns the
	// rows updated (0 or 1).
	CASStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) (int64, error)
	// RunByID reads the run; found false when there is none.
	RunByID(ctx context.Context, runID string) (r agent.Run, found bool, err error)
}
