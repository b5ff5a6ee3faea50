package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

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

// RenewActive implements storekit.Driver (Core.RenewLease): one UPDATE …
// RETURNING; the new expiry is the lease clock plus ttl, in whole
// microseconds (the column's precision).
func (d pgDriver) RenewActive(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, bool, error) {
	return pgLeaseRow(d.s.pool.QueryRow(ctx, `UPDATE device_leases SET renewed_at = t.now, expires_at = t.now + $2::bigint * interval '1 microsecond'
		FROM (SELECT `+pgNow(1)+` AS now) t
		WHERE serial = $3 AND fencing_token = $4 AND released_at IS NULL AND expires_at > t.now RETURNING `+storekit.LeaseCols,
		d.s.leaseClockArg(), ttl.Microseconds(), serial, token))
}

var _ agent.LeaseBatchRenewer = (*Store)(nil)

// RenewLeases implements agent.LeaseBatchRenewer: one UPDATE … FROM unnest
// of the fences' serials and tokens, RETURNING the rows it renewed; a fence
// with no row returned was lost. Each row is checked as RenewActive checks
// its one: its serial and fencing token, still active, unexpired by the
// lease clock. The fences go in token order, the order the join visits and
// locks the rows in, as another daemon's batch would.
var _ agent.LeaseBatchRenewer = (*Store)(nil)

func (s *Store) RenewLeases(ctx context.Context, fences []agent.Fence, ttl time.Duration) ([]agent.Lease, []error, error) {
	if err := storekit.CheckRenew("", 0, ttl); err != nil {
		return nil, nil, err
	}
	if len(fences) == 0 {
		return nil, nil, nil
	}
	sorted := slices.SortedFunc(slices.Values(fences), func(a, b agent.Fence) int { return cmp.Compare(a.Token, b.Token) })
	serials, tokens := make([]string, len(sorted)), make([]int64, len(sorted))
	for i, f := range sorted {
		serials[i], tokens[i] = f.Serial, f.Token
	}
	rows, err := collect(pgScanLease)(s.pool.Query(ctx, `UPDATE device_leases SET renewed_at = t.now, expires_at = t.now + $2::bigint * interval '1 microsecond'
		FROM (SELECT `+pgNow(1)+` AS now) t, unnest($3::text[], $4::bigint[]) AS f(fence_serial, fence_token)
		WHERE fencing_token = f.fence_token AND serial = f.fence_serial AND released_at IS NULL AND expires_at > t.now
		RETURNING `+storekit.LeaseCols, s.leaseClockArg(), ttl.Microseconds(), serials, tokens))
	if err != nil {
		return nil, nil, fmt.Errorf("renew %d leases: %w", len(fences), err)
	}
	byToken := make(map[int64]agent.Lease, len(rows))
	for _, l := range rows {
		byToken[l.FencingToken] = l
	}
	renewed, lost := make([]agent.Lease, len(fences)), make([]error, len(fences))
	for i, f := range fences {
		if l, ok := byToken[f.Token]; ok && l.Serial == f.Serial {
			renewed[i] = l
		} else {
			lost[i] = storekit.LeaseLost(f.Serial, f.Token)
		}
	}
	return renewed, lost, nil
}

// ReleaseActive implements storekit.Driver (Core.ReleaseLease).
func (d pgDriver) ReleaseActive(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) (int64, error) {
	tag, err := d.s.pool.Exec(ctx, `UPDATE device_leases SET released_at = `+pgNow(1)+`, release_reason = $2 WHERE serial = $3 AND fencing_token = $4 AND released_at IS NULL`,
		d.s.leaseClockArg(), string(reason), serial, token)
	return tag.RowsAffected(), err
}

// ReleaseHolderLeases implements agent.Leases and returns the leases it
// ended, released, in acquisition order. The release is one UPDATE of the
// matching tokens still active, so a lease released or taken over meanwhile
// is left alone and not returned; with expiredOnly the same UPDATE leaves a
// lease unexpired by the database's clock alone.
func (s *Store) ReleaseHolderLeases(ctx context.Context, match func(string) bool, expiredOnly bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	if err := storekit.CheckReleaseHolder(reason); err != nil {
		return nil, err
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
