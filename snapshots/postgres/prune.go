package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// pgPruneLock is the transaction-level advisory lock key of PruneRuns
// ("sgprune" in ASCII): one pruner of the fleet works at a time, the others
// wait for it and then find its runs gone.
const pgPruneLock = 0x736770_72756e65

// errPruneRace: a relay requeued an event of a run while it was being
// pruned; the batch is rolled back and the run held at the next pass.
var errPruneRace = errors.New("prune: an event of a run being pruned became unpublished meanwhile; nothing deleted")

// PruneRuns implements agent.Pruner. Pruners of the fleet take turns on a
// transaction-level advisory lock (released at commit or rollback, so a
// pooled connection never keeps it); the chosen runs are locked FOR UPDATE,
// and a run's event made unpublished after the choice (Requeue) rolls the
// whole batch back.
func (s *Store) PruneRuns(ctx context.Context, cutoff time.Time, limit int) (agent.PruneResult, error) {
	limit = storekit.PruneLimit(limit)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return agent.PruneResult{}, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pgPruneLock)); err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: lock: %w", err)
	}
	at := storekit.StoreTime(cutoff)
	ids, err := pgStrings(tx.Query(ctx, `SELECT r.run_id `+pgPruneEligible+` AND NOT `+pgPruneBlocked+
		` ORDER BY r.updated_at, r.run_id LIMIT $2 FOR UPDATE OF r SKIP LOCKED`, at, limit))
	if err != nil {
		return agent.PruneResult{}, fmt.Errorf("prune: select runs: %w", err)
	}
	var res agent.PruneResult
	if len(ids) > 0 {
		if err := pgPruneDelete(ctx, tx, ids, &res); err != nil {
			return agent.PruneResult{}, err
		}
	}
	if err := pgPruneHeld(ctx, tx, at, &res); err != nil {
		return agent.PruneResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return agent.PruneResult{}, err
	}
	return res, nil
}

// pgPruneDelete deletes the runs ids (locked) and their rows, counting
// them in res; errPruneRace when one of their events is unpublished.
func pgPruneDelete(ctx context.Context, tx pgx.Tx, ids []string, res *agent.PruneResult) error {
	var unpublished int64
	if err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM run_events WHERE run_id = ANY($1) RETURNING run_id, sequence, published_at, node_name)
		SELECT count(*), count(*) FILTER (WHERE published_at IS NULL AND sequence > `+sqlPosition("d.run_id")+`), count(*) FILTER (WHERE node_name IS NOT NULL) FROM d`,
		ids).Scan(&res.Events, &unpublished, &res.Snapshots); err != nil {
		return fmt.Errorf("prune: run_events: %w", err)
	}
	if unpublished > 0 {
		return errPruneRace
	}
	res.Outbox = res.Events
	counts := storekit.PruneCounts(res)
	for _, table := range storekit.PruneTables {
		if table == "run_events" {
			continue
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE run_id = ANY($1)`, ids)
		if err != nil {
			return fmt.Errorf("prune: %s: %w", table, err)
		}
		*counts[table] += tag.RowsAffected()
	}
	tag, err := tx.Exec(ctx, `DELETE FROM device_leases WHERE released_at IS NOT NULL AND run_id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("prune: device_leases: %w", err)
	}
	res.Leases = tag.RowsAffected()
	if tag, err = tx.Exec(ctx, `DELETE FROM runs WHERE run_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("prune: runs: %w", err)
	}
	res.Runs = tag.RowsAffected()
	return nil
}

// pgPruneHeld counts (and names the first few of) the runs eligible at
// cutoff at but held by an unpublished event or an active lease.
func pgPruneHeld(ctx context.Context, tx pgx.Tx, at time.Time, res *agent.PruneResult) error {
	if err := tx.QueryRow(ctx, `SELECT count(*) `+pgPruneEligible+` AND `+pgPruneBlocked, at).Scan(&res.Held); err != nil {
		return fmt.Errorf("prune: count held runs: %w", err)
	}
	if res.Held == 0 {
		return nil
	}
	var err error
	if res.HeldRuns, err = pgStrings(tx.Query(ctx, `SELECT r.run_id `+pgPruneEligible+` AND `+pgPruneBlocked+
		` ORDER BY r.updated_at, r.run_id LIMIT $2`, at, storekit.PruneHeldNames)); err != nil {
		return fmt.Errorf("prune: held runs: %w", err)
	}
	return nil
}

func pgStrings(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Postgres dialect of sqlPruneEligible and sqlPruneBlocked.
const (
	pgPruneEligible = `FROM runs r WHERE r.status IN ('FINISHED', 'FAILED', 'CANCELED') AND r.updated_at < $1`
	pgPruneBlocked  = `(EXISTS (SELECT 1 FROM run_publish p JOIN run_events o ON o.run_id = p.run_id AND o.sequence > p.published_seq AND o.published_at IS NULL
			WHERE p.run_id = r.run_id AND p.committed_seq > p.published_seq)
		OR EXISTS (SELECT 1 FROM device_leases l WHERE l.run_id = r.run_id AND l.released_at IS NULL))`
)
