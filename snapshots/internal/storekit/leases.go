package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

const LeaseCols = `fencing_token, serial, holder, run_id, acquired_at, renewed_at, expires_at, released_at, release_reason, device`

// MaxDeviceKey bounds a lease's device key (host id + "/" + serial or AVD
// name); longer is no device of ours.
const MaxDeviceKey = 255

// CheckLeaseRequest validates an acquisition's arguments.
func CheckLeaseRequest(device, holder, runID string, ttl time.Duration) error {
	_, serial := agent.SplitDeviceKey(device)
	if serial == "" || len(device) > MaxDeviceKey || holder == "" || runID == "" || ttl <= 0 {
		return fmt.Errorf("acquire lease %q/%q/%q ttl %v: %w", device, holder, runID, ttl, snapshots.ErrInvalid)
	}
	return nil
}

// PastGrace: an expired lease is handed out one of its holder's heartbeats
// (its TTL/3) after its expiry.
func PastGrace(l agent.Lease, now time.Time) bool {
	return !l.ExpiresAt.Add(l.ExpiresAt.Sub(l.RenewedAt) / 3).After(now)
}

// RunElsewhere decides an acquisition for a run that holds the active lease
// other of another device (a run named by a bare serial may go to any host's
// device of that serial, but to one at a time): ErrLeaseHeld while other
// lives (and its grace); after, nil, and the caller ends other (expired).
func RunElsewhere(other agent.Lease, now time.Time) error {
	if PastGrace(other, now) {
		return nil
	}
	return fmt.Errorf("run %s on device %s by %s (lease expires %s): %w",
		other.RunID, other.Device, other.Holder, other.ExpiresAt.Format(time.RFC3339), agent.ErrLeaseRunElsewhere)
}

// TakeOver decides an acquisition of a device whose active lease is cur:
// "" when it is cur's own and unexpired (same run and holder: renew it), the
// reason to release cur with when it may be taken over, ErrLeaseHeld
// otherwise. A holder re-acquiring its own expired lease gets a new lease
// (LeaseExpired ends the old one): the fencing token grows with every
// acquisition, so a commit still in flight under the old token (the attempt
// that stopped when the lease expired) fails its fence.
func TakeOver(cur agent.Lease, holder, runID string, now time.Time) (agent.LeaseReleaseReason, error) {
	// An expired lease is handed out one of its holder's heartbeats (its TTL/3)
	// after its expiry: the holder stops driving the device when it cannot
	// renew in time, and gets that long to let go of a node in flight.
	handOut := PastGrace(cur, now)
	switch {
	case cur.RunID == runID && cur.Holder == holder && cur.ExpiresAt.After(now):
		return "", nil
	case cur.RunID == runID && cur.Holder == holder:
		// Its own holder asks again: no grace to wait for.
		return agent.LeaseExpired, nil
	case cur.RunID == runID && handOut:
		return agent.LeaseHolderLost, nil
	case handOut:
		return agent.LeaseExpired, nil
	}
	return "", fmt.Errorf("device %s: held by run %s (holder %s) until %s: %w",
		cur.Serial, cur.RunID, cur.Holder, cur.ExpiresAt.Format(time.RFC3339), agent.ErrLeaseHeld)
}

// CheckFence reports whether l (the lease row with the fence's token, found
// or not) lets a step commit now: active and unexpired.
func CheckFence(f *agent.Fence, l agent.Lease, found bool, now time.Time) error {
	switch {
	case !found:
		return fmt.Errorf("device %s lease %d: no such lease: %w", f.Serial, f.Token, agent.ErrLeaseLost)
	case l.ReleasedAt != nil:
		return fmt.Errorf("device %s lease %d released (%s): %w", f.Serial, f.Token, l.ReleaseReason, agent.ErrLeaseLost)
	case !l.ExpiresAt.After(now):
		return fmt.Errorf("device %s lease %d expired at %s: %w", f.Serial, f.Token, l.ExpiresAt.Format(time.RFC3339Nano), agent.ErrLeaseLost)
	}
	return nil
}

// LeaseTx is a dialect's queries of one lease acquisition, inside the
// transaction the dialect opened, which keeps every other acquisition of
// the device out until it ends (SQLite: the write lock; Postgres: an
// advisory lock of the device key, taken by LockDevice, and the rows read
// locked FOR UPDATE).
type LeaseTx interface {
	// LockDevice serializes the acquisitions of device (a free device has
	// no row to lock).
	LockDevice(ctx context.Context, device string) error
	// ActiveLease reads device's active lease; found false: none.
	ActiveLease(ctx context.Context, device string) (l agent.Lease, found bool, err error)
	// RunLeaseElsewhere reads runID's active lease of a device other than
	// device (a run is driven on one device at a time); found false: none.
	RunLeaseElsewhere(ctx context.Context, runID, device string) (l agent.Lease, found bool, err error)
	// LeaseNow reads the lease clock, once the rows above are locked: the
	// new lease must not start before the one it follows ended.
	LeaseNow(ctx context.Context) (time.Time, error)
	// RenewLeaseRow sets renewed_at and expires_at of the lease token.
	RenewLeaseRow(ctx context.Context, token int64, now, expires time.Time) error
	// EndLease releases the lease token at now for reason.
	EndLease(ctx context.Context, token int64, now time.Time, reason agent.LeaseReleaseReason) error
	// InsertLease writes l (without its token) and returns its fencing
	// token, which grows with every acquisition.
	InsertLease(ctx context.Context, l agent.Lease) (int64, error)
	// Conflict names the unique constraint err reports.
	Conflict(err error) Conflict
}

