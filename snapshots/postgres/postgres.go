package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// OutboxChannel is the Postgres NOTIFY channel a CommitStep signals (payload:
// the run id), so relays on other hosts wake at once.
const OutboxChannel = "screengraph_outbox"

// Store is the fleet store (pgx v5 pool). CommitStep locks the run's row
// (SELECT … FOR UPDATE), so commits of one run serialize while runs proceed in
// parallel; the unique constraints stay the last line of defense.
type Store struct {
	// Core: CommitStep, SetStatus, AcquireLease, the artifact index and
	// QueuedRuns over this store's driver (driver.go).
	storekit.Core
	pool  *pgxpool.Pool
	clock agent.Clock
	// leaseClock: nil = the database's clock (Options.LeaseClock).
	leaseClock agent.Clock
	// runClock stamps the runs' created_at and updated_at (queue order,
	// retention) and answers StoreNow: nil = the database's clock
	// (Options.Clock unset).
	runClock agent.Clock
	log      zerolog.Logger
	commits  chan struct{}
	// queue is signaled by NOTIFYs on QueueChannel (QueueChanged).
	queue chan struct{}
	// queueFilter: which queue NOTIFYs wake (FilterQueueWakes); nil: all.
	queueFilter atomic.Pointer[func(string) bool]
	// outbox: the runs this process committed events of, for its relay's
	// claims (outbox_local.go).
	outbox localOutbox
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

var _ interface {
	storekit.Store
	agent.QueueNotifier
	agent.QueueWakeFilter
} = (*Store)(nil)

// Capabilities implements snapshots.Capable: the relays of a fleet's
// daemons drain the outbox together by claims.
func (s *Store) Capabilities() snapshots.Capabilities {
	return snapshots.Capabilities{Claimer: s, Notifier: s, Parker: s, Counter: s, StepEvents: s, Requeuer: s, UpTo: s}
}

// Options tune Open; the zero value is the default.
type Options struct {
	// Clock stamps runs, events and control rows, for tests that move
	// time. Unset (production), events and control rows take this
	// process's clock, and the times that decide across daemons (a run's
	// created_at, which orders the queue, and updated_at, which retention
	// compares with its cutoff) are the Postgres server's, as lease times
	// are.
	Clock agent.Clock
	// LeaseClock, when set, replaces the database's clock for device lease
	// times (acquired, renewed, expires, released) and the fence check: for
	// tests that move time. Unset (production), those times are read from
	// the Postgres server (clock_timestamp()), so every daemon of a fleet
	// sees one clock, whatever its own says.
	LeaseClock agent.Clock
	// SkipMigrate leaves the schema alone (a read-only role, `runs inspect`).
	SkipMigrate bool
	// NoListen skips the LISTEN connection: Commits() then only reports this
	// process's commits.
	NoListen bool
	Log      zerolog.Logger
}

// Open connects to url (postgres://…), applies pending migrations
// (under goose's advisory lock, so daemons starting together migrate once)
// and LISTENs on OutboxChannel.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	runClock := o.Clock
	if o.Clock == nil {
		o.Clock = agent.SystemClock{}
	}
	pool, err := newPool(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("snapshots: postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("snapshots: postgres: %w", err)
	}
	if !o.SkipMigrate {
		db := stdlib.OpenDBFromPool(pool)
		_, err := migrations.Up(ctx, db, migrations.Postgres)
		db.Close()
		if err != nil {
			pool.Close()
			return nil, err
		}
	}
	lctx, cancel := context.WithCancel(context.Background())
	s := &Store{pool: pool, clock: o.Clock, leaseClock: o.LeaseClock, runClock: runClock, log: o.Log,
		commits: make(chan struct{}, 1), queue: make(chan struct{}, 1), stop: cancel}
	s.Core = storekit.Core{D: pgDriver{s}}
	if !o.NoListen {
		s.wg.Add(1)
		go s.listen(lctx)
	}
	return s, nil
}

// Pool is the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Commits implements Notifier: this process's commits and, through LISTEN,
// every other writer's.
func (s *Store) Commits() <-chan struct{} { return s.commits }

func (s *Store) wake() {
	select {
	case s.commits <- struct{}{}:
	default:
	}
}

// listen keeps one connection LISTENing; after a lost connection it
// reconnects, re-LISTENs and wakes the relay once (it may have missed
// notifications meanwhile).
func (s *Store) listen(ctx context.Context) {
	defer s.wg.Done()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := func() error {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+OutboxChannel+"; LISTEN "+QueueChannel); err != nil {
				conn.Conn().Close(context.Background())
				return err
			}
			s.wake()
			s.queueNotified("") // signals may have been missed: names nothing
			backoff = 100 * time.Millisecond
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					// The connection is in an unknown state: do not return it to the pool.
					conn.Conn().Close(context.Background())
					return err
				}
				if n.Channel == QueueChannel {
					s.queueNotified(n.Payload)
				} else {
					// Another daemon's commit (or this one's, already
					// woken by InTx): a sweep's business (localOutbox).
					s.outbox.sweepWanted(time.Now(), s.wake)
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn().Err(err).Msg("postgres outbox LISTEN lost; reconnecting")
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Close stops the listener and closes the pool.
func (s *Store) Close() error {
	s.stop()
	s.wg.Wait()
	s.pool.Close()
	return nil
}

func pgConstraint(err error, code, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code && (constraint == "" || pe.ConstraintName == constraint)
}

const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
)

func jsonArg(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// CreateRun: see sqlite.Store.CreateRun. Without Options.Clock, a run
// without CreatedAt is stamped with the database's clock.
func (s *Store) CreateRun(ctx context.Context, r agent.Run) error {
	clock := s.runClock
	if clock == nil {
		clock = zeroClock{}
	}
	r, err := storekit.NormalizeRun(r, clock)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, coalesce($9, now()), coalesce($10, $9, now()))`,
		r.RunID, r.TenantID, r.ProjectID, string(r.Status), r.Serial, r.Graph, jsonArg(r.Input), r.PolicyVersion, timeArg(r.CreatedAt), timeArg(r.UpdatedAt))
	if pgConstraint(err, pgUniqueViolation, "runs_pkey") {
		return fmt.Errorf("run %s: %w", r.RunID, snapshots.ErrRunExists)
	}
	return pgExhausted(err)
}

// pgExhausted classifies Postgres's "insufficient resources" errors
// (SQLSTATE class 53: disk_full, out_of_memory, too_many_connections) as
// resource_exhausted (retryable; the HTTP API's 503 with Retry-After), like
// the embedded store's full disk; other errors are returned as they are.
func pgExhausted(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "53") {
		return agent.Wrap(agent.ErrResourceExhausted, err, "Postgres is out of resources (SQLSTATE %s)", pe.Code)
	}
	return err
}

const pgRunColumns = `run_id, tenant_id, project_id, status, serial, graph, input::text, policy_version, created_at, updated_at`

func pgScanRun(row storekit.RowScanner) (agent.Run, error) {
	var (
		r      agent.Run
		status string
		input  *string
	)
	err := row.Scan(&r.RunID, &r.TenantID, &r.ProjectID, &status, &r.Serial, &r.Graph, &input, &r.PolicyVersion, &r.CreatedAt, &r.UpdatedAt)
	r.Status = agent.RunStatus(status)
	if input != nil {
		r.Input = []byte(*input)
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, err
}

// RunByID implements storekit.Driver (Core.GetRun).
func (d pgDriver) RunByID(ctx context.Context, runID string) (agent.Run, bool, error) {
	r, err := pgScanRun(d.s.pool.QueryRow(ctx, `SELECT `+pgRunColumns+` FROM runs WHERE run_id = $1`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// ListRuns: see sqlite.Store.ListRuns.
func (s *Store) ListRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	q := `SELECT ` + pgRunColumns + ` FROM runs WHERE true`
	var args []any
	if !sc.IsAdmin() {
		args = append(args, sc.TenantID())
		q += fmt.Sprintf(` AND tenant_id = $%d`, len(args))
	}
	if len(f.Status) > 0 {
		ss := make([]string, len(f.Status))
		for i, st := range f.Status {
			ss[i] = string(st)
		}
		args = append(args, ss)
		q += fmt.Sprintf(` AND status = ANY($%d)`, len(args))
	}
	if f.Serial != "" {
		args = append(args, f.Serial)
		q += fmt.Sprintf(` AND serial = $%d`, len(args))
	}
	if f.After != nil {
		args = append(args, storekit.StoreTime(f.After.CreatedAt), f.After.RunID)
		q += fmt.Sprintf(` AND (created_at, run_id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	q += ` ORDER BY created_at DESC, run_id DESC`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	return collect(pgScanRun)(s.pool.Query(ctx, q, args...))
}

// sqlLastSequence reads a run's last event sequence (0: none) as the first
// entry of run_events_run_sequence_key backwards. Written as ORDER BY …
// LIMIT 1, not MAX(sequence): pgx prepares it once per connection and the
// server keeps a generic plan; planned while run_events was nearly empty
// (a new store, statistics not gathered yet), MAX's generic plan was an
// aggregate over all the run's keys, kept as the run grew: after 1,500
// step commits each LockRun read about 2,100 index entries and the
// cluster's CPU per commit rose from 400 to 1,470 µs (BenchmarkCommitStep,
// pg_stat_user_indexes). An ordered LIMIT has no such plan to fall into.
const sqlLastSequence = `SELECT COALESCE((SELECT sequence FROM run_events WHERE run_id = $1 ORDER BY sequence DESC LIMIT 1), 0)`

// sqlStepLast is LockRun's read of the run's last sequence and its latest
// snapshot's step ordinal (-1: none; storekit.StepRun), each from the end
// of a key, as sqlLastSequence: the snapshot on the run's last event row
// carrying one (migration 00014) or agent_state_snapshot's highest.
const sqlStepLast = `SELECT COALESCE((SELECT sequence FROM run_events WHERE run_id = $1 ORDER BY sequence DESC LIMIT 1), 0),
	greatest(COALESCE((SELECT step_ordinal FROM run_events WHERE run_id = $1 AND node_name IS NOT NULL ORDER BY sequence DESC LIMIT 1), -1),
		COALESCE((SELECT step_ordinal FROM agent_state_snapshot WHERE run_id = $1 ORDER BY step_ordinal DESC LIMIT 1), -1))`

// LastSequence: see sqlite.Store.LastSequence.
func (s *Store) LastSequence(ctx context.Context, runID string) (int64, error) {
	var last int64
	err := s.pool.QueryRow(ctx, sqlLastSequence, runID).Scan(&last)
	return last, err
}

// Events: see sqlite.Store.Events.
func (s *Store) Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error) {
	cond, args, err := storekit.ScopeCond(sc, "run_events.run_id", storekit.PgPH, 3)
	if err != nil {
		return nil, err
	}
	return collect(storekit.ScanEvent)(s.pool.Query(ctx, `SELECT envelope FROM run_events WHERE run_id = $1 AND sequence > $2`+cond+` ORDER BY sequence`,
		append([]any{runID, after}, args...)...))
}

// StepEvents: see sqlite.Store.StepEvents.
func (s *Store) StepEvents(ctx context.Context, runID string, stepOrdinal int) ([]agent.Event, error) {
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1`+storekit.SnapshotFrom("$1", "$1")+` WHERE sn.step_ordinal = $2`, runID, stepOrdinal).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %s step %d: %w", runID, stepOrdinal, agent.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return collect(storekit.ScanEvent)(s.pool.Query(ctx, `SELECT envelope FROM run_events WHERE run_id = $1 AND step_ordinal = $2 ORDER BY sequence`, runID, stepOrdinal))
}

const pgSnapshotColumns = `sn.run_id, sn.step_ordinal, sn.node_name, sn.resume_token, sn.state::text, sn.created_at`

func pgScanSnapshot(row pgx.Row, runID, what string) (agent.Snapshot, error) {
	var (
		sn    agent.Snapshot
		state *string
	)
	err := row.Scan(&sn.RunID, &sn.StepOrdinal, &sn.NodeName, &sn.ResumeToken, &state, &sn.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return sn, fmt.Errorf("run %s %s snapshot: %w", runID, what, agent.ErrNotFound)
	}
	if state != nil {
		sn.State = []byte(*state)
	}
	sn.CreatedAt = sn.CreatedAt.UTC()
	return sn, err
}

// Snapshot: see sqlite.Store.Snapshot.
func (s *Store) Snapshot(ctx context.Context, sc agent.Scope, runID string, stepOrdinal int) (agent.Snapshot, error) {
	cond, args, err := storekit.ScopeCond(sc, "sn.run_id", storekit.PgPH, 3)
	if err != nil {
		return agent.Snapshot{}, err
	}
	return pgScanSnapshot(s.pool.QueryRow(ctx, `SELECT `+pgSnapshotColumns+storekit.SnapshotFrom("$1", "$1")+` WHERE sn.step_ordinal = $2`+cond,
		append([]any{runID, stepOrdinal}, args...)...), runID, fmt.Sprintf("step %d", stepOrdinal))
}

// LatestSnapshot: see sqlite.Store.LatestSnapshot.
func (s *Store) LatestSnapshot(ctx context.Context, sc agent.Scope, runID string) (agent.Snapshot, error) {
	cond, args, err := storekit.ScopeCond(sc, "sn.run_id", storekit.PgPH, 2)
	if err != nil {
		return agent.Snapshot{}, err
	}
	return pgScanSnapshot(s.pool.QueryRow(ctx, `SELECT `+pgSnapshotColumns+storekit.SnapshotFrom("$1", "$1")+` WHERE true`+cond+` ORDER BY sn.step_ordinal DESC LIMIT 1`,
		append([]any{runID}, args...)...), runID, "latest")
}

// RequestControl: see sqlite.Store.RequestControl. The run's row is locked (FOR
// UPDATE, as CommitStep locks it), so a request and a terminal commit of the
// run are ordered: the request is taken by that commit or refused after it.
func (s *Store) RequestControl(ctx context.Context, c agent.Control) (agent.Control, error) {
	c, err := storekit.NewControl(c, s.clock)
	if err != nil {
		return c, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return c, err
	}
	defer tx.Rollback(context.Background())
	var status string
	err = tx.QueryRow(ctx, `SELECT status FROM runs WHERE run_id = $1 FOR UPDATE`, c.RunID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("run %s: %w", c.RunID, agent.ErrNotFound)
	}
	if err != nil {
		return c, err
	}
	var pending int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM run_control WHERE run_id = $1 AND taken_at IS NULL`, c.RunID).Scan(&pending); err != nil {
		return c, err
	}
	if err := storekit.CheckControlStatus(c, agent.RunStatus(status), pending); err != nil {
		return c, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO run_control (id, run_id, kind, policy_version, requested_at) VALUES ($1, $2, $3, $4, $5)`,
		c.ID, c.RunID, c.Kind, c.PolicyVersion, c.RequestedAt); err != nil {
		return c, err
	}
	if c.Kind == agent.KindCancelRequested && agent.RunStatus(status) != agent.RunCancelRequested {
		if _, err := tx.Exec(ctx, `UPDATE runs SET status = $1, updated_at = coalesce($2::timestamptz, clock_timestamp()) WHERE run_id = $3`,
			string(agent.RunCancelRequested), s.runClockArg(), c.RunID); err != nil {
			return c, err
		}
	}
	return c, tx.Commit(ctx)
}

// PendingControl: see sqlite.Store.PendingControl.
func (s *Store) PendingControl(ctx context.Context, runID string) ([]agent.Control, error) {
	return collect(func(r storekit.RowScanner) (agent.Control, error) {
		c := agent.Control{RunID: runID}
		err := r.Scan(&c.ID, &c.Kind, &c.PolicyVersion, &c.RequestedAt)
		c.RequestedAt = c.RequestedAt.UTC()
		return c, err
	})(s.pool.Query(ctx, `SELECT id, kind, policy_version, requested_at FROM run_control WHERE run_id = $1 AND taken_at IS NULL ORDER BY id`, runID))
}

// Unpublished: see sqlite.Store.Unpublished. The runs with events to
// publish are run_publish_pending's; each run's rows are read from its
// position through the (run_id, sequence) key.
func (s *Store) Unpublished(ctx context.Context, limit int) ([]agent.OutboxRow, error) {
	if limit <= 0 {
		limit = 100
	}
	return collect(storekit.ScanOutboxRow)(s.pool.Query(ctx, `SELECT `+storekit.OutboxCols+` FROM run_publish p
		JOIN runs r ON r.run_id = p.run_id
		CROSS JOIN LATERAL (SELECT * FROM run_events x WHERE x.run_id = p.run_id AND x.sequence > p.published_seq AND x.published_at IS NULL ORDER BY x.sequence LIMIT $1) e
		WHERE p.committed_seq > p.published_seq
		ORDER BY e.run_id, e.sequence LIMIT $1`, limit))
}

// sqlPosition is the published position of run $N (0: none yet), for an
// event's own test "above its run's position".
func sqlPosition(n string) string {
	return `coalesce((SELECT pp.published_seq FROM run_publish pp WHERE pp.run_id = ` + n + `), 0)`
}

// MarkPublished: see sqlite.Store.MarkPublished. One event, maybe out of
// its run's order: its own published_at, not the run's position.
func (s *Store) MarkPublished(ctx context.Context, runID string, sequence int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE run_events SET published_at = $1 WHERE run_id = $2 AND sequence = $3 AND published_at IS NULL AND sequence > `+sqlPosition("$2"),
		storekit.StoreTime(s.clock.Now()), runID, sequence)
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var one int
	err = s.pool.QueryRow(ctx, `SELECT 1 FROM run_events WHERE run_id = $1 AND sequence = $2`, runID, sequence).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("outbox row run %s sequence %d: %w", runID, sequence, agent.ErrNotFound)
	}
	return err
}

