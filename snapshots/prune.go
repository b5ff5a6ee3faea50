package snapshots

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
)

var (
	_ agent.Pruner = (*Embedded)(nil)
	_ agent.Pruner = (*Postgres)(nil)
)

// pruneMaxLimit bounds one PruneRuns transaction: the embedded store's
// writer (and every step commit behind it) waits for it.
const pruneMaxLimit = 5000

// pruneHeldNames is how many held runs a PruneResult names.
const pruneHeldNames = 100

// pruneTables are the tables holding a run's rows, children first (every
// one references runs(run_id)); device_leases is handled apart (only ended
// leases go).
var pruneTables = []string{"run_events", "run_outbox", "agent_state_snapshot", "run_control", "artifacts"}

func pruneLimit(limit int) int {
	if limit <= 0 {
		return 1000
	}
	return min(limit, pruneMaxLimit)
}

// The runs PruneRuns may delete and the ones it must keep (held), in the
// embedded dialect: terminal, last changed before the cutoff, and without
// (with) an unpublished outbox row or an active lease.
const (
	sqlPruneEligible = `FROM runs r WHERE r.status IN ('FINISHED', 'FAILED', 'CANCELED') AND r.updated_at < ?`
	sqlPruneBlocked  = `(EXISTS (SELECT 1 FROM run_outbox o WHERE o.run_id = r.run_id AND o.published_at IS NULL)
		OR EXISTS (SELECT 1 FROM device_leases l WHERE l.run_id = r.run_id AND l.released_at IS NULL))`
)

