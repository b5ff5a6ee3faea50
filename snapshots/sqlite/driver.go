package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// The SQLite driver of the store core (storekit): the queries of a step
// commit and a lease acquisition in the group commit's transaction (which
// holds the write lock since BEGIN IMMEDIATE, so nothing interleaves), and
// the reads of the artifact index and the run queue. Its clock is the
// Options.Clock (one host).

// sqliteConflicts: the text SQLite's constraint error names for each
// unique constraint ("UNIQUE constraint failed: run_events.run_id,
// run_events.sequence").
var sqliteConflicts = []struct {
	target string
	c      storekit.Conflict
}{
	{"run_events.sequence", storekit.ConflictSequence},
	{"agent_state_snapshot", storekit.ConflictSnapshot},
	{"artifacts.artifact_id", storekit.ConflictArtifact},
	{"device_leases.device", storekit.ConflictLeaseDevice},
	{"device_leases.run_id", storekit.ConflictLeaseRun},
}

// conflict implements storekit's Conflict for SQLite errors.
func conflict(err error) storekit.Conflict {
	var se *sqlitedrv.Error
	// SQLITE_CONSTRAINT is 19; extended codes keep it in the low byte.
	if err == nil || !errors.As(err, &se) || se.Code()&0xff != 19 {
		return storekit.NoConflict
	}
	for _, k := range sqliteConflicts {
		if strings.Contains(se.Error(), k.target) {
			return k.c
		}
	}
	return storekit.NoConflict
}

// writeTx is the core's StepTx and LeaseTx in one transaction of the
// writer; now is the time the group's write read from the clock.
type writeTx struct {
	s   *Store
	tx  *sql.Tx
	now time.Time
}

func (w writeTx) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	return w.s.ws.tx(ctx, w.tx, q)
}

func (w writeTx) Conflict(err error) storekit.Conflict { return conflict(err) }

// LockRun implements storekit.StepTx: the write lock is held already.
func (w writeTx) LockRun(ctx context.Context, runID string) (storekit.StepRun, bool, error) {
	r := storekit.StepRun{Now: w.now}
	q, err := w.stmt(ctx, sqlStepRun)
	if err != nil {
		return r, false, err
	}
	var status string
	err = q.QueryRowContext(ctx, runID).Scan(&r.Tenant, &status, &r.Last, &r.LastSnapshot)
	r.Status = agent.RunStatus(status)
	return r, err == nil, noRows(err)
}

// FenceLease implements storekit.StepTx.
func (w writeTx) FenceLease(ctx context.Context, serial string, token int64) (agent.Lease, bool, time.Time, error) {
	q, err := w.stmt(ctx, sqlFenceLease)
	if err != nil {
		return agent.Lease{}, false, w.now, err
	}
	l, err := scanLease(q.QueryRowContext(ctx, serial, token))
	return l, err == nil, w.now, noRows(err)
}