// MarkPublishedUpTo implements UpToMarker: the run's position moved
// (sqlMarkUpToMany).
func (s *Store) MarkPublishedUpTo(ctx context.Context, runID string, upTo int64) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, sqlMarkUpToMany, storekit.StoreTime(s.clock.Now()), []string{runID}, []int64{upTo}, []int64{-1}).Scan(&n)
	return n, err
}

// Requeue: see sqlite.Store.Requeue. In one transaction, the events from
// fromSequence on that were published (at or below the run's position, or
// marked one by one) are counted, their published_at cleared and the
// position moved below them. Not under the run's publishing lock: the
// relay requeues a run of its own open claim (checkTails) and leaves it
// out of that claim's marks; another relay's claim of the run finds the
// position moved back at its Finish and leaves it (sqlMarkUpToMany).
func (s *Store) Requeue(ctx context.Context, runID string, fromSequence int64) (int, error) {
	n, err := s.requeue(ctx, runID, fromSequence)
	if err != nil || n == 0 {
		return n, err
	}
	s.outbox.committed(runID)
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, OutboxChannel, runID); err != nil {
		return n, err
	}
	s.wake()
	return n, nil
}

func (s *Store) requeue(ctx context.Context, runID string, from int64) (int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM run_events WHERE run_id = $1 AND sequence >= $2
		AND (published_at IS NOT NULL OR sequence <= `+sqlPosition("$1")+`)`, runID, from).Scan(&n); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE run_events SET published_at = NULL WHERE run_id = $1 AND sequence >= $2 AND published_at IS NOT NULL`, runID, from); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE run_publish SET published_seq = $2 - 1 WHERE run_id = $1 AND published_seq >= $2`, runID, from); err != nil {
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// KV implements storekit.Driver (Core.GetKV).
func (d pgDriver) KV(ctx context.Context, key string) ([]byte, bool, error) {
	var v []byte
	err := d.s.pool.QueryRow(ctx, `SELECT value FROM agent_kv WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// PutKV: see sqlite.Store.PutKV.
