package storekit

import (
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
