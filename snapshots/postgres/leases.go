package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

var _ agent.Leases = (*Store)(nil)

// pgLeaseLockClass is the first key of the transaction-level advisory lock
// an acquisition takes on its device: pg_advisory_xact_lock(class,
// hashtext(device key)). Two int4 keys live apart from goose's bigint key.
const pgLeaseLockClass int32 = 0x53474c45 // "SGLE"

// pgNow is the SQL of the lease clock's reading, parameter $n being
// Postgres.leaseClockArg(): the test clock's time, or NULL for the database's
// clock. clock_timestamp(), not now(): now() is the transaction's start,
// which may be long before an advisory lock or row lock was granted.
func pgNow(n int) string { return fmt.Sprintf("coalesce($%d::timestamptz, clock_timestamp())", n) }

// leaseClockArg is the parameter pgNow reads: nil (SQL NULL) for the
// database's clock.
func (s *Store) leaseClockArg() any {
	if s.leaseClock == nil {
		return nil
	}
	return storekit.StoreTime(s.leaseClock.Now())
}

// extraRow scans a row's trailing columns into extra, after the columns the
// wrapped caller asks for.
type extraRow struct {
	pgx.Row
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

func withExtra(row pgx.Row, extra ...any) pgx.Row { return extraRow{row, extra} }

func pgScanLease(row storekit.RowScanner) (agent.Lease, error) {
	var (
		l        agent.Lease
		released *time.Time
		why      *string
	)
	if err := row.Scan(&l.FencingToken, &l.Serial, &l.Holder, &l.RunID, &l.AcquiredAt, &l.RenewedAt, &l.ExpiresAt, &released, &why, &l.Device); err != nil {
		return l, err
	}
	l.AcquiredAt, l.RenewedAt, l.ExpiresAt = l.AcquiredAt.UTC(), l.RenewedAt.UTC(), l.ExpiresAt.UTC()
	if released != nil {
		t := released.UTC()
		l.ReleasedAt = &t
		if why != nil {
			l.ReleaseReason = agent.LeaseReleaseReason(*why)
		}
	}
	return l, nil
}

// AcquireLease implements agent.Leases (see there; same semantics as
// sqlite.Store.AcquireLease) in one transaction, race-free across processes:
// acquisitions of one device serialize on an advisory lock of the device key
// (which also covers a free device, where there is no row to lock), the
// active row is locked FOR UPDATE (so a renewal or release of it cannot
// interleave), and the partial unique index device_leases_active_key is the
// last guard: its violation is ErrLeaseHeld.
func (s *Store) AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if err := storekit.CheckLeaseRequest(device, holder, runID, ttl); err != nil {
		return agent.Lease{}, err
	}
	_, serial := agent.SplitDeviceKey(device)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return agent.Lease{}, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))`, pgLeaseLockClass, device); err != nil {
		return agent.Lease{}, err
	}
	cur, err := pgScanLease(tx.QueryRow(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE device = $1 AND released_at IS NULL FOR UPDATE`, device))
	curFound := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return agent.Lease{}, err
	}
	other, err := pgScanLease(tx.QueryRow(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE run_id = $1 AND device <> $2 AND released_at IS NULL FOR UPDATE`, runID, device))
	otherFound := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return agent.Lease{}, err
	}
	// Read the clock once the device and the rows are locked: a FOR UPDATE
	// may have waited on a release (ReleaseHolderLeases takes no advisory
	// lock), and the new lease must not start before the one it follows
	// ended.
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT `+pgNow(1), s.leaseClockArg()).Scan(&now); err != nil {
		return agent.Lease{}, err
	}
	now = storekit.StoreTime(now)
	expires := storekit.StoreTime(now.Add(ttl))
	if curFound {
		reason, err := storekit.TakeOver(cur, holder, runID, now)
		if err != nil {
			return agent.Lease{}, err
		}
		if reason == "" {
			// Re-acquiring one's own lease renews it.
			cur.RenewedAt, cur.ExpiresAt = now, expires
			if _, err := tx.Exec(ctx, `UPDATE device_leases SET renewed_at = $1, expires_at = $2 WHERE fencing_token = $3`,
				now, expires, cur.FencingToken); err != nil {
				return agent.Lease{}, err
			}
			return cur, tx.Commit(ctx)
		}
		if _, err := tx.Exec(ctx, `UPDATE device_leases SET released_at = $1, release_reason = $2 WHERE fencing_token = $3`,
			now, string(reason), cur.FencingToken); err != nil {
			return agent.Lease{}, err
		}
	}
	if otherFound {
		if err := storekit.RunElsewhere(other, now); err != nil {
			return agent.Lease{}, err
		}
		if _, err := tx.Exec(ctx, `UPDATE device_leases SET released_at = $1, release_reason = $2 WHERE fencing_token = $3`,
			now, string(agent.LeaseExpired), other.FencingToken); err != nil {
			return agent.Lease{}, err
		}
	}
	l := agent.Lease{Device: device, Serial: serial, Holder: holder, RunID: runID, AcquiredAt: now, RenewedAt: now, ExpiresAt: expires}
	err = tx.QueryRow(ctx, `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES ($6, $1, $2, $3, $4, $4, $5)
		RETURNING fencing_token`, serial, holder, runID, now, expires, device).Scan(&l.FencingToken)
	if err := pgLeaseConflict(err, device, runID); err != nil {
		return agent.Lease{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return agent.Lease{}, pgLeaseConflict(err, device, runID)
	}
	return l, nil
}

// pgLeaseConflict turns a violation of the partial unique indexes (one
// active lease per device, per run) into its agent error; other errors are
// returned as they are, nil stays nil.
func pgLeaseConflict(err error, device, runID string) error {
	switch {
	case pgConstraint(err, pgUniqueViolation, "device_leases_active_key"):
		return fmt.Errorf("device %s: another active lease: %w", device, agent.ErrLeaseHeld)
	case pgConstraint(err, pgUniqueViolation, "device_leases_active_run_key"):
		return fmt.Errorf("run %s: an active lease of another device: %w", runID, agent.ErrLeaseRunElsewhere)
	}
	return err
}

// RenewLease implements agent.Leases: one UPDATE … RETURNING.
func (s *Store) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	if ttl <= 0 {
		return agent.Lease{}, fmt.Errorf("renew lease %s/%d ttl %v: %w", serial, token, ttl, snapshots.ErrInvalid)
	}
	// The new expiry is the store's clock plus ttl, in whole microseconds
	// (the column's precision).
	l, err := pgScanLease(s.pool.QueryRow(ctx, `UPDATE device_leases SET renewed_at = t.now, expires_at = t.now + $2::bigint * interval '1 microsecond'
		FROM (SELECT `+pgNow(1)+` AS now) t
		WHERE serial = $3 AND fencing_token = $4 AND released_at IS NULL AND expires_at > t.now RETURNING `+storekit.LeaseCols,
		s.leaseClockArg(), ttl.Microseconds(), serial, token))
	if errors.Is(err, pgx.ErrNoRows) {
		return agent.Lease{}, fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return l, err
}

// ReleaseLease implements agent.Leases.
func (s *Store) ReleaseLease(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) error {
	if reason == "" {
		return fmt.Errorf("release lease %s/%d without a reason: %w", serial, token, snapshots.ErrInvalid)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE device_leases SET released_at = `+pgNow(1)+`, release_reason = $2 WHERE serial = $3 AND fencing_token = $4 AND released_at IS NULL`,
		s.leaseClockArg(), string(reason), serial, token)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
	}
	return nil
}

// ReleaseHolderLeases implements agent.Leases and returns the leases it
// ended, released, in acquisition order. The release is one UPDATE of the
// matching tokens still active, so a lease released or taken over meanwhile
// is left alone and not returned; with expiredOnly the same UPDATE leaves a
// lease unexpired by the database's clock alone.
func (s *Store) ReleaseHolderLeases(ctx context.Context, match func(string) bool, expiredOnly bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	if reason == "" {
		return nil, fmt.Errorf("release holder leases without a reason: %w", snapshots.ErrInvalid)
	}
	active, err := s.ActiveLeases(ctx, agent.Admin())
	if err != nil {
		return nil, err
	}
	var tokens []int64
	for _, l := range active {
		if match(l.Holder) {
			tokens = append(tokens, l.FencingToken)
		}
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	out, err := collect(pgScanLease)(s.pool.Query(ctx, `UPDATE device_leases SET released_at = `+pgNow(1)+`, release_reason = $2
		WHERE fencing_token = ANY($3) AND released_at IS NULL AND (NOT $4 OR expires_at <= `+pgNow(1)+`) RETURNING `+storekit.LeaseCols,
		s.leaseClockArg(), string(reason), tokens, expiredOnly))
	if err != nil {
		return nil, err
	}
	// RETURNING has no order.
	slices.SortFunc(out, func(a, b agent.Lease) int { return cmp.Compare(a.FencingToken, b.FencingToken) })
	return out, nil
}

// ActiveLeases implements agent.Leases.
func (s *Store) ActiveLeases(ctx context.Context, sc agent.Scope) ([]agent.Lease, error) {
	cond, args, err := storekit.ScopeCond(sc, "device_leases.run_id", storekit.PgPH, 1)
	if err != nil {
		return nil, err
	}
	return collect(pgScanLease)(s.pool.Query(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE released_at IS NULL`+cond+` ORDER BY fencing_token`, args...))
}

// LeaseHistory implements agent.Leases.
func (s *Store) LeaseHistory(ctx context.Context, sc agent.Scope, device string) ([]agent.Lease, error) {
	if device == "" {
		cond, args, err := storekit.ScopeCond(sc, "device_leases.run_id", storekit.PgPH, 1)
		if err != nil {
			return nil, err
		}
		return collect(pgScanLease)(s.pool.Query(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE true`+cond+` ORDER BY fencing_token`, args...))
	}
	cond, args, err := storekit.ScopeCond(sc, "device_leases.run_id", storekit.PgPH, 2)
	if err != nil {
		return nil, err
	}
	return collect(pgScanLease)(s.pool.Query(ctx, `SELECT `+storekit.LeaseCols+` FROM device_leases WHERE device = $1`+cond+` ORDER BY fencing_token`, append([]any{device}, args...)...))
}

// LeasePage implements agent.Leases.
func (s *Store) LeasePage(ctx context.Context, sc agent.Scope, q agent.LeaseQuery) ([]agent.Lease, error) {
	query, args, err := storekit.LeasePageQuery(sc, q, storekit.PgPH)
	if err != nil {
		return nil, err
	}
	return collect(pgScanLease)(s.pool.Query(ctx, query, args...))
}