func (s *Store) PutKV(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, storekit.StoreTime(s.clock.Now()))
	return err
}

// InitKV sets each key of kvs that is not set yet, all in one transaction
// (INSERT … ON CONFLICT DO NOTHING): keys already set keep their values, so
// daemons initialising the shared store at once all succeed, and none sees
// part of another's initialisation (policy.KVInit).
func (s *Store) InitKV(ctx context.Context, kvs map[string][]byte) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	now := storekit.StoreTime(s.clock.Now())
	for _, k := range slices.Sorted(maps.Keys(kvs)) {
		v := kvs[k]
		if v == nil {
			v = []byte{}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`, k, v, now); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// collect(scan)(rows, err) is pgx.AppendRows from a nil slice with scan for
// each row (rows closed on return); err is the query's own error, returned
// as is, so a query call is its argument: collect(pgScanRun)(s.pool.Query(...)).
// No rows: nil, as the loops it replaced returned (pgx.CollectRows would
// return an empty slice).
func collect[T any](scan func(storekit.RowScanner) (T, error)) func(pgx.Rows, error) ([]T, error) {
	return func(rows pgx.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, err
		}
		return pgx.AppendRows([]T(nil), rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	}
}

// zeroClock reads the zero time: CreateRun leaves the stamp to the database.
type zeroClock struct{}

func (zeroClock) Now() time.Time { return time.Time{} }

// timeArg is t, or nil (SQL NULL) for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