// TakeControls implements storekit.StepTx.
func (w writeTx) TakeControls(ctx context.Context, runID string, ids []string, now time.Time) (int64, error) {
	args := append([]any{storekit.FmtTime(now), runID}, storekit.AnySlice(ids)...)
	res, err := w.tx.ExecContext(ctx, `UPDATE run_control SET taken_at = ? WHERE run_id = ? AND taken_at IS NULL AND id IN (?`+strings.Repeat(`, ?`, len(ids)-1)+`)`, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PendingControls implements storekit.StepTx.
func (w writeTx) PendingControls(ctx context.Context, runID string) (int, error) {
	var n int
	err := w.tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM run_control WHERE run_id = ? AND taken_at IS NULL`, runID).Scan(&n)
	return n, err
}

// UpdateStatus implements storekit.StepTx.
func (w writeTx) UpdateStatus(ctx context.Context, runID string, from, to agent.RunStatus, now time.Time) error {
	return w.exec(ctx, sqlStepStatus, string(to), storekit.FmtTime(now), runID, string(from))
}

// UpdatePolicyVersion implements storekit.StepTx.
func (w writeTx) UpdatePolicyVersion(ctx context.Context, runID string, version int) error {
	_, err := w.tx.ExecContext(ctx, `UPDATE runs SET policy_version = ? WHERE run_id = ?`, version, runID)
	return err
}

// InsertEvents implements storekit.StepTx: an event row each (the envelope,
// the event's one copy, unpublished: its own outbox entry, migration 00012),
// the last carrying the step's snapshot (00014), through the writer's
// prepared statements.
func (w writeTx) InsertEvents(ctx context.Context, evs []storekit.PreparedEvent, sn *storekit.StepSnapshot) error {
	var step any
	if sn != nil {
		step = sn.StepOrdinal
	}
	insEv, err := w.stmt(ctx, sqlInsertEvent)
	if err != nil {
		return err
	}
	last := len(evs) - 1
	for _, e := range evs[:last] {
		if _, err := insEv.ExecContext(ctx, e.RunID, e.Sequence, e.EventID, step, string(e.Envelope)); err != nil {
			return err
		}
	}
	e := evs[last]
	if sn == nil {
		_, err = insEv.ExecContext(ctx, e.RunID, e.Sequence, e.EventID, step, string(e.Envelope))
		return err
	}
	return w.exec(ctx, sqlInsertEventSnapshot, e.RunID, e.Sequence, e.EventID, step, string(e.Envelope),
		sn.NodeName, sn.ResumeToken, snapshotState(sn.State), storekit.FmtTime(sn.Created))
}

// snapshotState is a snapshot's state as its column holds it: JSON text,
// NULL for none.
func snapshotState(state []byte) any {
	if state == nil {
		return nil
	}
	return string(state)
}

// InsertSnapshot implements storekit.StepTx.
func (w writeTx) InsertSnapshot(ctx context.Context, runID string, sn agent.Snapshot, created time.Time) error {
	return w.exec(ctx, sqlInsertSnapshot, runID, sn.StepOrdinal, sn.NodeName, sn.ResumeToken, snapshotState(sn.State), storekit.FmtTime(created))
}

// InsertArtifact implements storekit.StepTx.
func (w writeTx) InsertArtifact(ctx context.Context, runID, tenant string, a agent.Artifact, created time.Time) error {
	return w.exec(ctx, sqlInsertArtifact, a.ArtifactID, runID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, storekit.FmtTime(created))
}

// exec runs the prepared statement q with args.
func (w writeTx) exec(ctx context.Context, q string, args ...any) error {
	st, err := w.stmt(ctx, q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, args...)
	return err
}

// LockDevice implements storekit.LeaseTx: the write lock is held already.
func (w writeTx) LockDevice(context.Context, string) error { return nil }

// ActiveLease implements storekit.LeaseTx.
func (w writeTx) ActiveLease(ctx context.Context, device string) (agent.Lease, bool, error) {
	return w.leaseRow(ctx, sqlLeaseCurrent, device)
}

// RunLeaseElsewhere implements storekit.LeaseTx.
func (w writeTx) RunLeaseElsewhere(ctx context.Context, runID, device string) (agent.Lease, bool, error) {
	return w.leaseRow(ctx, sqlLeaseRunElsewhere, runID, device)
}

func (w writeTx) leaseRow(ctx context.Context, q string, args ...any) (agent.Lease, bool, error) {
	st, err := w.stmt(ctx, q)
	if err != nil {
		return agent.Lease{}, false, err
	}
	l, err := scanLease(st.QueryRowContext(ctx, args...))
	return l, err == nil, noRows(err)
}

// LeaseNow implements storekit.LeaseTx: the store's clock, read under the
// write lock.
func (w writeTx) LeaseNow(context.Context) (time.Time, error) { return w.s.clock.Now(), nil }

// RenewLeaseRow implements storekit.LeaseTx.
func (w writeTx) RenewLeaseRow(ctx context.Context, token int64, now, expires time.Time) error {
	return w.exec(ctx, sqlLeaseRenewOwn, storekit.FmtTime(now), storekit.FmtTime(expires), token)
}

// EndLease implements storekit.LeaseTx.
func (w writeTx) EndLease(ctx context.Context, token int64, now time.Time, reason agent.LeaseReleaseReason) error {
	return w.exec(ctx, sqlLeaseEnd, storekit.FmtTime(now), string(reason), token)
}

// InsertLease implements storekit.LeaseTx: the token is the row's
// AUTOINCREMENT id.
func (w writeTx) InsertLease(ctx context.Context, l agent.Lease) (int64, error) {
	ins, err := w.stmt(ctx, sqlLeaseInsert)
	if err != nil {
		return 0, err
	}
	res, err := ins.ExecContext(ctx, l.Device, l.Serial, l.Holder, l.RunID, storekit.FmtTime(l.AcquiredAt), storekit.FmtTime(l.RenewedAt), storekit.FmtTime(l.ExpiresAt))
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// noRows is err without sql.ErrNoRows (a row not found is the caller's
// found == false).
func noRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// driver is the core's Driver: write transactions through the group commit
// (groupcommit.go), reads over the read pool.
type driver struct{ s *Store }

// InTx implements storekit.Driver: fn runs in the group's IMMEDIATE
// transaction under a SAVEPOINT of its own, with the clock read once the
// write lock is held.
func (d driver) InTx(ctx context.Context, notify bool, fn func(ctx context.Context, tx storekit.Tx) error) error {
	if _, err := d.s.writer(); err != nil {
		return err
	}
	return d.s.group.do(ctx, notify, func(ctx context.Context, tx *sql.Tx) error {
		return fn(ctx, writeTx{s: d.s, tx: tx, now: storekit.StoreTime(d.s.clock.Now())})
	})
}

func (d driver) Conflict(err error) storekit.Conflict { return conflict(err) }

// CASStatus implements storekit.StatusCAS in a group commit.
func (d driver) CASStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) (int64, error) {
	if _, err := d.s.writer(); err != nil {
		return 0, err
	}
	var n int64
	err := d.s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		args := append([]any{string(to), storekit.FmtTime(d.s.clock.Now()), runID}, storekit.StatusStrings(from)...)
		res, err := tx.ExecContext(ctx, `UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ? AND status IN (?`+strings.Repeat(`, ?`, len(from)-1)+`)`, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// RunArtifacts implements storekit.ArtifactQueries.
func (d driver) RunArtifacts(ctx context.Context, runID string) ([]agent.Artifact, error) {
	return collect(scanArtifact)(d.s.query(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = ?`+storekit.ArtifactOrder, runID))
}

