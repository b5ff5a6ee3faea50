package snapshots

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

var _ agent.Leases = (*Embedded)(nil)

const leaseCols = `fencing_token, serial, holder, run_id, acquired_at, renewed_at, expires_at, released_at, release_reason`

func scanLease(sc interface{ Scan(...any) error }) (agent.Lease, error) {
	var (
		l                     agent.Lease
		acq, ren, exp         string
		released, releasedWhy sql.NullString
	)
	if err := sc.Scan(&l.FencingToken, &l.Serial, &l.Holder, &l.RunID, &acq, &ren, &exp, &released, &releasedWhy); err != nil {
		return l, err
	}
	var err error
	if l.AcquiredAt, err = parseTime(acq); err != nil {
		return l, err
	}
	if l.RenewedAt, err = parseTime(ren); err != nil {
		return l, err
	}
	if l.ExpiresAt, err = parseTime(exp); err != nil {
		return l, err
	}
	if released.Valid {
		t, err := parseTime(released.String)
		if err != nil {
			return l, err
		}
		l.ReleasedAt = &t
		l.ReleaseReason = agent.LeaseReleaseReason(releasedWhy.String)
	}
	return l, nil
}

// AcquireLease implements agent.Leases (see there) in one IMMEDIATE
// transaction, so two acquisitions of one device cannot both succeed.
func (s *Embedded) AcquireLease(ctx context.Context, serial, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if serial == "" || holder == "" || runID == "" || ttl <= 0 {
		return agent.Lease{}, fmt.Errorf("acquire lease %q/%q/%q ttl %v: %w", serial, holder, runID, ttl, ErrInvalid)
	}
	w, err := s.writer()
	if err != nil {
		return agent.Lease{}, err
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return agent.Lease{}, err
	}
	defer tx.Rollback()
	now := s.clock.Now()
	cur, err := scanLease(tx.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM device_leases WHERE serial = ? AND released_at IS NULL`, serial))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return agent.Lease{}, err
	default:
		var reason agent.LeaseReleaseReason
		switch {
		case cur.RunID == runID && cur.Holder == holder:
			// Re-acquiring one's own lease renews it.
			cur.RenewedAt, cur.ExpiresAt = now, now.Add(ttl)
			if _, err := tx.ExecContext(ctx, `UPDATE device_leases SET renewed_at = ?, expires_at = ? WHERE fencing_token = ?`,
				fmtTime(now), fmtTime(cur.ExpiresAt), cur.FencingToken); err != nil {
				return agent.Lease{}, err
			}
			return cur, tx.Commit()
		case cur.RunID == runID:
			reason = agent.LeaseHolderLost
		case !cur.ExpiresAt.After(now):
			reason = agent.LeaseExpired
		default:
			return agent.Lease{}, fmt.Errorf("device %s: held by run %s (holder %s) until %s: %w",
				serial, cur.RunID, cur.Holder, cur.ExpiresAt.Format(time.RFC3339), agent.ErrLeaseHeld)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE device_leases SET released_at = ?, release_reason = ? WHERE fencing_token = ?`,
			fmtTime(now), string(reason), cur.FencingToken); err != nil {
			return agent.Lease{}, err
		}
	}
	l := agent.Lease{Serial: serial, Holder: holder, RunID: runID, AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(ttl)}
	res, err := tx.ExecContext(ctx, `INSERT INTO device_leases (serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
		serial, holder, runID, fmtTime(now), fmtTime(now), fmtTime(l.ExpiresAt))
	if err != nil {
		return agent.Lease{}, err
	}
	if l.FencingToken, err = res.LastInsertId(); err != nil {
		return agent.Lease{}, err
	}
	l.AcquiredAt, _ = parseTime(fmtTime(now))
	l.RenewedAt, l.ExpiresAt = l.AcquiredAt, l.AcquiredAt.Add(ttl)
	return l, tx.Commit()
}

// RenewLease implements agent.Leases.
func (s *Embedded) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	w, err := s.writer()
	if err != nil {
		return agent.Lease{}, err
	}
	now := s.clock.Now()
	res, err := w.ExecContext(ctx, `UPDATE device_leases SET renewed_at = ?, expires_at = ? WHERE serial = ? AND fencing_token = ? AND released_at IS NULL`,
		fmtTime(now), fmtTime(now.Add(ttl)), serial, token)
	if err != nil {
		return agent.Lease{}, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return agent.Lease{}, fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return scanLease(w.QueryRowContext(ctx, `SELECT `+leaseCols+` FROM device_leases WHERE fencing_token = ?`, token))
}

// ReleaseLease implements agent.Leases.
func (s *Embedded) ReleaseLease(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	res, err := w.ExecContext(ctx, `UPDATE device_leases SET released_at = ?, release_reason = ? WHERE serial = ? AND fencing_token = ? AND released_at IS NULL`,
		fmtTime(s.clock.Now()), string(reason), serial, token)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return nil
}

// ReleaseHolderLeases implements agent.Leases.
func (s *Embedded) ReleaseHolderLeases(ctx context.Context, match func(string) bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	active, err := s.ActiveLeases(ctx)
	if err != nil {
		return nil, err
	}
	var out []agent.Lease
	for _, l := range active {
		if !match(l.Holder) {
			continue
		}
		if err := s.ReleaseLease(ctx, l.Serial, l.FencingToken, reason); errors.Is(err, agent.ErrLeaseLost) {
			continue
		} else if err != nil {
			return out, err
		}
		out = append(out, l)
	}
	return out, nil
}

// ActiveLeases implements agent.Leases.
func (s *Embedded) ActiveLeases(ctx context.Context) ([]agent.Lease, error) {
	return s.queryLeases(ctx, `SELECT `+leaseCols+` FROM device_leases WHERE released_at IS NULL ORDER BY fencing_token`)
}

// LeaseHistory implements agent.Leases.
func (s *Embedded) LeaseHistory(ctx context.Context, serial string) ([]agent.Lease, error) {
	if serial == "" {
		return s.queryLeases(ctx, `SELECT `+leaseCols+` FROM device_leases ORDER BY fencing_token`)
	}
	return s.queryLeases(ctx, `SELECT `+leaseCols+` FROM device_leases WHERE serial = ? ORDER BY fencing_token`, serial)
}

func (s *Embedded) queryLeases(ctx context.Context, q string, args ...any) ([]agent.Lease, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []agent.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
