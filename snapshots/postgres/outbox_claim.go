package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// ClaimOutbox implements OutboxClaimer: in one transaction it holds up to
// maxRuns runs with events to publish (run_publish_pending), least recently
// marked first, each by a transaction-level advisory lock tried without
// waiting (pgPublishLockClass), then reads up to rowsPerRun unpublished
// rows of each of those runs from its published position on (migration
// 00015). A run another relay holds is skipped, so two relays never
// publish one run at once, and a run is always read from its position.
// The transaction stays open until Finish (or Release): the caller
// publishes meanwhile; Finish moves the runs' positions. An empty claim
// (no run free) is returned already finished.
//
// Which runs: those this process committed events of (localOutbox); and,
// at most every SweepEvery, any run (the sweep: the rows no live relay
// takes). With neither, the claim asks Postgres nothing.
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
	c := &pgClaim{s: s, tx: tx, local: local, rowsPerRun: rowsPerRun, since: map[string]int64{}}
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

// pgPublishLockClass is the advisory lock class ("sgpb") under which a
// relay holds a run while it publishes it (ClaimOutbox): the key
// is hashtext(run_id). A transaction-level lock, not a row lock: the run's
// step commits write its run_publish row (committed_seq), and a row lock
// held through a window's sending would hold them. Two runs whose ids hash
// alike are not claimed at once; each is claimed when the other is done.
const pgPublishLockClass = 0x73677062

// sqlLockPending locks (pg_try_advisory_xact_lock, pgPublishLockClass) up
// to $3 of the runs with events to publish (run_publish_pending), least
// recently marked first: the runs $1 (this process's) when $1 is not
// null, else any run but $2 (the sweep). It returns each run locked with
// its published_seq and committed_seq as read. The candidates are read in
// order into a materialized CTE first, and the lock is tried on them in
// that order until $3 are held: in a subquery the planner moved the lock
// below its sort and locked every candidate (8 held for 4 claimed), so a
// relay's second claim worker found its runs all held by the first. Up
// to $3 + 64 candidates: a sweep does not read every pending run of the
// fleet; runs held by others are marked and go to the back meanwhile.
// The positions are read by the next statement, whose snapshot is taken
// after the locks: a relay that marked and committed before them is seen.
var sqlLockPending = `WITH c AS MATERIALIZED (
		SELECT p.run_id, p.published_seq, p.committed_seq FROM run_publish p
		WHERE p.committed_seq > p.published_seq
		  AND ($1::text[] IS NULL OR p.run_id = ANY($1::text[]))
		  AND p.run_id <> ALL(coalesce($2::text[], '{}'))
		ORDER BY p.marked_at, p.run_id
		LIMIT $3 + 64)
	SELECT run_id, published_seq, committed_seq FROM c
	WHERE pg_try_advisory_xact_lock(` + strconv.Itoa(pgPublishLockClass) + `, hashtext(c.run_id))
	LIMIT $3`

// lockPending runs sqlLockPending: the runs locked, and their
// committed_seq as read; their published_seq as read goes to c.since.
func (c *pgClaim) lockPending(ctx context.Context, only, not []string, limit int) ([]string, []int64, error) {
	rows, err := c.tx.Query(ctx, sqlLockPending, only, not, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshots: claim outbox runs: %w", err)
	}
	defer rows.Close()
	var (
		ids  []string
		seqs []int64
	)
	for rows.Next() {
		var (
			id       string
			pos, seq int64
		)
		if err := rows.Scan(&id, &pos, &seq); err != nil {
			return nil, nil, fmt.Errorf("snapshots: claim outbox runs: %w", err)
		}
		ids, seqs = append(ids, id), append(seqs, seq)
		c.since[id] = pos
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("snapshots: claim outbox runs: %w", err)
	}
	return ids, seqs, nil
}

// claimRuns locks runs (lockPending) and reads their rows; a run locked
// with no row read (its events above its position published one by one,
// out of order: MarkPublished) gets its position moved over them
// (sqlSkipPublished), so run_publish_pending stops naming it or the next
// claim reads on.
func (c *pgClaim) claimRuns(ctx context.Context, only, not []string, limit int) ([][]agent.OutboxRow, error) {
	ids, seqs, err := c.lockPending(ctx, only, not, limit)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	runs, err := c.readRows(ctx, ids, c.rowsPerRun)
	if err != nil {
		return nil, err
	}
	var doneIDs []string
	var doneSeqs, doneSince []int64
	for i, id := range ids {
		if !slices.ContainsFunc(runs, func(run []agent.OutboxRow) bool { return run[0].RunID == id }) {
			doneIDs, doneSeqs, doneSince = append(doneIDs, id), append(doneSeqs, seqs[i]), append(doneSince, c.since[id])
		}
	}
	if len(doneIDs) > 0 {
		// Outside the claim's transaction: a row lock there would hold the
		// run's commits while the claim publishes.
		if _, err := c.s.pool.Exec(ctx, sqlSkipPublished, doneIDs, doneSeqs, doneSince); err != nil {
			return nil, fmt.Errorf("snapshots: outbox positions: %w", err)
		}
	}
	return runs, nil
}

