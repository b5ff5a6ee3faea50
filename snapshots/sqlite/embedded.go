package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// Store is the single-host default store: one SQLite file in WAL mode.
// Writes go through one connection (SQLite has one writer anyway; one
// connection turns lock contention inside the process into a Go queue) and
// begin IMMEDIATE, so a transaction holds the write lock from its first
// statement and its reads cannot go stale. Reads use a small pool of
// query_only connections that WAL lets run beside the writer. Another process
// (the CLI's `runs cancel`) writes to the same file under busy_timeout.
type Store struct {
	// Core: CommitStep (in a group commit, groupcommit.go), SetStatus,
	// AcquireLease, the artifact index and QueuedRuns over this store's
	// driver (driver.go).
	storekit.Core
	path    string
	w       *sql.DB // nil when read-only
	r       *sql.DB
	clock   agent.Clock
	commits chan struct{}
	ws, rs  *stmtCache // prepared statements of w and r (stmts.go)
	group   *groupCommitter
	ckpt    *checkpointer // nil: read-only, or CheckpointInCommit
	// full: the last write failed for want of space and none succeeded
	// since (full.go).
	full atomic.Bool
}

var _ storekit.Store = (*Store)(nil)

// Capabilities implements snapshots.Capable: a single relay follows the
// outbox by its cursor (run_events.id, in commit order) and marks in
// one write.
func (s *Store) Capabilities() snapshots.Capabilities {
	return snapshots.Capabilities{Notifier: s, StepEvents: s, Parker: s, Counter: s, Requeuer: s, UpTo: s, UpToMany: s, Cursor: s}
}

// Options tune Open. The zero value is the default.
type Options struct {
	// Clock stamps created_at/updated_at/published_at; default agent.SystemClock.
	Clock agent.Clock
	// ReadOnly opens an existing file for the read-only views (`runs inspect`):
	// no migration, every write returns ErrReadOnly.
	ReadOnly bool
	// BusyTimeout is how long a statement waits for another process's write
	// lock; default 5 s.
	BusyTimeout time.Duration
	// Readers is the read pool size; default 4.
	Readers int
	// DiskSubJournal keeps the writer's sub-journal (the undo pages of each
	// step's SAVEPOINT in a group commit) in a temporary file, as SQLite
	// does by default (temp_store=DEFAULT, spilling past 64 KiB), instead of
	// in memory. Only for side-by-side benchmarks (BenchmarkCommitToNATS):
	// on disk it cost a third of a step's insert time at 32 devices.
	DiskSubJournal bool
	// CheckpointInCommit leaves SQLite's automatic WAL checkpoint in the
	// commit that crosses 1000 WAL pages, as SQLite does by default, instead
	// of the store's checkpointer (checkpoint.go). Only for side-by-side
	// benchmarks (BenchmarkCommitToNATS).
	CheckpointInCommit bool
}

// DataDir is the per-user data directory of the agent (agent.DefaultDataDir).
func DataDir() (string, error) {
	d, err := agent.DefaultDataDir()
	if err != nil {
		return "", fmt.Errorf("snapshots: %w", err)
	}
	return d, nil
}

// DefaultEmbeddedPath is DataDir()/agent.db.
func DefaultEmbeddedPath() (string, error) {
	dir, err := DataDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "agent.db"), nil
}

func sqliteDSN(path string, busy time.Duration, write bool, o Options) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if write {
		q.Add("_pragma", "journal_mode(WAL)")
		// NORMAL in WAL: a commit survives a process crash; an OS crash may lose
		// the last commits but never corrupts the file.
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
		if !o.CheckpointInCommit {
			// Checkpoints off the commits (checkpoint.go).
			q.Add("_pragma", "wal_autocheckpoint(0)")
		}
		if !o.DiskSubJournal {
			// The sub-journal of a group commit's SAVEPOINTs (groupcommit.go)
			// in memory: on disk (it spills past 64 KiB, then is never
			// truncated within the transaction) every page a step first
			// touched was written to a temporary file, a third of the
			// step's insert time at 32 devices (docs/decisions.md). It holds
			// at most a group's pages (64 steps, a few MB).
			q.Add("_pragma", "temp_store(memory)")
		}
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating the file and its directory, mode 0700, when
// needed) the SQLite store at path and applies pending migrations. path ""
// means DefaultEmbeddedPath().
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	if path == "" {
		p, err := DefaultEmbeddedPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	if o.Clock == nil {
		o.Clock = agent.SystemClock{}
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.Readers <= 0 {
		o.Readers = 4
	}
	s := &Store{path: path, clock: o.Clock, commits: make(chan struct{}, 1)}
	s.Core = storekit.Core{D: driver{s}}
	s.group = newGroupCommitter(s)
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("snapshots: open %s read-only: %w", path, err)
		}
	} else if err := s.openWriter(ctx, o); err != nil {
		return nil, err
	}
	r, err := sql.Open("sqlite", sqliteDSN(path, o.BusyTimeout, false, o))
	if err != nil {
		s.Close()
		return nil, err
	}
	r.SetMaxOpenConns(o.Readers)
	r.SetMaxIdleConns(o.Readers)
	s.r = r
	s.rs = newStmtCache(r)
	if err := r.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("snapshots: open %s: %w", path, err)
	}
	return s, nil
}

