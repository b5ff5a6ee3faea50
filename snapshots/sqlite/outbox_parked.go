package sqlite

import (
	"context"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// ParkRow implements storekit.Driver (Core.ParkOutbox).
func (d driver) ParkRow(ctx context.Context, runID string, sequence int64, reason string) error {
	w, err := d.s.writer()
	if err != nil {
		return err
	}
	now := storekit.FmtTime(d.s.clock.Now())
	_, err = w.ExecContext(ctx, `UPDATE run_events SET published_at = ?, parked_at = ?, parked_reason = ? WHERE run_id = ? AND sequence = ? AND published_at IS NULL`,
		now, now, reason, runID, sequence)
	return err
}

// ParkedRows implements storekit.Driver (Core.ParkedEvents).
func (d driver) ParkedRows(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	return collect(func(r storekit.RowScanner) (agent.ParkedEvent, error) {
		var (
			p          agent.ParkedEvent
			tenant, at string
		)
		if err := r.Scan(&p.RunID, &p.Sequence, &p.EventID, &tenant, &p.Bytes, &p.Reason, &at); err != nil {
			return p, err
		}
		p.Subject = snapshots.Subject(tenant, p.RunID, "")
		var err error
		p.ParkedAt, err = storekit.ParseTime(at)
		return p, err
	})(d.s.query(ctx, `SELECT e.run_id, e.sequence, e.event_id, r.tenant_id, length(CAST(e.envelope AS BLOB)), e.parked_reason, e.parked_at`+storekit.OutboxFrom+`
		WHERE e.parked_at IS NOT NULL ORDER BY e.parked_at DESC, e.id DESC LIMIT ?`, limit))
}

// OutboxCounts implements OutboxCounter.
func (s *Store) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.queryRow(ctx, `SELECT (SELECT count(*) FROM run_events WHERE id > `+sqlCursor+` AND published_at IS NULL),
		(SELECT count(*) FROM run_events INDEXED BY run_events_parked WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

// StatusCounts implements storekit.Driver (Core.CountRunsByStatus).
func (d driver) StatusCounts(ctx context.Context) ([]storekit.StatusCount, error) {
	return collect(storekit.ScanStatusCount)(d.s.query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`))
}
