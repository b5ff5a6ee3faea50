package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// The Postgres driver of the store core (storekit): the queries of a step
// commit (the run's row locked FOR UPDATE, so commits of one run serialize
// while runs proceed in parallel) and of a lease acquisition (an advisory
// lock of the device key), and the reads of the artifact index and the run
// queue. Its clock is the database's (clock_timestamp()), so every daemon of
// a fleet reads one clock; Options.Clock and LeaseClock replace it in tests.

// pgConflicts: the unique constraint each storekit.Conflict is.
var pgConflicts = map[string]storekit.Conflict{
	"run_events_run_sequence_key":  storekit.ConflictSequence,
	"agent_state_snapshot_pkey":    storekit.ConflictSnapshot,
	"artifacts_pkey":               storekit.ConflictArtifact,
	"device_leases_active_key":     storekit.ConflictLeaseDevice,
	"device_leases_active_run_key": storekit.ConflictLeaseRun,
}

// pgConflict implements storekit's Conflict for Postgres errors.
func pgConflict(err error) storekit.Conflict {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != pgUniqueViolation {
		return storekit.NoConflict
	}
	return pgConflicts[pe.ConstraintName]
}

// pgTx is the core's StepTx and LeaseTx in one pgx transaction.
type pgTx struct {
	s  *Store
	tx pgx.Tx
}

func (p pgTx) Conflict(err error) storekit.Conflict { return pgConflict(err) }

// LockRun implements storekit.StepTx: the run's row FOR UPDATE, then its
// last sequence; Now is the fleet's clock (or Options.Clock).
func (p pgTx) LockRun(ctx context.Context, runID string) (storekit.StepRun, bool, error) {
	var (
		r      storekit.StepRun
		status string
	)
	err := p.tx.QueryRow(ctx, `SELECT tenant_id, status, coalesce($2::timestamptz, clock_timestamp()) FROM runs WHERE run_id = $1 FOR UPDATE`,
		runID, p.s.runClockArg()).Scan(&r.Tenant, &status, &r.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r.Status, r.Now = agent.RunStatus(status), storekit.StoreTime(r.Now)
	err = p.tx.QueryRow(ctx, sqlStepLast, runID).Scan(&r.Last, &r.LastSnapshot)
	return r, true, err
}

// FenceLease implements storekit.StepTx. FOR SHARE: a takeover (which
// updates the row) waits for this commit, so no step commits after its
// lease was released.
func (p pgTx) FenceLease(ctx context.Context, serial string, token int64) (agent.Lease, bool, time.Time, error) {
	var now time.Time
	l, err := pgScanLease(withExtra(p.tx.QueryRow(ctx, `SELECT `+storekit.LeaseCols+`, `+pgNow(3)+` FROM device_leases WHERE serial = $1 AND fencing_token = $2 FOR SHARE`,
		serial, token, p.s.leaseClockArg()), &now))
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, now, nil
	}
	return l, err == nil, now.UTC(), err
}

// TakeControls implements storekit.StepTx.
func (p pgTx) TakeControls(ctx context.Context, runID string, ids []string, now time.Time) (int64, error) {
	tag, err := p.tx.Exec(ctx, `UPDATE run_control SET taken_at = $1 WHERE run_id = $2 AND taken_at IS NULL AND id = ANY($3)`, now, runID, ids)
	return tag.RowsAffected(), err
}

// PendingControls implements storekit.StepTx.
func (p pgTx) PendingControls(ctx context.Context, runID string) (int, error) {
	var n int
	err := p.tx.QueryRow(ctx, `SELECT COUNT(*) FROM run_control WHERE run_id = $1 AND taken_at IS NULL`, runID).Scan(&n)
	return n, err
}

// UpdateStatus implements storekit.StepTx.
func (p pgTx) UpdateStatus(ctx context.Context, runID string, from, to agent.RunStatus, now time.Time) error {
	_, err := p.tx.Exec(ctx, `UPDATE runs SET status = $1, updated_at = $2 WHERE run_id = $3 AND status = $4`, string(to), now, runID, string(from))
	return err
}

// UpdatePolicyVersion implements storekit.StepTx.
func (p pgTx) UpdatePolicyVersion(ctx context.Context, runID string, version int) error {
	_, err := p.tx.Exec(ctx, `UPDATE runs SET policy_version = $1 WHERE run_id = $2`, version, runID)
	return err
}

