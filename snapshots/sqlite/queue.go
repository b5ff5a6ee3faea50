package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// sqlQueueName is the SQL of a device name's normal form (agent.RunQueue),
// the expression runs_queue_idx indexes (SQLite's lower() folds ASCII only;
// device names are ASCII).
const sqlQueueName = `lower(replace(trim(serial), ' ', '_'))`

// StoreNow implements agent.StoreClock: one host, the store's clock is the
// Options.Clock (the system clock by default).
func (s *Store) StoreNow(context.Context) (time.Time, error) {
	return storekit.StoreTime(s.clock.Now()), nil
}

// SeeDevices implements agent.RunQueue.
func (s *Store) SeeDevices(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	names = slices.Clone(names)
	slices.Sort(names)
	now := storekit.FmtTime(s.clock.Now())
	return s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		for _, n := range slices.Compact(names) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO device_sightings (name, seen_at) VALUES (lower(replace(trim(?), ' ', '_')), ?)
				ON CONFLICT (name) DO UPDATE SET seen_at = max(seen_at, excluded.seen_at)`, n, now); err != nil {
				return fmt.Errorf("device sightings: %w", err)
			}
		}
		return nil
	})
}

// UnseenRuns implements agent.RunQueue: the distinct device names of the
// PENDING runs one index probe each, each checked against
// device_sightings; runs are read only for the names no daemon reached.
func (s *Store) UnseenRuns(ctx context.Context, after time.Duration, limit int) ([]agent.Run, error) {
	if limit <= 0 {
		limit = 100
	}
	cutoff := storekit.FmtTime(s.clock.Now().Add(-after))
	var out []agent.Run
	name := sql.NullString{}
	for len(out) < limit {
		q := `SELECT min(` + sqlQueueName + `) FROM runs WHERE status = 'PENDING'`
		args := []any{}
		if name.Valid {
			q += ` AND ` + sqlQueueName + ` > ?`
			args = append(args, name.String)
		}
		if err := s.queryRow(ctx, q, args...).Scan(&name); err != nil {
			return nil, fmt.Errorf("unseen runs: %w", err)
		}
		if !name.Valid {
			break
		}
		var seen int
		if err := s.queryRow(ctx, `SELECT count(*) FROM device_sightings WHERE name = ? AND seen_at > ?`, name.String, cutoff).Scan(&seen); err != nil {
			return nil, fmt.Errorf("unseen runs: %w", err)
		}
		if seen > 0 {
			continue
		}
		runs, err := collect(scanRun)(s.query(ctx, `SELECT `+runColumns+` FROM runs WHERE status = 'PENDING' AND `+sqlQueueName+` = ? AND created_at < ? ORDER BY created_at LIMIT ?`,
			name.String, cutoff, limit-len(out)))
		if err != nil {
			return nil, fmt.Errorf("unseen runs: %w", err)
		}
		out = append(out, runs...)
	}
	return storekit.OldestFirst(out), nil
}

// CountQueued implements agent.RunQueue (runs_tenant_pending_idx).
func (s *Store) CountQueued(ctx context.Context, tenant string, upTo int) (int, error) {
	var n int
	err := s.queryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM runs WHERE status = 'PENDING' AND tenant_id = ? LIMIT ?)`, tenant, upTo).Scan(&n)
	return n, err
}
