package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

var _ agent.Leases = (*Store)(nil)

func scanLease(sc storekit.RowScanner) (agent.Lease, error) {
	var (
		l                     agent.Lease
		acq, ren, exp         string
		released, releasedWhy sql.NullString
	)
	if err := sc.Scan(&l.FencingToken, &l.Serial, &l.Holder, &l.RunID, &acq, &ren, &exp, &released, &releasedWhy, &l.Device); err != nil {
		return l, err
	}
	var err error
	if l.AcquiredAt, err = storekit.ParseTime(acq); err != nil {
		return l, err
	}
	if l.RenewedAt, err = storekit.ParseTime(ren); err != nil {
		return l, err
	}
	if l.ExpiresAt, err = storekit.ParseTime(exp); err != nil {
		return l, err
	}
	if released.Valid {
		t, err := storekit.ParseTime(released.String)
		if err != nil {
			return l, err
		}
		l.ReleasedAt = &t
		l.ReleaseReason = agent.LeaseReleaseReason(releasedWhy.String)
	}
	return l, nil
}

// leaseTimes returns the clock's reading and the expiry ttl later as the store
// keeps them (UTC, microseconds), so a returned lease equals the stored one.
func leaseTimes(clock agent.Clock, ttl time.Duration) (now, expires time.Time) {
	now = storekit.StoreTime(clock.Now())
	return now, storekit.StoreTime(now.Add(ttl))
}