// sqlSkipPublished moves each run $1[i]'s position to below its first
// unpublished event above it, or to $2[i] (its committed_seq read before:
// every event up to it is in this statement's snapshot) when there is
// none. Never down, never over an unpublished event; only where the
// position is still $3[i], the one the claim read (a Requeue meanwhile
// moved it back: left for the next claim).
const sqlSkipPublished = `UPDATE run_publish p SET published_seq = greatest(p.published_seq, coalesce(
		(SELECT min(x.sequence) - 1 FROM run_events x WHERE x.run_id = p.run_id AND x.sequence > p.published_seq AND x.published_at IS NULL),
		m.seq))
	FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS m(run_id, seq, since)
	WHERE p.run_id = m.run_id AND p.published_seq = m.since`

// claimLocal claims this process's runs with events to publish and reads
// their rows; the runs of them with nothing to publish (published by
// another relay's sweep, or a commit rolled back) are forgotten.
func (c *pgClaim) claimLocal(ctx context.Context, maxRuns int) ([][]agent.OutboxRow, error) {
	only := make([]string, 0, len(c.local))
	for id := range c.local {
		only = append(only, id)
	}
	runs, err := c.claimRuns(ctx, only, nil, maxRuns)
	if err != nil {
		return nil, err
	}
	if len(runs) == len(only) {
		return runs, nil
	}
	rest := slices.DeleteFunc(only, func(id string) bool {
		return slices.ContainsFunc(runs, func(run []agent.OutboxRow) bool { return run[0].RunID == id })
	})
	pending, err := pgStrings(c.tx.Query(ctx, `SELECT run_id FROM run_publish WHERE run_id = ANY($1::text[]) AND committed_seq > published_seq`, rest))
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

func (c *pgClaim) claim(ctx context.Context, maxRuns, rowsPerRun int, sweep bool) ([][]agent.OutboxRow, error) {
	var runs [][]agent.OutboxRow
	if len(c.local) > 0 {
		var err error
		if runs, err = c.claimLocal(ctx, maxRuns); err != nil {
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
	sweptRuns, err := c.claimRuns(ctx, nil, ids, maxRuns-len(ids))
	if err != nil || len(sweptRuns) == 0 {
		return runs, err
	}
	full := len(ids)+len(sweptRuns) == maxRuns
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

// readRows reads up to rowsPerRun unpublished rows of each of runs (ids,
// held) from its position on, with their bodies, through the (run_id,
// sequence) key.
func (c *pgClaim) readRows(ctx context.Context, ids []string, rowsPerRun int) ([][]agent.OutboxRow, error) {
	rows, err := c.tx.Query(ctx, sqlReadClaimed, ids, rowsPerRun)
	if err != nil {
		return nil, fmt.Errorf("snapshots: claim outbox rows: %w", err)
	}
	return c.scanRuns(rows, nil)
}

// sqlReadClaimed reads each run $1's first $2 unpublished events (above
// its position, published_at not set), in sequence order. Sequences are
// consecutive, so they lie within the next $2 above the position: the
// bound keeps a plan made without statistics (a new store's: a bitmap scan
// of the range, then a sort) from reading a backlog's every row. Events
// published one by one in the range (MarkPublished, out of order) make the
// claim shorter; a range of nothing else, empty (claimRuns moves the
// position over them).
const sqlReadClaimed = `SELECT ` + storekit.OutboxCols + ` FROM unnest($1::text[]) AS h(run_id)
		JOIN run_publish p ON p.run_id = h.run_id
		JOIN runs r ON r.run_id = h.run_id
		CROSS JOIN LATERAL (SELECT * FROM run_events x WHERE x.run_id = h.run_id AND x.sequence > p.published_seq AND x.sequence <= p.published_seq + $2
			AND x.published_at IS NULL ORDER BY x.sequence LIMIT $2) e
		ORDER BY e.run_id, e.sequence`

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

// sqlMarkUpToMany moves each run $2[i]'s position up to $3[i] (no
// further than its committed_seq) at $1, and returns how many events that
// marked (those above the old position not already published one by one):
// one small row per run, not a new version of each event row (migration
// 00015). The count is read in the statement's snapshot, before the move.
// A run whose position is below $4[i] (a claim's: the position it read;
// -1 for none) is left as it is: a Requeue moved it back since, and its
// events are published again.
const sqlMarkUpToMany = `WITH m AS (SELECT * FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS m(run_id, up_to, since)),
	counted AS (SELECT count(*) AS n FROM m JOIN run_publish p ON p.run_id = m.run_id AND p.published_seq >= m.since
		JOIN run_events e ON e.run_id = m.run_id AND e.sequence > p.published_seq AND e.sequence <= m.up_to AND e.published_at IS NULL),
	moved AS (UPDATE run_publish p SET published_seq = least(m.up_to, p.committed_seq), marked_at = $1
		FROM m WHERE p.run_id = m.run_id AND p.published_seq >= m.since AND p.published_seq < least(m.up_to, p.committed_seq) RETURNING 1)
	SELECT n FROM counted`

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
	// since: each run locked -> its position as the claim read it.
	since map[string]int64
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
	var upTos, since []int64
	for _, run := range c.runs {
		upTo, ok := ackedUpTo[run[0].RunID]
		if !ok || upTo < run[0].Sequence {
			continue
		}
		ids, upTos, since = append(ids, run[0].RunID), append(upTos, upTo), append(since, c.since[run[0].RunID])
	}
	marked := 0
	if len(ids) > 0 {
		if err := c.tx.QueryRow(ctx, sqlMarkUpToMany, storekit.StoreTime(c.s.clock.Now()), ids, upTos, since).Scan(&marked); err != nil {
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
