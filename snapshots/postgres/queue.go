package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// QueueChannel is the Postgres NOTIFY channel that the runs and
// device_leases triggers of migration 00008 signal on a new run and a
// released lease, so every daemon's scheduler wakes at once.
const QueueChannel = "screengraph_queue"

// pgQueueName is the SQL of a device name's normal form (agent.RunQueue),
// the expression runs_queue_idx indexes.
func pgQueueName(col string) string { return "lower(replace(trim(" + col + "), ' ', '_'))" }

// QueueChanged implements agent.QueueNotifier: this process's LISTEN on
// QueueChannel (and a wake after each LISTEN reconnect).
func (s *Store) QueueChanged() <-chan struct{} { return s.queue }

// FilterQueueWakes implements agent.QueueWakeFilter: the queue
// channel's NOTIFY payload (migration 00013: a device name's normal form)
// wakes QueueChanged only when f accepts it; an empty payload, and the
// wake-up after each LISTEN (re)connect, are shown to f as "" and always
// wake.
func (s *Store) FilterQueueWakes(f func(name string) bool) {
	if f == nil {
		s.queueFilter.Store(nil)
		return
	}
	s.queueFilter.Store(&f)
}

// queueNotified handles a NOTIFY on QueueChannel with payload.
func (s *Store) queueNotified(payload string) {
	// f sees every signal, "" too: a daemon that reads only the names its
	// wake-ups named must know when one named nothing (read them all).
	if f := s.queueFilter.Load(); f != nil && !(*f)(payload) && payload != "" {
		return
	}
	s.wakeQueue()
}

func (s *Store) wakeQueue() {
	select {
	case s.queue <- struct{}{}:
	default:
	}
}

// StoreNow implements agent.StoreClock: the Postgres server's
// clock_timestamp() (Options.Clock's time when set, for tests).
func (s *Store) StoreNow(ctx context.Context) (time.Time, error) {
	if s.runClock != nil {
		return storekit.StoreTime(s.runClock.Now()), nil
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, err
	}
	return storekit.StoreTime(now.UTC()), nil
}

// SeeDevices implements agent.RunQueue (one upsert, in name order so that
// daemons upserting together lock rows in one order).
func (s *Store) SeeDevices(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO device_sightings (name, seen_at)
		SELECT DISTINCT lower(replace(trim(n), ' ', '_')), coalesce($2::timestamptz, clock_timestamp()) FROM unnest($1::text[]) n ORDER BY 1
		ON CONFLICT (name) DO UPDATE SET seen_at = greatest(device_sightings.seen_at, excluded.seen_at)`, names, s.runClockArg())
	if err != nil {
		return fmt.Errorf("device sightings: %w", err)
	}
	return nil
}

// UnseenRuns implements agent.RunQueue: a skip scan over the distinct
// device names of the PENDING runs (runs_queue_idx), each checked against
// device_sightings; runs are read only for the names no daemon reached,
// and only those queued before the cutoff (runs_queue_age_idx: a range).
func (s *Store) UnseenRuns(ctx context.Context, after time.Duration, limit int) ([]agent.Run, error) {
	if limit <= 0 {
		limit = 100
	}
	qn := pgQueueName("r.serial")
	rows, err := collect(pgScanRun)(s.pool.Query(ctx, `WITH RECURSIVE now(t) AS (SELECT coalesce($3::timestamptz, clock_timestamp())),
		names(name) AS (
			(SELECT `+qn+` FROM runs r WHERE r.status = 'PENDING' ORDER BY 1 LIMIT 1)
			UNION ALL
			SELECT (SELECT `+qn+` FROM runs r WHERE r.status = 'PENDING' AND `+qn+` > names.name ORDER BY 1 LIMIT 1)
			FROM names WHERE names.name IS NOT NULL
		),
		unseen(name) AS (
			SELECT n.name FROM names n, now WHERE n.name IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM device_sightings d WHERE d.name = n.name AND d.seen_at > now.t - $1::bigint * interval '1 microsecond')
		)
		SELECT x.* FROM unseen u, now, LATERAL (
			SELECT `+pgRunColumns+` FROM runs r WHERE r.status = 'PENDING' AND `+qn+` = u.name AND r.created_at < now.t - $1::bigint * interval '1 microsecond'
			ORDER BY r.created_at LIMIT $2) x
		LIMIT $2`, after.Microseconds(), limit, s.runClockArg()))
	if err != nil {
		return nil, fmt.Errorf("unseen runs: %w", err)
	}
	return storekit.OldestFirst(rows), nil
}

// CountQueued implements agent.RunQueue through runs_queue_idx's rows of
// the tenant (an index-only count that stops at upTo).
func (s *Store) CountQueued(ctx context.Context, tenant string, upTo int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM runs WHERE status = 'PENDING' AND tenant_id = $1 LIMIT $2) x`, tenant, upTo).Scan(&n)
	return n, err
}

// runClockArg is nil (SQL NULL: the database's clock) or Options.Clock's
// time.
func (s *Store) runClockArg() any {
	if s.runClock == nil {
		return nil
	}
	return storekit.StoreTime(s.runClock.Now())
}