// Statements of the lease writes (prepared at open, stmtCache).
const (
	sqlLeaseCurrent = `SELECT ` + storekit.LeaseCols + ` FROM device_leases WHERE device = ? AND released_at IS NULL`
	// The run's active lease of another device (a run is driven on one
	// device at a time; device_leases_active_run_key).
	sqlLeaseRunElsewhere = `SELECT ` + storekit.LeaseCols + ` FROM device_leases WHERE run_id = ? AND device <> ? AND released_at IS NULL`
	sqlLeaseRenewOwn     = `UPDATE device_leases SET renewed_at = ?, expires_at = ? WHERE fencing_token = ?`
	sqlLeaseEnd          = `UPDATE device_leases SET released_at = ?, release_reason = ? WHERE fencing_token = ?`
	sqlLeaseInsert       = `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlLeaseRenew        = `UPDATE device_leases SET renewed_at = ?, expires_at = ?
		WHERE serial = ? AND fencing_token = ? AND released_at IS NULL AND expires_at > ? RETURNING ` + storekit.LeaseCols
	sqlLeaseRelease = `UPDATE device_leases SET released_at = ?, release_reason = ? WHERE serial = ? AND fencing_token = ? AND released_at IS NULL`
)

// AcquireLease implements agent.Leases (see there) in one IMMEDIATE
// transaction, so two acquisitions of one device cannot both succeed; the
// partial unique index (one active lease per device) is the last guard.
func (s *Store) AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if err := storekit.CheckLeaseRequest(device, holder, runID, ttl); err != nil {
		return agent.Lease{}, err
	}
	if _, err := s.writer(); err != nil {
		return agent.Lease{}, err
	}
	var l agent.Lease
	err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		l, err = s.acquireLeaseTx(ctx, tx, device, holder, runID, ttl)
		return err
	})
	return l, err
}

// acquireLeaseTx is AcquireLease in tx (which holds the write lock).
func (s *Store) acquireLeaseTx(ctx context.Context, tx *sql.Tx, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	// Read the clock once the write lock is held.
	now, expires := leaseTimes(s.clock, ttl)
	q, err := s.ws.tx(ctx, tx, sqlLeaseCurrent)
	if err != nil {
		return agent.Lease{}, err
	}
	cur, err := scanLease(q.QueryRowContext(ctx, device))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return agent.Lease{}, err
	default:
		reason, err := storekit.TakeOver(cur, holder, runID, now)
		if err != nil {
			return agent.Lease{}, err
		}
		if reason == "" {
			// Re-acquiring one's own lease renews it.
			cur.RenewedAt, cur.ExpiresAt = now, expires
			q, err := s.ws.tx(ctx, tx, sqlLeaseRenewOwn)
			if err != nil {
				return agent.Lease{}, err
			}
			if _, err := q.ExecContext(ctx, storekit.FmtTime(now), storekit.FmtTime(expires), cur.FencingToken); err != nil {
				return agent.Lease{}, err
			}
			return cur, nil
		}
		q, err := s.ws.tx(ctx, tx, sqlLeaseEnd)
		if err != nil {
			return agent.Lease{}, err
		}
		if _, err := q.ExecContext(ctx, storekit.FmtTime(now), string(reason), cur.FencingToken); err != nil {
			return agent.Lease{}, err
		}
	}
	q, err = s.ws.tx(ctx, tx, sqlLeaseRunElsewhere)
	if err != nil {
		return agent.Lease{}, err
	}
	other, err := scanLease(q.QueryRowContext(ctx, runID, device))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return agent.Lease{}, err
	default:
		if err := storekit.RunElsewhere(other, now); err != nil {
			return agent.Lease{}, err
		}
		q, err := s.ws.tx(ctx, tx, sqlLeaseEnd)
		if err != nil {
			return agent.Lease{}, err
		}
		if _, err := q.ExecContext(ctx, storekit.FmtTime(now), string(agent.LeaseExpired), other.FencingToken); err != nil {
			return agent.Lease{}, err
		}
	}
	_, serial := agent.SplitDeviceKey(device)
	l := agent.Lease{Device: device, Serial: serial, Holder: holder, RunID: runID, AcquiredAt: now, RenewedAt: now, ExpiresAt: expires}
	ins, err := s.ws.tx(ctx, tx, sqlLeaseInsert)
	if err != nil {
		return agent.Lease{}, err
	}
	res, err := ins.ExecContext(ctx, device, serial, holder, runID, storekit.FmtTime(now), storekit.FmtTime(now), storekit.FmtTime(expires))
	if sqliteConstraint(err, "device_leases.device") {
		return agent.Lease{}, fmt.Errorf("device %s: another active lease: %w", device, agent.ErrLeaseHeld)
	}
	if sqliteConstraint(err, "device_leases.run_id") {
		return agent.Lease{}, fmt.Errorf("run %s: an active lease of another device: %w", runID, agent.ErrLeaseRunElsewhere)
	}
	if err != nil {
		return agent.Lease{}, err
	}
	if l.FencingToken, err = res.LastInsertId(); err != nil {
		return agent.Lease{}, err
	}
	return l, nil
}

// RenewLease implements agent.Leases: one UPDATE … RETURNING, so the lease
// returned is the one renewed.
func (s *Store) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	if ttl <= 0 {
		return agent.Lease{}, fmt.Errorf("renew lease %s/%d ttl %v: %w", serial, token, ttl, snapshots.ErrInvalid)
	}
	if _, err := s.writer(); err != nil {
		return agent.Lease{}, err
	}
	var l agent.Lease
	err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		now, expires := leaseTimes(s.clock, ttl)
		q, err := s.ws.tx(ctx, tx, sqlLeaseRenew)
		if err != nil {
			return err
		}
		l, err = scanLease(q.QueryRowContext(ctx, storekit.FmtTime(now), storekit.FmtTime(expires), serial, token, storekit.FmtTime(now)))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return agent.Lease{}, fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return l, err
}

// ReleaseLease implements agent.Leases.
func (s *Store) ReleaseLease(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) error {
	if reason == "" {
		return fmt.Errorf("release lease %s/%d without a reason: %w", serial, token, snapshots.ErrInvalid)
	}
	if _, err := s.writer(); err != nil {
		return err
	}
	var n int64
	err := s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		q, err := s.ws.tx(ctx, tx, sqlLeaseRelease)
		if err != nil {
			return err
		}
		res, err := q.ExecContext(ctx, storekit.FmtTime(s.clock.Now()), string(reason), serial, token)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return nil
}

// ReleaseHolderLeases implements agent.Leases in one IMMEDIATE transaction
// and returns the leases it ended, released, in acquisition order (with
// expiredOnly, those expired by the store's clock).
func (s *Store) ReleaseHolderLeases(ctx context.Context, match func(string) bool, expiredOnly bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	if reason == "" {
		return nil, fmt.Errorf("release holder leases without a reason: %w", snapshots.ErrInvalid)
	}
	w, err := s.writer()
	if err != nil {
		return nil, err
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := storekit.StoreTime(s.clock.Now())
	active, err := collect(scanLease)(tx.QueryContext(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE released_at IS NULL ORDER BY fencing_token`))
	if err != nil {
		return nil, err
	}
	var out []agent.Lease
	for _, l := range active {
		if !match(l.Holder) || (expiredOnly && l.ExpiresAt.After(now)) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE device_leases SET released_at = ?, release_reason = ? WHERE fencing_token = ?`,
			storekit.FmtTime(now), string(reason), l.FencingToken); err != nil {
			return nil, err
		}
		l.ReleasedAt, l.ReleaseReason = &now, reason
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, tx.Commit()
}

// ActiveLeases implements agent.Leases.
func (s *Store) ActiveLeases(ctx context.Context, sc agent.Scope) ([]agent.Lease, error) {
	cond, args, err := storekit.ScopeCond(sc, "device_leases.run_id", storekit.SQLitePH, 1)
	if err != nil {
		return nil, err
	}
	return s.queryLeases(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE released_at IS NULL`+cond+` ORDER BY fencing_token`, args...)
}

// LeaseHistory implements agent.Leases.
func (s *Store) LeaseHistory(ctx context.Context, sc agent.Scope, device string) ([]agent.Lease, error) {
	cond, args, err := storekit.ScopeCond(sc, "device_leases.run_id", storekit.SQLitePH, 2)
	if err != nil {
		return nil, err
	}
	if device == "" {
		return s.queryLeases(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE true`+cond+` ORDER BY fencing_token`, args...)
	}
	return s.queryLeases(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE device = ?`+cond+` ORDER BY fencing_token`, append([]any{device}, args...)...)
}

// LeasePage implements agent.Leases.
func (s *Store) LeasePage(ctx context.Context, sc agent.Scope, q agent.LeaseQuery) ([]agent.Lease, error) {
	query, args, err := storekit.LeasePageQuery(sc, q, storekit.SQLitePH)
	if err != nil {
		return nil, err
	}
	return s.queryLeases(ctx, query, args...)
}

func (s *Store) queryLeases(ctx context.Context, q string, args ...any) ([]agent.Lease, error) {
	return collect(scanLease)(s.r.QueryContext(ctx, q, args...))
}