// InsertEvents implements storekit.StepTx: the event rows (each its own
// outbox entry, unpublished: migration 00012), the last carrying the step's
// snapshot (00014), and a NOTIFY on OutboxChannel (delivered at commit) in
// one batch, one round trip.
func (p pgTx) InsertEvents(ctx context.Context, evs []storekit.PreparedEvent, sn *storekit.StepSnapshot) error {
	var step *int
	if sn != nil {
		step = &sn.StepOrdinal
	}
	b := &pgx.Batch{}
	last := len(evs) - 1
	for _, e := range evs[:last] {
		b.Queue(sqlInsertEvent, e.RunID, e.Sequence, e.EventID, step, e.Envelope)
	}
	if e := evs[last]; sn == nil {
		b.Queue(sqlInsertEvent, e.RunID, e.Sequence, e.EventID, step, e.Envelope)
	} else {
		b.Queue(sqlInsertEventSnapshot, e.RunID, e.Sequence, e.EventID, step, e.Envelope, sn.NodeName, sn.ResumeToken, jsonArg(sn.State), sn.Created)
	}
	// The run's last sequence, so run_publish_pending names it (00015).
	b.Queue(sqlCommitted, evs[0].RunID, evs[len(evs)-1].Sequence)
	b.Queue(`SELECT pg_notify($1, $2)`, OutboxChannel, evs[0].RunID)
	// This process's relay claims the run's heads (localOutbox), woken by
	// InTx after the commit; recorded before it, so that wake finds it.
	p.s.outbox.committed(evs[0].RunID)
	return p.tx.SendBatch(ctx, b).Close()
}

// sqlCommitted records run $1's last sequence $2 in run_publish (the
// run's first commit makes its row).
const sqlCommitted = `INSERT INTO run_publish (run_id, committed_seq) VALUES ($1, $2)
	ON CONFLICT (run_id) DO UPDATE SET committed_seq = excluded.committed_seq`

// A step's event rows; the last carries the step's snapshot (00014).
const (
	sqlInsertEvent         = `INSERT INTO run_events (run_id, sequence, event_id, step_ordinal, envelope) VALUES ($1, $2, $3, $4, $5)`
	sqlInsertEventSnapshot = `INSERT INTO run_events (run_id, sequence, event_id, step_ordinal, envelope, node_name, resume_token, state, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)`
)

// InsertSnapshot implements storekit.StepTx: the snapshot of a step
// without events.
func (p pgTx) InsertSnapshot(ctx context.Context, runID string, sn agent.Snapshot, created time.Time) error {
	_, err := p.tx.Exec(ctx, `INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at) VALUES ($1, $2, $3, $4, $5::jsonb, $6)`,
		runID, sn.StepOrdinal, sn.NodeName, sn.ResumeToken, jsonArg(sn.State), created)
	return err
}

// InsertArtifact implements storekit.StepTx.
func (p pgTx) InsertArtifact(ctx context.Context, runID, tenant string, a agent.Artifact, created time.Time) error {
	_, err := p.tx.Exec(ctx, `INSERT INTO artifacts (`+storekit.ArtifactColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		a.ArtifactID, runID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, created)
	return err
}

// LockDevice implements storekit.LeaseTx: a transaction-level advisory
// lock of the device key (which also covers a free device, where there is
// no row to lock).
func (p pgTx) LockDevice(ctx context.Context, device string) error {
	_, err := p.tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))`, pgLeaseLockClass, device)
	return err
}

// ActiveLease implements storekit.LeaseTx (the row locked, so a renewal
// or release of it cannot interleave).
func (p pgTx) ActiveLease(ctx context.Context, device string) (agent.Lease, bool, error) {
	return pgLeaseRow(p.tx.QueryRow(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE device = $1 AND released_at IS NULL FOR UPDATE`, device))
}

// RunLeaseElsewhere implements storekit.LeaseTx.
func (p pgTx) RunLeaseElsewhere(ctx context.Context, runID, device string) (agent.Lease, bool, error) {
	return pgLeaseRow(p.tx.QueryRow(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE run_id = $1 AND device <> $2 AND released_at IS NULL FOR UPDATE`, runID, device))
}

func pgLeaseRow(row pgx.Row) (agent.Lease, bool, error) {
	l, err := pgScanLease(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	return l, err == nil, err
}

// LeaseNow implements storekit.LeaseTx: clock_timestamp(), read once the
// device and the rows are locked (a FOR UPDATE may have waited on a
// release, ReleaseHolderLeases takes no advisory lock).
func (p pgTx) LeaseNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.tx.QueryRow(ctx, `SELECT `+pgNow(1), p.s.leaseClockArg()).Scan(&now)
	return now, err
}

// RenewLeaseRow implements storekit.LeaseTx.
func (p pgTx) RenewLeaseRow(ctx context.Context, token int64, now, expires time.Time) error {
	_, err := p.tx.Exec(ctx, `UPDATE device_leases SET renewed_at = $1, expires_at = $2 WHERE fencing_token = $3`, now, expires, token)
	return err
}

// EndLease implements storekit.LeaseTx.
func (p pgTx) EndLease(ctx context.Context, token int64, now time.Time, reason agent.LeaseReleaseReason) error {
	_, err := p.tx.Exec(ctx, `UPDATE device_leases SET released_at = $1, release_reason = $2 WHERE fencing_token = $3`, now, string(reason), token)
	return err
}

// InsertLease implements storekit.LeaseTx: the token is the row's
// sequence value.
func (p pgTx) InsertLease(ctx context.Context, l agent.Lease) (int64, error) {
	var token int64
	err := p.tx.QueryRow(ctx, `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES ($6, $1, $2, $3, $4, $4, $5)
		RETURNING fencing_token`, l.Serial, l.Holder, l.RunID, l.AcquiredAt, l.ExpiresAt, l.Device).Scan(&token)
	return token, err
}

// pgDriver is the core's Driver over the pool.
type pgDriver struct{ s *Store }

// InTx implements storekit.Driver: one transaction of the pool; after a
// commit that wrote outbox rows, this process's relay wakes (the others
// by the NOTIFY InsertEvents queued).
func (d pgDriver) InTx(ctx context.Context, notify bool, fn func(ctx context.Context, tx storekit.Tx) error) error {
	tx, err := d.s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if err := fn(ctx, pgTx{s: d.s, tx: tx}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if notify {
		d.s.wake()
	}
	return nil
}

func (d pgDriver) Conflict(err error) storekit.Conflict { return pgConflict(err) }

// CASStatus implements storekit.StatusCAS.
func (d pgDriver) CASStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) (int64, error) {
	tag, err := d.s.pool.Exec(ctx, `UPDATE runs SET status = $1, updated_at = coalesce($2::timestamptz, clock_timestamp()) WHERE run_id = $3 AND status = ANY($4)`,
		string(to), d.s.runClockArg(), runID, statusTexts(from))
	return tag.RowsAffected(), err
}

// RunArtifacts implements storekit.ArtifactQueries.
func (d pgDriver) RunArtifacts(ctx context.Context, runID string) ([]agent.Artifact, error) {
	return collect(pgScanArtifact)(d.s.pool.Query(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = $1`+storekit.ArtifactOrder, runID))
}

