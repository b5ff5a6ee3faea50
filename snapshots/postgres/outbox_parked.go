package postgres

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// ParkRow implements storekit.Driver (Core.ParkOutbox).
func (d pgDriver) ParkRow(ctx context.Context, runID string, sequence int64, reason string) error {
	_, err := d.s.pool.Exec(ctx, sqlParkPostgres, storekit.StoreTime(d.s.clock.Now()), reason, runID, sequence)
	return err
}

const sqlParkPostgres = `UPDATE run_outbox SET published_at = $1, parked_at = $1, parked_reason = $2 WHERE run_id = $3 AND sequence = $4 AND published_at IS NULL`

// ParkedRows implements storekit.Driver (Core.ParkedEvents).
func (d pgDriver) ParkedRows(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	return collect(func(r storekit.RowScanner) (agent.ParkedEvent, error) {
		var p agent.ParkedEvent
		err := r.Scan(&p.RunID, &p.Sequence, &p.EventID, &p.Subject, &p.Bytes, &p.Reason, &p.ParkedAt)
		p.ParkedAt = p.ParkedAt.UTC()
		return p, err
	})(d.s.pool.Query(ctx, `SELECT o.run_id, o.sequence, o.event_id, o.subject, octet_length(e.envelope), o.parked_reason, o.parked_at FROM run_outbox o JOIN run_events e ON e.run_id = o.run_id AND e.sequence = o.sequence
		WHERE o.parked_at IS NOT NULL ORDER BY o.parked_at DESC, o.id DESC LIMIT $1`, limit))
}

// OutboxCounts implements OutboxCounter.
func (s *Store) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_outbox WHERE published_at IS NULL),
		(SELECT count(*) FROM run_outbox WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

// Park implements snapshots.OutboxClaim: in the claim's transaction.
func (c *pgClaim) Park(ctx context.Context, runID string, sequence int64, reason string) error {
	if c.done {
		return fmt.Errorf("snapshots: outbox claim already finished")
	}
	_, err := c.tx.Exec(ctx, sqlParkPostgres, storekit.StoreTime(c.s.clock.Now()), storekit.ClipReason(reason), runID, sequence)
	return storekit.ParkError(runID, sequence, err)
}

// StatusCounts implements storekit.Driver (Core.CountRunsByStatus).
func (d pgDriver) StatusCounts(ctx context.Context) ([]storekit.StatusCount, error) {
	return collect(storekit.ScanStatusCount)(d.s.pool.Query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`))
}
