package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// The runs PruneRuns may delete and the ones it must keep (held), in the
// embedded dialect: terminal, last changed before the cutoff, and without
// (with) an unpublished event or an active lease.
const (
	sqlPruneEligible = `FROM runs r WHERE r.status IN ('FINISHED', 'FAILED', 'CANCELED') AND r.updated_at < ?`
	sqlPruneBlocked  = `(EXISTS (SELECT 1 FROM run_events o WHERE o.run_id = r.run_id AND o.published_at IS NULL AND o.id > ` + sqlCursor + `)
		OR EXISTS (SELECT 1 FROM device_leases l WHERE l.run_id = r.run_id AND l.released_at IS NULL))`
)

// PruneRuns implements agent.Pruner in one IMMEDIATE transaction (SQLite
// has one writer: a concurrent pruner, in this process or another, waits
// for it and then finds the deleted runs gone).
func (s *Store) PruneRuns(ctx context.Context, cutoff time.Time, limit int) (agent.PruneResult, error) {
	w, err := s.writer()
	if err != nil {
		return agent.PruneResult{}, err
	}
	limit = storekit.PruneLimit(limit)
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return agent.PruneResult{}, err
	}
	defer tx.Rollback()
	at := storekit.FmtTime(cutoff)
	var res agent.PruneResult
	ids, err := collect(storekit.ScanString)(tx.QueryContext(ctx, `SELECT r.run_id `+sqlPruneEligible+` AND NOT `+sqlPruneBlocked+
		` ORDER BY r.updated_at, r.run_id LIMIT ?`, at, limit))
	if err != nil {
		return res, fmt.Errorf("prune: select runs: %w", err)
	}
	if len(ids) > 0 {
		if err := s.pruneDelete(ctx, tx, ids, &res); err != nil {
			return agent.PruneResult{}, err
		}
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) `+sqlPruneEligible+` AND `+sqlPruneBlocked, at).Scan(&res.Held); err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: count held runs: %w", err)
	}
	if res.Held > 0 {
		if res.HeldRuns, err = collect(storekit.ScanString)(tx.QueryContext(ctx, `SELECT r.run_id `+sqlPruneEligible+` AND `+sqlPruneBlocked+
			` ORDER BY r.updated_at, r.run_id LIMIT ?`, at, storekit.PruneHeldNames)); err != nil {
			return agent.PruneResult{}, fmt.Errorf("prune: held runs: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return agent.PruneResult{}, err
	}
	return res, nil
}

// pruneDelete deletes the runs ids and their rows in tx, counting them in
// res, and keeps the relay cursor at or below the highest event id left
// (cursor.go).
func (s *Store) pruneDelete(ctx context.Context, tx *sql.Tx, ids []string, res *agent.PruneResult) error {
	in := `(?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM run_events WHERE run_id IN `+in+` AND node_name IS NOT NULL`, args...).Scan(&res.Snapshots); err != nil {
		return fmt.Errorf("prune: count snapshots: %w", err)
	}
	counts := storekit.PruneCounts(res)
	for _, table := range storekit.PruneTables {
		r, err := tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE run_id IN `+in, args...)
		if err != nil {
			return fmt.Errorf("prune: %s: %w", table, err)
		}
		n, _ := r.RowsAffected()
		*counts[table] += n
	}
	res.Outbox = res.Events
	r, err := tx.ExecContext(ctx, `DELETE FROM device_leases WHERE released_at IS NOT NULL AND run_id IN `+in, args...)
	if err != nil {
		return fmt.Errorf("prune: device_leases: %w", err)
	}
	res.Leases, _ = r.RowsAffected()
	if r, err = tx.ExecContext(ctx, `DELETE FROM runs WHERE run_id IN `+in, args...); err != nil {
		return fmt.Errorf("prune: runs: %w", err)
	}
	res.Runs, _ = r.RowsAffected()
	if _, err := tx.ExecContext(ctx, sqlCursorClamp, storekit.FmtTime(s.clock.Now())); err != nil {
		return fmt.Errorf("prune: relay cursor: %w", err)
	}
	return nil
}
