package snapshots

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// OutboxParker is implemented by stores whose outbox rows can be parked:
// ParkOutbox takes the unpublished row (run, sequence) out of the queue
// (published_at set, so the relay goes on with the rows behind it) and
// records parked_at and reason (migration 00005). A row already published
// or parked is left as is.
type OutboxParker interface {
	ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error
}

// ClaimParker is implemented by OutboxClaims that park a claimed row inside
// the claim's transaction (the claim holds the row's lock).
type ClaimParker interface {
	Park(ctx context.Context, runID string, sequence int64, reason string) error
}

// OutboxCounter is implemented by stores that count their outbox rows with
// one grouped query: rows waiting to be published, and rows parked.
type OutboxCounter interface {
	OutboxCounts(ctx context.Context) (unpublished, parked int64, err error)
}

var (
	_ OutboxParker       = (*Embedded)(nil)
	_ OutboxParker       = (*Postgres)(nil)
	_ OutboxCounter      = (*Embedded)(nil)
	_ OutboxCounter      = (*Postgres)(nil)
	_ agent.ParkedLister = (*Embedded)(nil)
	_ agent.ParkedLister = (*Postgres)(nil)
	_ ClaimParker        = (*pgClaim)(nil)
)

// maxParkedReason bounds a stored reason (a publisher's error text).
const maxParkedReason = 512

func clipReason(s string) string {
	s = agent.RedactString(s)
	if len(s) > maxParkedReason {
		s = s[:maxParkedReason]
	}
	return s
}

// ParkOutbox implements OutboxParker.
func (s *Embedded) ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	now := fmtTime(s.clock.Now())
	_, err = w.ExecContext(ctx, `UPDATE run_outbox SET published_at = ?, parked_at = ?, parked_reason = ? WHERE run_id = ? AND sequence = ? AND published_at IS NULL`,
		now, now, clipReason(reason), runID, sequence)
	if err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

// ParkedEvents implements agent.ParkedLister.
func (s *Embedded) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
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
		if p.ParkedAt, err = parseTime(at); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// OutboxCounts implements OutboxCounter.
func (s *Embedded) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.queryRow(ctx, `SELECT (SELECT count(*) FROM run_outbox INDEXED BY run_outbox_unpublished_key WHERE published_at IS NULL),
		(SELECT count(*) FROM run_outbox WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

// ParkOutbox implements OutboxParker.
func (s *Postgres) ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error {
	now := storeTime(s.clock.Now())
	if _, err := s.pool.Exec(ctx, sqlParkPostgres, now, clipReason(reason), runID, sequence); err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

const sqlParkPostgres = `UPDATE run_outbox SET published_at = $1, parked_at = $1, parked_reason = $2 WHERE run_id = $3 AND sequence = $4 AND published_at IS NULL`

// ParkedEvents implements agent.ParkedLister.
func (s *Postgres) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
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
func (s *Postgres) OutboxCounts(ctx context.Context) (unpublished, parked int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM run_outbox WHERE published_at IS NULL),
		(SELECT count(*) FROM run_outbox WHERE parked_at IS NOT NULL)`).Scan(&unpublished, &parked)
	return unpublished, parked, err
}

// Park implements ClaimParker.
func (c *pgClaim) Park(ctx context.Context, runID string, sequence int64, reason string) error {
	if c.done {
		return fmt.Errorf("snapshots: outbox claim already finished")
	}
	if _, err := c.tx.Exec(ctx, sqlParkPostgres, storeTime(c.s.clock.Now()), clipReason(reason), runID, sequence); err != nil {
		return fmt.Errorf("snapshots: park outbox row run %s sequence %d: %w", runID, sequence, err)
	}
	return nil
}

var (
	_ agent.RunCounter = (*Embedded)(nil)
	_ agent.RunCounter = (*Postgres)(nil)
)

// CountRunsByStatus implements agent.RunCounter.
func (s *Embedded) CountRunsByStatus(ctx context.Context) (map[agent.RunStatus]int, error) {
	rows, err := s.query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanStatusCounts(rows)
}

// CountRunsByStatus implements agent.RunCounter.
func (s *Postgres) CountRunsByStatus(ctx context.Context) (map[agent.RunStatus]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM runs GROUP BY status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanStatusCounts(rows)
}

// statusRows is what *sql.Rows and pgx.Rows share for reading.
type statusRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanStatusCounts reads (status, count) rows of either store.
func scanStatusCounts(rows statusRows) (map[agent.RunStatus]int, error) {
	by := map[agent.RunStatus]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		by[agent.RunStatus(st)] = n
	}
	return by, rows.Err()
}