// RunArtifact implements storekit.ArtifactQueries.
func (d pgDriver) RunArtifact(ctx context.Context, runID, artifactID string) (agent.Artifact, bool, error) {
	a, err := pgScanArtifact(d.s.pool.QueryRow(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = $1 AND artifact_id = $2`, runID, artifactID))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	}
	return a, err == nil, err
}

// SumsInUse implements storekit.ArtifactQueries.
func (d pgDriver) SumsInUse(ctx context.Context, sums []string) ([]string, error) {
	return collect(storekit.ScanString)(d.s.pool.Query(ctx, `SELECT DISTINCT sha256 FROM artifacts WHERE sha256 = ANY($1)`, sums))
}

// QueuedByName implements storekit.QueueQueries in one statement: per
// name, a skip scan of runs_queue_idx finds the tenants with queued runs
// (one index probe each), and per tenant a LIMIT reads its oldest runs.
func (d pgDriver) QueuedByName(ctx context.Context, names []string, per, tenants int) ([]agent.Run, error) {
	qn := pgQueueName("r.serial")
	return collect(pgScanRun)(d.s.pool.Query(ctx, `WITH RECURSIVE names(name) AS (
			SELECT DISTINCT lower(replace(trim(n), ' ', '_')) FROM unnest($1::text[]) n
		), t(name, tenant, k) AS (
			SELECT n.name, (SELECT r.tenant_id FROM runs r WHERE r.status = 'PENDING' AND `+qn+` = n.name ORDER BY r.tenant_id LIMIT 1), 1 FROM names n
			UNION ALL
			SELECT t.name, (SELECT r.tenant_id FROM runs r WHERE r.status = 'PENDING' AND `+qn+` = t.name AND r.tenant_id > t.tenant ORDER BY r.tenant_id LIMIT 1), t.k + 1
			FROM t WHERE t.tenant IS NOT NULL AND t.k < $3
		)
		SELECT x.* FROM t, LATERAL (
			SELECT `+pgRunColumns+` FROM runs r WHERE r.status = 'PENDING' AND `+qn+` = t.name AND r.tenant_id = t.tenant
			ORDER BY r.created_at, r.run_id LIMIT $2) x
		WHERE t.tenant IS NOT NULL`, names, per, tenants))
}

// OldestPending implements storekit.QueueQueries.
func (d pgDriver) OldestPending(ctx context.Context, n int) ([]agent.Run, error) {
	return collect(pgScanRun)(d.s.pool.Query(ctx, storekit.SQLOldestPending(pgRunColumns, "$1"), n))
}

// OldestStarted implements storekit.QueueQueries.
func (d pgDriver) OldestStarted(ctx context.Context, n int) ([]agent.Run, error) {
	return collect(pgScanRun)(d.s.pool.Query(ctx, storekit.SQLOldestStarted(pgRunColumns, "$1"), n))
}

// statusTexts is ss as a text[] argument.
func statusTexts(ss []agent.RunStatus) []string {
	out := make([]string, len(ss))
	for i, st := range ss {
		out[i] = string(st)
	}
	return out
}

func pgScanArtifact(r storekit.RowScanner) (agent.Artifact, error) {
	var a agent.Artifact
	err := r.Scan(&a.ArtifactID, &a.RunID, &a.TenantID, &a.Node, &a.StepOrdinal, &a.Kind, &a.ContentType, &a.Bytes, &a.SHA256, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}