// RunArtifact implements storekit.ArtifactQueries.
func (d driver) RunArtifact(ctx context.Context, runID, artifactID string) (agent.Artifact, bool, error) {
	a, err := scanArtifact(d.s.queryRow(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = ? AND artifact_id = ?`, runID, artifactID))
	return a, err == nil, noRows(err)
}

// SumsInUse implements storekit.ArtifactQueries (not through the statement
// cache: the placeholder count varies).
func (d driver) SumsInUse(ctx context.Context, sums []string) ([]string, error) {
	in := `(?` + strings.Repeat(`, ?`, len(sums)-1) + `)`
	return collect(storekit.ScanString)(d.s.r.QueryContext(ctx, `SELECT DISTINCT sha256 FROM artifacts WHERE sha256 IN `+in, storekit.AnySlice(sums)...))
}

// QueuedByName implements storekit.QueueQueries: per name, the tenants with
// queued runs one index probe each (runs_queue_idx), then each tenant's
// oldest.
func (d driver) QueuedByName(ctx context.Context, names []string, per, tenants int) ([]agent.Run, error) {
	var out []agent.Run
	seen := map[string]bool{}
	for _, name := range names {
		var norm string
		if err := d.s.queryRow(ctx, `SELECT lower(replace(trim(?), ' ', '_'))`, name).Scan(&norm); err != nil {
			return nil, err
		}
		if seen[norm] {
			continue
		}
		seen[norm] = true
		tenant := ""
		for range tenants {
			var t sql.NullString
			if err := d.s.queryRow(ctx, `SELECT min(tenant_id) FROM runs WHERE status = 'PENDING' AND `+sqlQueueName+` = ? AND tenant_id > ?`, norm, tenant).Scan(&t); err != nil {
				return nil, err
			}
			if !t.Valid {
				break
			}
			tenant = t.String
			runs, err := collect(scanRun)(d.s.query(ctx, `SELECT `+runColumns+` FROM runs WHERE status = 'PENDING' AND `+sqlQueueName+` = ? AND tenant_id = ?
				ORDER BY created_at, run_id LIMIT ?`, norm, tenant, per))
			if err != nil {
				return nil, err
			}
			out = append(out, runs...)
		}
	}
	return out, nil
}

// OldestPending implements storekit.QueueQueries.
func (d driver) OldestPending(ctx context.Context, n int) ([]agent.Run, error) {
	return collect(scanRun)(d.s.query(ctx, storekit.SQLOldestPending(runColumns, "?"), n))
}

// OldestStarted implements storekit.QueueQueries.
func (d driver) OldestStarted(ctx context.Context, n int) ([]agent.Run, error) {
	return collect(scanRun)(d.s.query(ctx, storekit.SQLOldestStarted(runColumns, "?"), n))
}