// AcquireLease is agent.Leases.AcquireLease in tx: the device's active
// lease is renewed (its own holder and run, unexpired), taken over (TakeOver)
// or refused; the run's lease of another device ends (RunElsewhere) or
// refuses; a new lease is written. The partial unique indexes are the last
// guard: their violations are ErrLeaseHeld and ErrLeaseRunElsewhere
// (LeaseConflict). The caller commits tx when err is nil.
func AcquireLease(ctx context.Context, tx LeaseTx, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if err := CheckLeaseRequest(device, holder, runID, ttl); err != nil {
		return agent.Lease{}, err
	}
	if err := tx.LockDevice(ctx, device); err != nil {
		return agent.Lease{}, err
	}
	cur, curFound, err := tx.ActiveLease(ctx, device)
	if err != nil {
		return agent.Lease{}, err
	}
	other, otherFound, err := tx.RunLeaseElsewhere(ctx, runID, device)
	if err != nil {
		return agent.Lease{}, err
	}
	now, err := tx.LeaseNow(ctx)
	if err != nil {
		return agent.Lease{}, err
	}
	now = StoreTime(now)
	expires := StoreTime(now.Add(ttl))
	if curFound {
		reason, err := TakeOver(cur, holder, runID, now)
		if err != nil {
			return agent.Lease{}, err
		}
		if reason == "" {
			// Re-acquiring one's own lease renews it.
			cur.RenewedAt, cur.ExpiresAt = now, expires
			return cur, tx.RenewLeaseRow(ctx, cur.FencingToken, now, expires)
		}
		if err := tx.EndLease(ctx, cur.FencingToken, now, reason); err != nil {
			return agent.Lease{}, err
		}
	}
	if otherFound {
		if err := RunElsewhere(other, now); err != nil {
			return agent.Lease{}, err
		}
		if err := tx.EndLease(ctx, other.FencingToken, now, agent.LeaseExpired); err != nil {
			return agent.Lease{}, err
		}
	}
	_, serial := agent.SplitDeviceKey(device)
	l := agent.Lease{Device: device, Serial: serial, Holder: holder, RunID: runID, AcquiredAt: now, RenewedAt: now, ExpiresAt: expires}
	token, err := tx.InsertLease(ctx, l)
	if err := LeaseConflict(tx.Conflict(err), err, device, runID); err != nil {
		return agent.Lease{}, err
	}
	l.FencingToken = token
	return l, nil
}

// LeaseConflict is err (an acquisition's insert or commit, whose unique
// violation is c) as AcquireLease returns it: a violation of the partial
// unique indexes is its agent error, other errors are returned as they
// are, nil stays nil.
func LeaseConflict(c Conflict, err error, device, runID string) error {
	switch c {
	case ConflictLeaseDevice:
		return fmt.Errorf("device %s: another active lease: %w", device, agent.ErrLeaseHeld)
	case ConflictLeaseRun:
		return fmt.Errorf("run %s: an active lease of another device: %w", runID, agent.ErrLeaseRunElsewhere)
	}
	return err
}

// CheckRenew and CheckRelease validate a renewal's and a release's
// arguments; LeaseLost is their answer when no active lease matched.
func CheckRenew(serial string, token int64, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("renew lease %s/%d ttl %v: %w", serial, token, ttl, snapshots.ErrInvalid)
	}
	return nil
}

func CheckRelease(serial string, token int64, reason agent.LeaseReleaseReason) error {
	if reason == "" {
		return fmt.Errorf("release lease %s/%d without a reason: %w", serial, token, snapshots.ErrInvalid)
	}
	return nil
}

func LeaseLost(serial string, token int64) error {
	return fmt.Errorf("device %s lease %d: %w", serial, token, agent.ErrLeaseLost)
}

// CheckReleaseHolder validates ReleaseHolderLeases' reason.
func CheckReleaseHolder(reason agent.LeaseReleaseReason) error {
	if reason == "" {
		return fmt.Errorf("release holder leases without a reason: %w", snapshots.ErrInvalid)
	}
	return nil
}
