package sqlite

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

var (
	_ snapshots.OutboxParker  = (*Store)(nil)
	_ snapshots.OutboxCounter = (*Store)(nil)
	_ agent.ParkedLister      = (*Store)(nil)
)

// ParkOutbox implements OutboxParker.
func (s *Store) ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	now := storekit.FmtTime(s.clock.Now())
	_, err = w.ExecContext(ctx, `UPDATE run_outbox SET published_at = ?, parked_at = ?, parked_reason = ? WHERE run_id = ? AND sequence = ? AND published_at IS NULL`,
		now, now, storekit.ClipReason(reason), runID, sequence)
	if err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

// ParkedEvents implements agent.ParkedLister.
func (s *Store) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT run_id, sequence, event_id, subject, length(body), parked_reason, parked_at FROM run_outbox
		WHERE parked_at IS NOT NULL ORDER BY parked_at DESC, id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []agent.ParkedEvent{}
	for rows.Next() {
		var p agent.ParkedEvent
		var at string
		if err := rows.Scan(&p.RunID, &p.Sequence, &p.EventID, &p.Subject, &p.Bytes, &p.Reason, &at); err != nil {
			return nil, err
		}
		if p.ParkedAt, err = storekit.ParseTime(at); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// OutboxCounts implements OutboxCounter.
func (s *Store) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.queryRow(ctx, `SELECT (SELECT count(*) FROM run_outbox INDEXED BY run_outbox_unpublished_key WHERE published_at IS NULL),
		(SELECT count(*) FROM run_outbox WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

var (
	_ agent.RunCounter = (*Store)(nil)
)

// CountRunsByStatus implements agent.RunCounter.
func (s *Store) CountRunsByStatus(ctx context.Context) (map[agent.RunStatus]int, error) {
	rows, err := s.query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return storekit.ScanStatusCounts(rows)
}