// openWriter creates s's file (and directory) when needed, opens the
// writer's connection, migrates, prepares the writer's hot statements and
// starts the checkpointer (unless o.CheckpointInCommit). On an error s is
// closed.
func (s *Store) openWriter(ctx context.Context, o Options) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("snapshots: data dir: %w", err)
	}
	if err := ownerOnly(s.path); err != nil {
		return err
	}
	w, err := openOneConn(sqliteDSN(s.path, o.BusyTimeout, true, o))
	if err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, w, migrations.SQLite); err != nil {
		w.Close()
		return err
	}
	s.w = w
	s.ws = newStmtCache(w)
	if err := s.ws.prepare(ctx, writerTxStatements...); err != nil {
		s.Close()
		return fmt.Errorf("snapshots: prepare: %w", err)
	}
	if !o.CheckpointInCommit {
		if s.ckpt, err = startCheckpointer(s.path, o.BusyTimeout, s.group, w); err != nil {
			s.Close()
			return fmt.Errorf("snapshots: open %s: %w", s.path, err)
		}
	}
	return nil
}

// openOneConn opens dsn as a pool of one connection, kept open for good
// (the writer's, the checkpointer's).
func openOneConn(dsn string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return db, nil
}

// Path is the SQLite file.
func (s *Store) Path() string { return s.path }

// Commits implements Notifier.
func (s *Store) Commits() <-chan struct{} { return s.commits }