// PruneRuns implements agent.Pruner in one IMMEDIATE transaction (SQLite
// has one writer: a concurrent pruner, in this process or another, waits
// for it and then finds the deleted runs gone).
func (s *Embedded) PruneRuns(ctx context.Context, cutoff time.Time, limit int) (agent.PruneResult, error) {
	w, err := s.writer()
	if err != nil {
		return agent.PruneResult{}, err
	}
	limit = pruneLimit(limit)
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return agent.PruneResult{}, err
	}
	defer tx.Rollback()
	at := fmtTime(cutoff)
	var res agent.PruneResult
	ids, err := sqliteStrings(tx.QueryContext(ctx, `SELECT r.run_id `+sqlPruneEligible+` AND NOT `+sqlPruneBlocked+
		` ORDER BY r.updated_at, r.run_id LIMIT ?`, at, limit))
	if err != nil {
		return res, fmt.Errorf("prune: select runs: %w", err)
	}
	if len(ids) > 0 {
		in := `(?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		counts := []*int64{&res.Events, &res.Outbox, &res.Snapshots, &res.Controls, &res.EvidenceRows}
		for i, table := range pruneTables {
			r, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE run_id IN `+in, args...)
			if err != nil {
				return agent.PruneResult{}, fmt.Errorf("prune: %s: %w", table, err)
			}
			*counts[i], _ = r.RowsAffected()
		}
		r, err := tx.ExecContext(ctx, `DELETE FROM device_leases WHERE released_at IS NOT NULL AND run_id IN `+in, args...)
		if err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: device_leases: %w", err)
		}
		res.Leases, _ = r.RowsAffected()
		if r, err = tx.ExecContext(ctx, `DELETE FROM runs WHERE run_id IN `+in, args...); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: runs: %w", err)
		}
		res.Runs, _ = r.RowsAffected()
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) `+sqlPruneEligible+` AND `+sqlPruneBlocked, at).Scan(&res.Held); err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: count held runs: %w", err)
	}
	if res.Held > 0 {
		if res.HeldRuns, err = sqliteStrings(tx.QueryContext(ctx, `SELECT r.run_id `+sqlPruneEligible+` AND `+sqlPruneBlocked+
			` ORDER BY r.updated_at, r.run_id LIMIT ?`, at, pruneHeldNames)); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: held runs: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return agent.PruneResult{}, err
	}
	return res, nil
}

func sqliteStrings(rows *sql.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// pgPruneLock is the transaction-level advisory lock key of PruneRuns
// ("sgprune" in ASCII): one pruner of the fleet works at a time, the others
// wait for it and then find its runs gone.
const pgPruneLock = 0x736770_72756e65

// Postgres dialect of sqlPruneEligible and sqlPruneBlocked.
const (
	pgPruneEligible = `FROM runs r WHERE r.status IN ('FINISHED', 'FAILED', 'CANCELED') AND r.updated_at < $1`
	pgPruneBlocked  = `(EXISTS (SELECT 1 FROM run_outbox o WHERE o.run_id = r.run_id AND o.published_at IS NULL)
		OR EXISTS (SELECT 1 FROM device_leases l WHERE l.run_id = r.run_id AND l.released_at IS NULL))`
)

// errPruneRace: a relay requeued an outbox row of a run while it was being
// pruned; the batch is rolled back and the run held at the next pass.
var errPruneRace = errors.New("prune: an outbox row of a run being pruned became unpublished meanwhile; nothing deleted")

// PruneRuns implements agent.Pruner. Pruners of the fleet take turns on a
// transaction-level advisory lock (released at commit or rollback, so a
// pooled connection never keeps it); the chosen runs are locked FOR UPDATE,
// and a run's outbox row made unpublished after the choice (Requeue) rolls
// the whole batch back.
func (s *Postgres) PruneRuns(ctx context.Context, cutoff time.Time, limit int) (agent.PruneResult, error) {
	limit = pruneLimit(limit)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return agent.PruneResult{}, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgPruneLock)); err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: lock: %w", err)
	}
	at := storeTime(cutoff)
	var res agent.PruneResult
	ids, err := pgStrings(tx.Query(ctx, `SELECT r.run_id `+pgPruneEligible+` AND NOT `+pgPruneBlocked+
		` ORDER BY r.updated_at, r.run_id LIMIT $2 FOR UPDATE OF r SKIP LOCKED`, at, limit))
	if err != nil {
		return res, fmt.Errorf("prune: select runs: %w", err)
	}
	if len(ids) > 0 {
		var unpublished int64
		if err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM run_outbox WHERE run_id = ANY($1) RETURNING published_at)
			SELECT count(*), count(*) FILTER (WHERE published_at IS NULL) FROM d`, ids).Scan(&res.Outbox, &unpublished); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: run_outbox: %w", err)
		}
		if unpublished > 0 {
			return agent.PruneResult{}, errPruneRace
		}
		counts := map[string]*int64{"run_events": &res.Events, "agent_state_snapshot": &res.Snapshots, "run_control": &res.Controls,
			"artifacts": &res.EvidenceRows}
		for _, table := range pruneTables {
			if counts[table] == nil {
				continue
			}
			tag, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE run_id = ANY($1)`, ids)
			if err != nil {
				return agent.PruneResult{}, fmt.Errorf("prune: %s: %w", table, err)
			}
			*counts[table] = tag.RowsAffected()
		}
		tag, err := tx.Exec(ctx, `DELETE FROM device_leases WHERE released_at IS NOT NULL AND run_id = ANY($1)`, ids)
		if err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: device_leases: %w", err)
		}
		res.Leases = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `DELETE FROM runs WHERE run_id = ANY($1)`, ids); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: runs: %w", err)
		}
		res.Runs = tag.RowsAffected()
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) `+pgPruneEligible+` AND `+pgPruneBlocked, at).Scan(&res.Held); err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: count held runs: %w", err)
	}
	if res.Held > 0 {
		if res.HeldRuns, err = pgStrings(tx.Query(ctx, `SELECT r.run_id `+pgPruneEligible+` AND `+pgPruneBlocked+
			` ORDER BY r.updated_at, r.run_id LIMIT $2`, at, pruneHeldNames)); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: held runs: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return agent.PruneResult{}, err
	}
	return res, nil
}

func pgStrings(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
