package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

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

// RenewActive implements storekit.Driver (Core.RenewLease): one UPDATE …
// RETURNING in a group commit, so the lease returned is the one renewed.
func (d driver) RenewActive(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, bool, error) {
	if _, err := d.s.writer(); err != nil {
		return agent.Lease{}, false, err
	}
	var l agent.Lease
	err := d.s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		t := storekit.StoreTime(d.s.clock.Now())
		now, expires := storekit.FmtTime(t), storekit.FmtTime(t.Add(ttl))
		q, err := d.s.ws.tx(ctx, tx, sqlLeaseRenew)
		if err != nil {
			return err
		}
		l, err = scanLease(q.QueryRowContext(ctx, now, expires, serial, token, now))
		return err
	})
	return l, err == nil, noRows(err)
}

// ReleaseActive implements storekit.Driver (Core.ReleaseLease).
func (d driver) ReleaseActive(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) (int64, error) {
	if _, err := d.s.writer(); err != nil {
		return 0, err
	}
	var n int64
	err := d.s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		q, err := d.s.ws.tx(ctx, tx, sqlLeaseRelease)
		if err != nil {
			return err
		}
		res, err := q.ExecContext(ctx, storekit.FmtTime(d.s.clock.Now()), string(reason), serial, token)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// ReleaseHolderLeases implements agent.Leases in one IMMEDIATE transaction
// and returns the leases it ended, released, in acquisition order (with
// expiredOnly, those expired by the store's clock).
func (s *Store) ReleaseHolderLeases(ctx context.Context, match func(string) bool, expiredOnly bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	if err := storekit.CheckReleaseHolder(reason); err != nil {
		return nil, err
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