// Close closes both pools.
func (s *Store) Close() error {
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	for _, c := range []*stmtCache{s.ws, s.rs} {
		if c != nil {
			errs = append(errs, c.close())
		}
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	return errors.Join(errs...)
}

func (s *Store) writer() (*sql.DB, error) {
	if s.w == nil {
		return nil, snapshots.ErrReadOnly
	}
	return s.w, nil
}

// Statements of the writer's hot transactions, prepared once at open (see
// stmtCache).
const (
	// The run's tenant, status, last sequence and latest snapshot's step
	// ordinal (storekit.StepRun), each of the last two one probe of
	// run_events_run_sequence_key from its end.
	sqlStepRun = `SELECT tenant_id, status, COALESCE((SELECT MAX(sequence) FROM run_events WHERE run_id = ?1), 0),
		max(COALESCE((SELECT step_ordinal FROM run_events WHERE run_id = ?1 AND node_name IS NOT NULL ORDER BY sequence DESC LIMIT 1), -1),
			COALESCE((SELECT MAX(step_ordinal) FROM agent_state_snapshot WHERE run_id = ?1), -1))
		FROM runs WHERE run_id = ?1`
	sqlFenceLease          = `SELECT ` + storekit.LeaseCols + ` FROM device_leases WHERE serial = ? AND fencing_token = ?`
	sqlStepStatus          = `UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ? AND status = ?`
	sqlInsertEvent         = `INSERT INTO run_events (run_id, sequence, event_id, step_ordinal, envelope) VALUES (?, ?, ?, ?, ?)`
	sqlInsertEventSnapshot = `INSERT INTO run_events (run_id, sequence, event_id, step_ordinal, envelope, node_name, resume_token, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlInsertSnapshot      = `INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at) VALUES (?, ?, ?, ?, ?, ?)`
	sqlInsertRun           = `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

var writerTxStatements = []string{sqlStepRun, sqlFenceLease, sqlStepStatus, sqlInsertEvent, sqlInsertEventSnapshot, sqlInsertSnapshot, sqlInsertArtifact, sqlMarkUpTo, sqlCursorAdvance,
	sqlInsertRun, sqlLeaseCurrent, sqlLeaseRunElsewhere, sqlLeaseRenewOwn, sqlLeaseEnd, sqlLeaseInsert, sqlLeaseRenew, sqlLeaseRelease,
	sqlSavepoint, sqlRollbackTo, sqlRelease}

// sqliteConstraint reports whether err is a SQLite constraint violation whose
// message names target (e.g. "run_events.run_id, run_events.sequence").
func sqliteConstraint(err error, target string) bool {
	var se *sqlitedrv.Error
	if !errors.As(err, &se) {
		return false
	}
	// SQLITE_CONSTRAINT is 19; extended codes keep it in the low byte.
	return se.Code()&0xff == 19 && strings.Contains(se.Error(), target)
}

// CreateRun inserts r. Status defaults to PENDING, CreatedAt to now, UpdatedAt
// to CreatedAt. Errors: ErrInvalid (run id not a ULID, no tenant),
// ErrRunExists.
func (s *Store) CreateRun(ctx context.Context, r agent.Run) error {
	if _, err := s.writer(); err != nil {
		return err
	}
	r, err := storekit.NormalizeRun(r, s.clock)
	if err != nil {
		return err
	}
	// A new run is refused while the disk is nearly full: what space is
	// left goes to the runs in flight (full.go).
	if err := s.checkSpace(); err != nil {
		return err
	}
	var input any
	if r.Input != nil {
		input = string(r.Input)
	}
	err = s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		q, err := s.ws.tx(ctx, tx, sqlInsertRun)
		if err != nil {
			return err
		}
		_, err = q.ExecContext(ctx, r.RunID, r.TenantID, r.ProjectID, string(r.Status), r.Serial, r.Graph, input, r.PolicyVersion,
			storekit.FmtTime(r.CreatedAt), storekit.FmtTime(r.UpdatedAt))
		return err
	})
	if sqliteConstraint(err, "runs.run_id") {
		return fmt.Errorf("run %s: %w", r.RunID, snapshots.ErrRunExists)
	}
	return err
}

const runColumns = `run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at`

func scanRun(sc storekit.RowScanner) (agent.Run, error) {
	var (
		r                agent.Run
		status           string
		input            sql.NullString
		created, updated string
	)
	if err := sc.Scan(&r.RunID, &r.TenantID, &r.ProjectID, &status, &r.Serial, &r.Graph, &input, &r.PolicyVersion, &created, &updated); err != nil {
		return r, err
	}
	r.Status = agent.RunStatus(status)
	if input.Valid {
		r.Input = []byte(input.String)
	}
	var err error
	if r.CreatedAt, err = storekit.ParseTime(created); err != nil {
		return r, err
	}
	r.UpdatedAt, err = storekit.ParseTime(updated)
	return r, err
}

// RunByID implements storekit.Driver (Core.GetRun).
func (d driver) RunByID(ctx context.Context, runID string) (agent.Run, bool, error) {
	q, err := d.s.rs.get(ctx, `SELECT `+runColumns+` FROM runs WHERE run_id = ?`)
	if err != nil {
		return agent.Run{}, false, err
	}
	r, err := scanRun(q.QueryRowContext(ctx, runID))
	return r, err == nil, noRows(err)
}

// ListRuns returns runs newest first (created_at, then run id, descending).
// Limit <= 0 means no limit; After continues after a page's last run. A
// tenant scope lists its tenant's runs only.
func (s *Store) ListRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	q := `SELECT ` + runColumns + ` FROM runs WHERE 1=1`
	var args []any
	if !sc.IsAdmin() {
		q += ` AND tenant_id = ?`
		args = append(args, sc.TenantID())
	}
	if len(f.Status) > 0 {
		q += ` AND status IN (?` + strings.Repeat(`, ?`, len(f.Status)-1) + `)`
		args = append(args, storekit.StatusStrings(f.Status)...)
	}
	if f.Serial != "" {
		q += ` AND serial = ?`
		args = append(args, f.Serial)
	}
	if f.After != nil {
		// created_at is fixed-width text (storekit.FmtTime): text order is time order.
		at := storekit.FmtTime(f.After.CreatedAt)
		q += ` AND (created_at < ? OR (created_at = ? AND run_id < ?))`
		args = append(args, at, at, f.After.RunID)
	}
	q += ` ORDER BY created_at DESC, run_id DESC`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return collect(scanRun)(s.query(ctx, q, args...))
}

