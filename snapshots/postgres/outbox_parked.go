package postgres

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// ParkRow implements storekit.Driver (Core.ParkOutbox).
func (d pgDriver) ParkRow(ctx context.Context, runID string, sequence int64, reason string) error {
	_, err := d.s.pool.Exec(ctx, sqlParkPostgres, storekit.StoreTime(d.s.clock.Now()), reason, runID, sequence)
	return err
}

// sqlParkPostgres parks an unpublished event (above its run's position,
// published_at not set): published_at and parked_at on the event row.
var sqlParkPostgres = `UPDATE run_events SET published_at = $1, parked_at = $1, parked_reason = $2 WHERE run_id = $3 AND sequence = $4 AND published_at IS NULL AND sequence > ` + sqlPosition("$3")

// ParkedRows implements storekit.Driver (Core.ParkedEvents).
func (d pgDriver) ParkedRows(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	return collect(func(r storekit.RowScanner) (agent.ParkedEvent, error) {
		var (
			p      agent.ParkedEvent
			tenant string
		)
		err := r.Scan(&p.RunID, &p.Sequence, &p.EventID, &tenant, &p.Bytes, &p.Reason, &p.ParkedAt)
		p.Subject = snapshots.Subject(tenant, p.RunID, "")
		p.ParkedAt = p.ParkedAt.UTC()
		return p, err
	})(d.s.pool.Query(ctx, `SELECT e.run_id, e.sequence, e.event_id, r.tenant_id, octet_length(e.envelope), e.parked_reason, e.parked_at`+storekit.OutboxFrom+`
		WHERE e.parked_at IS NOT NULL ORDER BY e.parked_at DESC, e.id DESC LIMIT $1`, limit))
}

// OutboxCounts implements OutboxCounter.
func (s *Store) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_publish p
			JOIN run_events e ON e.run_id = p.run_id AND e.sequence > p.published_seq AND e.published_at IS NULL
			WHERE p.committed_seq > p.published_seq),
		(SELECT count(*) FROM run_events WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
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
