package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

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
//
// Which heads: those of the runs this process committed events of
// (localOutbox), through the (run_id, sequence) index; and, at most every
// SweepEvery, those of any run, oldest first (the sweep: the rows no live
// relay takes). With neither, the claim asks Postgres nothing.
func (s *Store) ClaimOutbox(ctx context.Context, maxRuns, rowsPerRun int) (snapshots.OutboxClaim, error) {
	if maxRuns <= 0 {
		maxRuns = 1
	}
	if rowsPerRun <= 0 {
		rowsPerRun = 256
	}
	local, sweep, again := s.outbox.claimable(time.Now())
	if sweep && !again {
		var err error
		if sweep, err = s.fleetSweepDue(ctx); err != nil {
			return nil, err
		}
	}
	if sweep || again {
		s.outbox.swept(sweep, s.wake)
	}
	if len(local) == 0 && !sweep {
		return &pgClaim{done: true}, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	c := &pgClaim{s: s, tx: tx, local: local, rowsPerRun: rowsPerRun}
	runs, err := c.claim(ctx, maxRuns, rowsPerRun, sweep)
	if err != nil || len(runs) == 0 {
		tx.Rollback(context.Background())
		return &pgClaim{done: true}, err
	}
	c.runs = runs
	return c, nil
}

// sweepKey is the agent_kv row whose updated_at is the fleet's last sweep.
const sweepKey = "relay.outbox_sweep"

// sweepSlack: the fleet's turn comes this much before SweepEvery by the
// database's clock, so that a daemon's own SweepEvery (its clock, read
// before the upsert) is not refused by a hair.
const sweepSlack = 100 * time.Millisecond

// fleetSweepDue reports whether no relay of the fleet swept the outbox in
// the last SweepEvery by the database's clock, and if so records this one:
// one upsert on its own (outside the claim's transaction, which stays open
// while it publishes: the row lock would hold every other daemon's check).
func (s *Store) fleetSweepDue(ctx context.Context) (bool, error) {
	rows, err := s.pool.Query(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES ($1, '', clock_timestamp())
		ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at
		WHERE agent_kv.updated_at <= excluded.updated_at - $2::bigint * interval '1 microsecond'
		RETURNING 1`, sweepKey, (SweepEvery - sweepSlack).Microseconds())
	if err != nil {
		return false, fmt.Errorf("snapshots: outbox sweep turn: %w", err)
	}
	n, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return false, fmt.Errorf("snapshots: outbox sweep turn: %w", err)
	}
	return len(n) == 1, nil
}

// claimHeads locks up to limit heads (unpublished events with no
// unpublished event of the same run below them), oldest first, and returns
// their runs. only: the runs to look at; when nil, any run but those of
// not (this claim's own). SKIP LOCKED skips heads other relays hold.
func (c *pgClaim) claimHeads(ctx context.Context, limit int, only, not []string) ([]string, error) {
	// Two statements, not one with an OR: each keeps its own plan (the
	// local one through run_events_unpublished, the sweep through
	// run_events_unpublished_order).
	which, arg := `o.run_id <> ALL($2::text[])`, not
	if only != nil {
		which, arg = `o.run_id = ANY($2::text[])`, only
	}
	rows, err := c.tx.Query(ctx, `SELECT o.run_id FROM run_events o
		WHERE o.published_at IS NULL AND `+which+`
		  AND NOT EXISTS (SELECT 1 FROM run_events p WHERE p.run_id = o.run_id AND p.published_at IS NULL AND p.sequence < o.sequence)
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, limit, arg)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	return ids, nil
}

// claimLocal claims the heads of this process's runs; the runs of them
// left with no unpublished row (published by another relay's sweep, or a
// commit rolled back) are forgotten.
func (c *pgClaim) claimLocal(ctx context.Context, maxRuns int) ([]string, error) {
	only := make([]string, 0, len(c.local))
	for id := range c.local {
		only = append(only, id)
	}
	ids, err := c.claimHeads(ctx, maxRuns, only, []string{})
	if err != nil || len(ids) == len(only) {
		return ids, err
	}
	rest := slices.DeleteFunc(only, func(id string) bool { return slices.Contains(ids, id) })
	rows, err := c.tx.Query(ctx, `SELECT DISTINCT run_id FROM run_events WHERE run_id = ANY($1) AND published_at IS NULL`, rest)
	if err != nil {
		return nil, fmt.Errorf("snapshots: outbox runs pending: %w", err)
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("snapshots: outbox runs pending: %w", err)
	}
	for _, id := range rest {
		if !slices.Contains(pending, id) {
			c.s.outbox.forget(id, c.local[id])
		}
	}
	return ids, nil
}

func (c *pgClaim) claim(ctx context.Context, maxRuns, rowsPerRun int, sweep bool) ([][]agent.OutboxRow, error) {
	var ids []string
	if len(c.local) > 0 {
		var err error
		if ids, err = c.claimLocal(ctx, maxRuns); err != nil {
			return nil, err
		}
	}
	var swept []string
	if sweep && len(ids) < maxRuns {
		var err error
		if swept, err = c.claimHeads(ctx, maxRuns-len(ids), nil, append([]string{}, ids...)); err != nil {
			return nil, err
		}
		ids = append(ids, swept...)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	runs, err := c.readRows(ctx, ids, rowsPerRun)
	if err != nil {
		return nil, err
	}
	full := len(ids) == maxRuns && len(swept) > 0
	for _, run := range runs {
		full = full || (len(run) == rowsPerRun && slices.Contains(swept, run[0].RunID))
	}
	if full {
		c.s.outbox.sweepAgain()
	}
	return runs, nil
}

// readRows reads up to rowsPerRun unpublished rows of each of runs from
// its head on, with their bodies.
func (c *pgClaim) readRows(ctx context.Context, ids []string, rowsPerRun int) ([][]agent.OutboxRow, error) {
	// Each run's first rowsPerRun unpublished events, in sequence order.
	rows, err := c.tx.Query(ctx, `SELECT `+storekit.OutboxCols+` FROM unnest($1::text[]) AS h(run_id)
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

// pgClaim is one open claim transaction.
type pgClaim struct {
	s    *Store
	tx   pgx.Tx
	runs [][]agent.OutboxRow
	done bool
	// local: this process's runs at the claim, with their generations
	// (localOutbox); rowsPerRun: the claim's bound of rows per run.
	local      map[string]uint64
	rowsPerRun int
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
	// A local run whose rows the claim read all (fewer than its bound) and
	// marked all is done, unless it committed again since.
	for _, run := range c.runs {
		id := run[0].RunID
		gen, ok := c.local[id]
		if ok && len(run) < c.rowsPerRun && ackedUpTo[id] >= run[len(run)-1].Sequence {
			c.s.outbox.forget(id, gen)
		}
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