// LastSequence is the run's highest event sequence, 0 when it has none.
func (s *Store) LastSequence(ctx context.Context, runID string) (int64, error) {
	var last int64
	err := s.queryRow(ctx, `SELECT COALESCE(MAX(sequence), 0) FROM run_events WHERE run_id = ?`, runID).Scan(&last)
	return last, err
}

// Events returns the run's events with sequence > after, in sequence order,
// decoded from the stored envelopes (byte-for-byte the committed payloads).
// None for a run sc does not see.
func (s *Store) Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error) {
	cond, args, err := storekit.ScopeCond(sc, "run_events.run_id", storekit.SQLitePH, 3)
	if err != nil {
		return nil, err
	}
	return collect(storekit.ScanEvent)(s.query(ctx, `SELECT envelope FROM run_events WHERE run_id = ? AND sequence > ?`+cond+` ORDER BY sequence`,
		append([]any{runID, after}, args...)...))
}

// StepEvents returns the events committed together with step N's snapshot,
// in sequence order (empty when the step has none; ErrNotFound when the run
// has no such snapshot).
func (s *Store) StepEvents(ctx context.Context, runID string, stepOrdinal int) ([]agent.Event, error) {
	var one int
	err := s.queryRow(ctx, `SELECT 1`+storekit.SnapshotFrom("?", "?")+` WHERE sn.step_ordinal = ?`, runID, runID, stepOrdinal).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %s step %d: %w", runID, stepOrdinal, agent.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return collect(storekit.ScanEvent)(s.query(ctx, `SELECT envelope FROM run_events WHERE run_id = ? AND step_ordinal = ? ORDER BY sequence`, runID, stepOrdinal))
}

func scanSnapshot(row storekit.RowScanner, runID string, what string) (agent.Snapshot, error) {
	var (
		sn      agent.Snapshot
		state   sql.NullString
		created string
	)
	err := row.Scan(&sn.RunID, &sn.StepOrdinal, &sn.NodeName, &sn.ResumeToken, &state, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return sn, fmt.Errorf("run %s %s snapshot: %w", runID, what, agent.ErrNotFound)
	}
	if err != nil {
		return sn, err
	}
	if state.Valid {
		sn.State = []byte(state.String)
	}
	sn.CreatedAt, err = storekit.ParseTime(created)
	return sn, err
}

// Snapshot returns step N's snapshot or an error wrapping agent.ErrNotFound
// (also for a run sc does not see).
func (s *Store) Snapshot(ctx context.Context, sc agent.Scope, runID string, stepOrdinal int) (agent.Snapshot, error) {
	cond, args, err := storekit.ScopeCond(sc, "sn.run_id", storekit.SQLitePH, 4)
	if err != nil {
		return agent.Snapshot{}, err
	}
	return scanSnapshot(s.queryRow(ctx, `SELECT `+storekit.SnapshotColumns+storekit.SnapshotFrom("?", "?")+` WHERE sn.step_ordinal = ?`+cond,
		append([]any{runID, runID, stepOrdinal}, args...)...), runID, fmt.Sprintf("step %d", stepOrdinal))
}

// LatestSnapshot returns the snapshot with the highest step ordinal.
func (s *Store) LatestSnapshot(ctx context.Context, sc agent.Scope, runID string) (agent.Snapshot, error) {
	cond, args, err := storekit.ScopeCond(sc, "sn.run_id", storekit.SQLitePH, 3)
	if err != nil {
		return agent.Snapshot{}, err
	}
	return scanSnapshot(s.queryRow(ctx, `SELECT `+storekit.SnapshotColumns+storekit.SnapshotFrom("?", "?")+` WHERE true`+cond+` ORDER BY sn.step_ordinal DESC LIMIT 1`,
		append([]any{runID, runID}, args...)...), runID, "latest")
}

