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
	// Heads: unpublished rows with no unpublished row of the same run below
	// them (run_outbox_unpublished_key makes (run, sequence) unique among
	// unpublished rows). SKIP LOCKED skips heads other relays hold.
	rows, err := c.tx.Query(ctx, `SELECT o.run_id FROM run_outbox o
		WHERE o.published_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM run_outbox p WHERE p.run_id = o.run_id AND p.published_at IS NULL AND p.sequence < o.sequence)
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, maxRuns)
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
	// The body is the event's envelope (one copy, in run_events).
	rows, err = c.tx.Query(ctx, `SELECT r.run_id, r.sequence, r.event_id, r.subject, e.envelope FROM (
			SELECT run_id, sequence, event_id, subject, row_number() OVER (PARTITION BY run_id ORDER BY sequence) AS n
			FROM run_outbox WHERE run_id = ANY($1) AND published_at IS NULL) r
		JOIN run_events e ON e.run_id = r.run_id AND e.sequence = r.sequence
		WHERE r.n <= $2 ORDER BY r.run_id, r.sequence`, ids, rowsPerRun)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox rows: %w", err)
	}
	defer rows.Close()
	var out [][]agent.OutboxRow
	for rows.Next() {
		var o agent.OutboxRow
		if err := rows.Scan(&o.RunID, &o.Sequence, &o.EventID, &o.Subject, &o.Body); err != nil {
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
		qs = append(qs, b.Queue(`UPDATE run_outbox SET published_at = $1 WHERE run_id = $2 AND sequence <= $3 AND published_at IS NULL`,
			now, run[0].RunID, upTo))
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
