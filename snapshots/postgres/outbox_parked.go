package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

var (
	_ snapshots.OutboxParker  = (*Store)(nil)
	_ snapshots.OutboxCounter = (*Store)(nil)
	_ agent.ParkedLister      = (*Store)(nil)
	_ agent.RunCounter        = (*Store)(nil)
	_ snapshots.ClaimParker   = (*pgClaim)(nil)
)

// ParkOutbox implements OutboxParker.
func (s *Store) ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error {
	now := storekit.StoreTime(s.clock.Now())
	if _, err := s.pool.Exec(ctx, sqlParkPostgres, now, storekit.ClipReason(reason), runID, sequence); err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

const sqlParkPostgres = `UPDATE run_outbox SET published_at = $1, parked_at = $1, parked_reason = $2 WHERE run_id = $3 AND sequence = $4 AND published_at IS NULL`

// ParkedEvents implements agent.ParkedLister.
func (s *Store) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT run_id, sequence, event_id, subject, octet_length(body), parked_reason, parked_at FROM run_outbox
		WHERE parked_at IS NOT NULL ORDER BY parked_at DESC, id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []agent.ParkedEvent{}
	for rows.Next() {
		var p agent.ParkedEvent
		var at time.Time
		if err := rows.Scan(&p.RunID, &p.Sequence, &p.EventID, &p.Subject, &p.Bytes, &p.Reason, &at); err != nil {
			return nil, err
		}
		p.ParkedAt = at.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// OutboxCounts implements OutboxCounter.
func (s *Store) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_outbox WHERE published_at IS NULL),
		(SELECT count(*) FROM run_outbox WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

// Park implements ClaimParker.
func (c *pgClaim) Park(ctx context.Context, runID string, sequence int64, reason string) error {
	if c.done {
		return fmt.Errorf("snapshots: outbox claim already finished")
	}
	if _, err := c.tx.Exec(ctx, sqlParkPostgres, storekit.StoreTime(c.s.clock.Now()), storekit.ClipReason(reason), runID, sequence); err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

// CountRunsByStatus implements agent.RunCounter.
func (s *Store) CountRunsByStatus(ctx context.Context) (map[agent.RunStatus]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return storekit.ScanStatusCounts(rows)
}