// RequestControl records a control request (kind: one of the incoming
// control kinds) in one committed transaction, after checking the run has not
// ended; a cancel also moves runs.status to CANCELED_REQUESTED there. The
// write lock orders it with every CommitStep: a request recorded before a
// terminal commit is taken by it (Step.NoOtherControl), one after it is
// refused. ID is assigned (a ULID, monotonic within the process, so ids sort
// in request order); RequestedAt defaults to now. Errors wrap ErrInvalid,
// agent.ErrNotFound or agent.ErrRunTerminal.
func (s *Store) RequestControl(ctx context.Context, c agent.Control) (agent.Control, error) {
	if _, err := s.writer(); err != nil {
		return c, err
	}
	c, err := storekit.NewControl(c, s.clock)
	if err != nil {
		return c, err
	}
	err = s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		var (
			status  string
			pending int
		)
		err := tx.QueryRowContext(ctx, `SELECT status, (SELECT COUNT(*) FROM run_control WHERE run_id = ? AND taken_at IS NULL) FROM runs WHERE run_id = ?`,
			c.RunID, c.RunID).Scan(&status, &pending)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", c.RunID, agent.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := storekit.CheckControlStatus(c, agent.RunStatus(status), pending); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_control (id, run_id, kind, policy_version, requested_at) VALUES (?, ?, ?, ?, ?)`,
			c.ID, c.RunID, c.Kind, c.PolicyVersion, storekit.FmtTime(c.RequestedAt)); err != nil {
			return err
		}
		if c.Kind == agent.KindCancelRequested && agent.RunStatus(status) != agent.RunCancelRequested {
			_, err = tx.ExecContext(ctx, `UPDATE runs SET status = ?, updated_at = ? WHERE run_id = ?`,
				string(agent.RunCancelRequested), storekit.FmtTime(s.clock.Now()), c.RunID)
		}
		return err
	})
	return c, err
}

// PendingControl returns the run's requests not yet taken, in request order.
func (s *Store) PendingControl(ctx context.Context, runID string) ([]agent.Control, error) {
	q, err := s.rs.get(ctx, `SELECT id, kind, policy_version, requested_at FROM run_control WHERE run_id = ? AND taken_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return collect(func(r storekit.RowScanner) (agent.Control, error) {
		var (
			at string
			c  = agent.Control{RunID: runID}
		)
		if err := r.Scan(&c.ID, &c.Kind, &c.PolicyVersion, &at); err != nil {
			return c, err
		}
		var err error
		c.RequestedAt, err = storekit.ParseTime(at)
		return c, err
	})(q.QueryContext(ctx, runID))
}

// Unpublished returns up to limit (default 100) unpublished events as
// outbox rows, ordered by run id, then sequence: the first limit in commit
// order, the rowid range above the stored relay cursor (cursor.go), so that
// a read costs its rows, not the backlog's (a run's events are committed in
// sequence order, so each run's rows are its first unpublished ones).
func (s *Store) Unpublished(ctx context.Context, limit int) ([]agent.OutboxRow, error) {
	if limit <= 0 {
		limit = 100
	}
	q, err := s.rs.get(ctx, `SELECT `+storekit.OutboxCols+` FROM (SELECT * FROM run_events WHERE id > `+sqlCursor+` AND published_at IS NULL ORDER BY id LIMIT ?) e
		JOIN runs r ON r.run_id = e.run_id ORDER BY e.run_id, e.sequence`)
	if err != nil {
		return nil, err
	}
	return collect(storekit.ScanOutboxRow)(q.QueryContext(ctx, limit))
}

// UnpublishedAfter implements OutboxCursor.
func (s *Store) UnpublishedAfter(ctx context.Context, after int64, limit int) ([]agent.OutboxRow, int64, error) {
	if limit <= 0 {
		limit = 100
	}
	// The cursor is run_events.id, its rowid (commit order: one writer, a new
	// rowid is above every row's). The rowid range above both the caller's
	// cursor and the stored one (cursor.go): from the start, the events the
	// relay has not marked past; after a point, only those committed since.
	// A rowid below the caller's cursor is possible only after retention
	// deleted the newest events; such an event is read at the session's next
	// sweep from the start (relay/stream.go), which starts at the stored
	// cursor, never above it (retention keeps it at or below the highest id).
	q := `SELECT e.id, ` + storekit.OutboxCols + storekit.OutboxFrom + ` WHERE e.id > max(?, ` + sqlCursor + `) AND e.published_at IS NULL ORDER BY e.id LIMIT ?`
	rows, err := s.query(ctx, q, after, limit)
	if err != nil {
		return nil, after, err
	}
	defer rows.Close()
	var out []agent.OutboxRow
	last := after
	for rows.Next() {
		o, err := storekit.ScanOutboxRow(cursorRow{rows, &last})
		if err != nil {
			return nil, after, err
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, after, err
	}
	return out, last, nil
}

// MarkPublished sets published_at on the unpublished event (run, sequence).
// An event already published is not an error (two relays raced); no event
// at all wraps agent.ErrNotFound.
func (s *Store) MarkPublished(ctx context.Context, runID string, sequence int64) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	res, err := w.ExecContext(ctx, `UPDATE run_events SET published_at = ? WHERE run_id = ? AND sequence = ? AND published_at IS NULL`,
		storekit.FmtTime(s.clock.Now()), runID, sequence)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	var one int
	err = w.QueryRowContext(ctx, `SELECT 1 FROM run_events WHERE run_id = ? AND sequence = ?`, runID, sequence).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("outbox row run %s sequence %d: %w", runID, sequence, agent.ErrNotFound)
	}
	return err
}

// MarkPublishedUpTo implements UpToMarker: MarkPublishedUpToMany of one
// run.
func (s *Store) MarkPublishedUpTo(ctx context.Context, runID string, upTo int64) (int, error) {
	return s.MarkPublishedUpToMany(ctx, map[string]int64{runID: upTo})
}

// MarkPublishedUpToMany implements MultiUpToMarker: the marks and the
// stored relay cursor's advance (cursor.go) in one transaction.
func (s *Store) MarkPublishedUpToMany(ctx context.Context, upTo map[string]int64) (int, error) {
	if _, err := s.writer(); err != nil {
		return 0, err
	}
	total := 0
	err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		total = 0
		now := storekit.FmtTime(s.clock.Now())
		q, err := s.ws.tx(ctx, tx, sqlMarkUpTo)
		if err != nil {
			return err
		}
		for runID, seq := range upTo {
			res, err := q.ExecContext(ctx, now, runID, seq)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			total += int(n)
		}
		if total == 0 {
			return nil
		}
		return s.advanceCursor(ctx, tx)
	})
	if err != nil {
		return 0, err
	}
	return total, nil
}

// Requeue implements Requeuer: it clears published_at of the run's
// published events with sequence >= fromSequence, moves the stored relay
// cursor below them (cursor.go) and wakes the relay.
func (s *Store) Requeue(ctx context.Context, runID string, fromSequence int64) (int, error) {
	if _, err := s.writer(); err != nil {
		return 0, err
	}
	var n int64
	err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE run_events SET published_at = NULL WHERE run_id = ? AND sequence >= ? AND published_at IS NOT NULL`,
			runID, fromSequence)
		if err != nil {
			return err
		}
		if n, _ = res.RowsAffected(); n == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, sqlCursorRequeue, storekit.FmtTime(s.clock.Now()), runID, fromSequence)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		select {
		case s.commits <- struct{}{}:
		default:
		}
	}
	return int(n), nil
}

