package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
// unpublished event of the same run below them) of any run but not (this
// claim's own), oldest first through run_events_unpublished_order, and
// returns their runs: the sweep. SKIP LOCKED skips heads other relays hold.
func (c *pgClaim) claimHeads(ctx context.Context, limit int, not []string) ([]string, error) {
	rows, err := c.tx.Query(ctx, `SELECT o.run_id FROM run_events o
		WHERE o.published_at IS NULL AND o.run_id <> ALL($2::text[])
		  AND NOT EXISTS (SELECT 1 FROM run_events p WHERE p.run_id = o.run_id AND p.published_at IS NULL AND p.sequence < o.sequence)
		ORDER BY o.id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, limit, not)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox heads: %w", err)
	}
	return ids, nil
}

// claimLocal claims the heads of this process's runs and reads their rows
// in one statement (localClaimSQL); the runs of them left with no
// unpublished row (published by another relay's sweep, or a commit rolled
// back) are forgotten.
func (c *pgClaim) claimLocal(ctx context.Context, maxRuns, rowsPerRun int) ([][]agent.OutboxRow, error) {
	only := make([]string, 0, len(c.local))
	for id := range c.local {
		only = append(only, id)
	}
	runs, err := c.scanRuns(c.tx.Query(ctx, localClaimSQL, only, maxRuns, rowsPerRun))
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox rows: %w", err)
	}
	if len(runs) == len(only) {
		return runs, nil
	}
	rest := slices.DeleteFunc(only, func(id string) bool {
		return slices.ContainsFunc(runs, func(run []agent.OutboxRow) bool { return run[0].RunID == id })
	})
	// One probe of run_events_unpublished per run, not its every row.
	rows, err := c.tx.Query(ctx, `SELECT h.run_id FROM unnest($1::text[]) AS h(run_id)
		WHERE EXISTS (SELECT 1 FROM run_events x WHERE x.run_id = h.run_id AND x.published_at IS NULL)`, rest)
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
	return runs, nil
}

// localClaimSQL locks the heads of up to $2 of the runs $1, oldest first,
// and reads up to $3 unpublished rows of each from its head on, in one
// statement. A run's head is its lowest unpublished sequence, found by one
// probe of run_events_unpublished (the sweep's NOT EXISTS test of every
// unpublished row of the runs read them all: 2,400 rows and their probes
// per claim at 8 runs). The lock is taken on the head found; a head
// another relay holds is skipped (SKIP LOCKED), and one it marked and
// committed since this statement's snapshot is rechecked on its new
// version (published: not a head, skipped), so a run is claimed only at
// its true head. The rows are read in the same snapshot: only the head's
// holder marks a run's rows. The heads are found in their own CTE: joined
// with the rows to lock in one, the planner probed the head once per
// unpublished row of the runs (its estimates: one row per run).
const localClaimSQL = `WITH found AS MATERIALIZED (
		SELECT h.run_id, hd.sequence FROM unnest($1::text[]) AS h(run_id)
		CROSS JOIN LATERAL (SELECT x.sequence FROM run_events x WHERE x.run_id = h.run_id AND x.published_at IS NULL ORDER BY x.sequence LIMIT 1) hd),
	heads AS MATERIALIZED (
		SELECT e.run_id FROM found f
		JOIN run_events e ON e.run_id = f.run_id AND e.sequence = f.sequence AND e.published_at IS NULL
		ORDER BY e.id
		LIMIT $2
		FOR UPDATE OF e SKIP LOCKED)
	SELECT ` + storekit.OutboxCols + ` FROM heads h
		JOIN runs r ON r.run_id = h.run_id
		CROSS JOIN LATERAL (SELECT * FROM run_events x WHERE x.run_id = h.run_id AND x.published_at IS NULL ORDER BY x.sequence LIMIT $3) e
		ORDER BY e.run_id, e.sequence`

func (c *pgClaim) claim(ctx context.Context, maxRuns, rowsPerRun int, sweep bool) ([][]agent.OutboxRow, error) {
	var runs [][]agent.OutboxRow
	if len(c.local) > 0 {
		var err error
		if runs, err = c.claimLocal(ctx, maxRuns, rowsPerRun); err != nil {
			return nil, err
		}
	}
	if !sweep || len(runs) >= maxRuns {
		return runs, nil
	}
	ids := make([]string, 0, len(runs))
	for _, run := range runs {
		ids = append(ids, run[0].RunID)
	}
	swept, err := c.claimHeads(ctx, maxRuns-len(ids), ids)
	if err != nil || len(swept) == 0 {
		return runs, err
	}
	sweptRuns, err := c.readRows(ctx, swept, rowsPerRun)
	if err != nil {
		return nil, err
	}
	full := len(ids)+len(swept) == maxRuns
	for _, run := range sweptRuns {
		full = full || len(run) == rowsPerRun
	}
	if full {
		c.s.outbox.sweepAgain()
	}
	runs = append(runs, sweptRuns...)
	slices.SortFunc(runs, func(a, b []agent.OutboxRow) int { return strings.Compare(a[0].RunID, b[0].RunID) })
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
	return c.scanRuns(rows, nil)
}

// scanRuns groups rows of OutboxCols, ordered by run and sequence, by run.
func (c *pgClaim) scanRuns(rows pgx.Rows, err error) ([][]agent.OutboxRow, error) {
	if err != nil {
		return nil, err
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

// sqlMarkUpToMany marks each run $2[i]'s unpublished events up to $3[i]
// published at $1: the claim's marks as one statement (one plan, one
// round trip) where a batch ran one UPDATE per run.
const sqlMarkUpToMany = `UPDATE run_events e SET published_at = $1
	FROM unnest($2::text[], $3::bigint[]) AS m(run_id, up_to)
	WHERE e.run_id = m.run_id AND e.sequence <= m.up_to AND e.published_at IS NULL`

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
	var ids []string
	var upTos []int64
	for _, run := range c.runs {
		upTo, ok := ackedUpTo[run[0].RunID]
		if !ok || upTo < run[0].Sequence {
			continue
		}
		ids, upTos = append(ids, run[0].RunID), append(upTos, upTo)
	}
	marked := 0
	if len(ids) > 0 {
		tag, err := c.tx.Exec(ctx, sqlMarkUpToMany, storekit.StoreTime(c.s.clock.Now()), ids, upTos)
		if err != nil {
			return 0, fmt.Errorf("snapshots: mark claimed outbox rows: %w", err)
		}
		marked = int(tag.RowsAffected())
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
