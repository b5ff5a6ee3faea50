package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// ClaimOutbox implements OutboxClaimer: in one transaction it locks the head
// row (the lowest unpublished sequence) of up to maxRuns runs, oldest rows
// first, with FOR UPDATE SKIP LOCKED, then reads up to rowsPerRun unpublished
// rows of each of those runs from the head on. A run whose head another
// relay holds is skipped, and a later row of a run is never a head while an
// earlier one is unpublished, so two relays never publish one run at once.
// The transaction stays open until Finish (or Release): the caller publishes
// meanwhile. An empty claim (no run free) is returned already finished.
func (s *Store) ClaimOutbox(ctx context.Context, maxRuns, rowsPerRun int) (snapshots.OutboxClaim, error) {
	if maxRuns <= 0 {
		maxRuns = 1
	}
	if rowsPerRun <= 0 {
		rowsPerRun = 256
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	c := &pgClaim{s: s, tx: tx}
	runs, err := c.claim(ctx, maxRuns, rowsPerRun)
	if err != nil || len(runs) == 0 {
		tx.Rollback(context.Background())
		return &pgClaim{done: true}, err
	}
	c.runs = runs
	return c, nil
}

func (c *pgClaim) claim(ctx context.Context, maxRuns, rowsPerRun int) ([][]agent.OutboxRow, error) {
	// Heads: unpublished events with no unpublished event of the same run
	// below them, oldest first (run_events_unpublished_order). SKIP LOCKED
	// skips heads other relays hold.
	rows, err := c.tx.Query(ctx, sqlClaimHeads, maxRuns)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	// Each run's first rowsPerRun unpublished events, in sequence order.
	rows, err = c.tx.Query(ctx, `SELECT `+storekit.OutboxCols+` FROM unnest($1::text[]) AS h(run_id)
		JOIN runs r ON r.run_id = h.run_id
		CROSS JOIN LATERAL (SELECT * FROM run_events x WHERE x.run_id = h.run_id AND x.published_at IS NULL ORDER BY x.sequence LIMIT $2) e
		ORDER BY e.run_id, e.sequence`, ids, rowsPerRun)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox rows: %w", err)
	}
	defer rows.Close()
	var out [][]agent.OutboxRow
	for rows.Next() {
		o, err := storekit.ScanOutboxRow(rows)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && out[n-1][0].RunID == o.RunID {
			out[n-1] = append(out[n-1], o)
		} else {
			out = append(out, []agent.OutboxRow{o})
		}
	}
	return out, rows.Err()
}

// sqlClaimHeads is the claim's read of run heads (ClaimOutbox), locked.
const sqlClaimHeads = `SELECT o.run_id FROM run_events o
		WHERE o.published_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM run_events p WHERE p.run_id = o.run_id AND p.published_at IS NULL AND p.sequence < o.sequence)
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`

// pgClaim is one open claim transaction.
type pgClaim struct {
	s    *Store
	tx   pgx.Tx
	runs [][]agent.OutboxRow
	done bool
}

func (c *pgClaim) Runs() [][]agent.OutboxRow { return c.runs }

// Finish marks each run's rows up to ackedUpTo[run] published and commits,
// releasing the heads. A run missing from the map keeps all its rows.
func (c *pgClaim) Finish(ctx context.Context, ackedUpTo map[string]int64) (int, error) {
	if c.done {
		return 0, errors.New("snapshots: outbox claim already finished")
	}
	c.done = true
	defer c.tx.Rollback(context.Background())
	now := storekit.StoreTime(c.s.clock.Now())
	b := &pgx.Batch{}
	var qs []*pgx.QueuedQuery
	for _, run := range c.runs {
		upTo, ok := ackedUpTo[run[0].RunID]
		if !ok || upTo < run[0].Sequence {
			continue
		}
		qs = append(qs, b.Queue(sqlMarkUpTo, now, run[0].RunID, upTo))
	}
	marked := 0
	for _, q := range qs {
		q.Exec(func(tag pgconn.CommandTag) error { marked += int(tag.RowsAffected()); return nil })
	}
	if len(qs) > 0 {
		if err := c.tx.SendBatch(ctx, b).Close(); err != nil {
			return 0, fmt.Errorf("snapshots: mark claimed outbox rows: %w", err)
		}
	}
	if err := c.tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("snapshots: commit outbox claim: %w", err)
	}
	return marked, nil
}

// Release ends the claim without marking anything (rolls back).
func (c *pgClaim) Release() {
	if c.done {
		return
	}
	c.done = true
	c.tx.Rollback(context.Background())
}