// KV implements storekit.Driver (Core.GetKV).
func (d driver) KV(ctx context.Context, key string) ([]byte, bool, error) {
	q, err := d.s.rs.get(ctx, `SELECT value FROM agent_kv WHERE key = ?`)
	if err != nil {
		return nil, false, err
	}
	var v []byte
	err = q.QueryRowContext(ctx, key).Scan(&v)
	return v, err == nil, noRows(err)
}

// PutKV inserts or replaces key.
func (s *Store) PutKV(ctx context.Context, key string, value []byte) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	_, err = w.ExecContext(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`, key, value, storekit.FmtTime(s.clock.Now()))
	return s.exhausted(err)
}

// InitKV sets each key of kvs that is not set yet, all in one transaction;
// keys already set keep their values (policy.KVInit).
func (s *Store) InitKV(ctx context.Context, kvs map[string][]byte) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := storekit.FmtTime(s.clock.Now())
	for _, k := range slices.Sorted(maps.Keys(kvs)) {
		v := kvs[k]
		if v == nil {
			v = []byte{}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`, k, v, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ownerOnly creates the database file mode 0600 (SQLite gives its -wal and
// -shm files the database file's mode) and takes group and other access
// from an existing one and its companions: the store holds run requests,
// their artifact references and token hashes.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshots: %w", err)
		}
	}
	return nil
}

// cursorRow scans a row of the cursor's read: the rowid into last, the
// rest as storekit.ScanOutboxRow's columns.
type cursorRow struct {
	rows *sql.Rows
	last *int64
}

func (c cursorRow) Scan(dest ...any) error {
	return c.rows.Scan(append([]any{c.last}, dest...)...)
}
