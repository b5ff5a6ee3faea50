package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// DeviceKey is a device's identity in the fleet, the key of its leases:
// host + "/" + serial, where serial is the adb serial (or the AVD name a run
// asks for) and host is, for a connected device, the identity read from the
// device itself (service.DeviceIdentity: every daemon that reaches it, from
// any machine, computes one key), and for an AVD to boot the machine of the
// adb server (device.HostID). Every host's emulator-5554 has its own. An
// empty host gives the bare serial (a single host, and leases of before
// the key existed).
func DeviceKey(host, serial string) string {
	if host == "" {
		return serial
	}
	return host + "/" + serial
}

// SplitDeviceKey returns the host and serial of a DeviceKey (host "" for a
// bare serial). adb serials and AVD names hold no "/".
func SplitDeviceKey(key string) (host, serial string) {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// LeaseReleaseReason says why a device lease ended.
type LeaseReleaseReason string

const (
	LeaseFinished     LeaseReleaseReason = "finished"      // the run ended FINISHED or FAILED
	LeaseCanceled     LeaseReleaseReason = "canceled"      // the run was canceled
	LeaseHolderLost   LeaseReleaseReason = "holder_lost"   // its holder died (taken back at restart or on takeover)
	LeaseDeviceAbsent LeaseReleaseReason = "device_absent" // the device left the adb server
	LeaseExpired      LeaseReleaseReason = "expired"       // not renewed within its TTL
	LeaseShutdown     LeaseReleaseReason = "shutdown"      // the daemon stopped; the run stays resumable
)

// Lease is one device lease: the exclusive right of one run (driven by one
// holder, a daemon or a one-shot `run` process) to drive the device Device
// (its DeviceKey), whose adb serial is Serial. FencingToken grows with every acquisition (store-wide),
// so a holder that lost its lease can be told apart from the new one.
// ReleasedAt is nil while the lease is active.
type Lease struct {
	Device        string             `json:"device"`
	Serial        string             `json:"serial"`
	Holder        string             `json:"holder"`
	RunID         string             `json:"runId"`
	FencingToken  int64              `json:"fencingToken"`
	AcquiredAt    time.Time          `json:"acquiredAt"`
	RenewedAt     time.Time          `json:"renewedAt"`
	ExpiresAt     time.Time          `json:"expiresAt"`
	ReleasedAt    *time.Time         `json:"releasedAt,omitempty"`
	ReleaseReason LeaseReleaseReason `json:"releaseReason,omitempty"`
}

var (
	// ErrLeaseHeld: the device has an unexpired lease for another run.
	ErrLeaseHeld = errors.New("device lease held by another run")
	// ErrLeaseRunElsewhere (also an ErrLeaseHeld): the run is driven on
	// another device (of another host) under a live lease.
	ErrLeaseRunElsewhere = fmt.Errorf("run driven on another device: %w", ErrLeaseHeld)
	// ErrLeaseLost: the lease with that fencing token is no longer active
	// (released, expired and taken over).
	ErrLeaseLost = errors.New("device lease lost")
)

// Leases is the device lease port. The embedded store keeps leases in its
// file; the fleet keeps them in Postgres. All times come from the store's clock.
type Leases interface {
	// AcquireLease takes the device with that DeviceKey for runID (the
	// lease's Serial is the key's serial). An active lease of another run
	// that has not expired gives ErrLeaseHeld; an expired one is released
	// (LeaseExpired) and taken over; an active lease of the same run held by
	// another holder (a restarted daemon resuming it) is released
	// (LeaseHolderLost) and taken over.
	AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (Lease, error)
	// RenewLease, ReleaseLease and a Fence name a lease by its Serial and
	// token (tokens are unique store-wide).
	//
	// RenewLease extends the lease with that fencing token by ttl from now;
	// ErrLeaseLost when it is no longer active.
	RenewLease(ctx context.Context, serial string, fencingToken int64, ttl time.Duration) (Lease, error)
	// ReleaseLease ends the lease with that fencing token; ErrLeaseLost when
	// it is no longer active.
	ReleaseLease(ctx context.Context, serial string, fencingToken int64, reason LeaseReleaseReason) error
	// ReleaseHolderLeases ends every active lease whose holder satisfies
	// match (a daemon taking back the leases of a dead predecessor) and
	// returns them. With expiredOnly it ends only those whose expiry has
	// passed by the store's clock: on a shared store a local record that
	// names a holder dead (a data dir's lock, which a copied data dir
	// carries too) is no proof, a heartbeat the store saw stop is.
	ReleaseHolderLeases(ctx context.Context, match func(holder string) bool, expiredOnly bool, reason LeaseReleaseReason) ([]Lease, error)
	// ActiveLeases lists the active leases; LeaseHistory every lease of the
	// device (its DeviceKey; "" = all devices), by acquisition. A tenant
	// scope sees only the leases of its tenant's runs; the zero Scope is
	// refused (ErrNoScope).
	ActiveLeases(ctx context.Context, sc Scope) ([]Lease, error)
	LeaseHistory(ctx context.Context, sc Scope, device string) ([]Lease, error)
	// LeasePage lists one page of the lease history sc sees, newest first
	// (fencing token descending), as q selects; q must pass Check.
	LeasePage(ctx context.Context, sc Scope, q LeaseQuery) ([]Lease, error)
}

// LeaseBatchRenewer is an optional port of a Leases shared by a fleet (the
// Postgres store): a daemon renews all its leases in one statement each
// heartbeat, one round trip per host instead of one per device (issue 26
// part 4: 32,000 leases renewed every TTL/3 were 3,200 statements a second).
type LeaseBatchRenewer interface {
	// RenewLeases extends each lease of fences (its Serial and fencing
	// Token), as RenewLease does, by ttl from the store's now, in one
	// statement. For each i, either renewed[i] is fences[i]'s renewed lease
	// and lost[i] nil, or lost[i] wraps ErrLeaseLost: that lease is no
	// longer active and unexpired (released, expired, taken over), which
	// leaves the others renewed. err: the call failed as a whole (the store
	// unreachable, ctx done, ttl <= 0); nothing is known of any lease then.
	RenewLeases(ctx context.Context, fences []Fence, ttl time.Duration) (renewed []Lease, lost []error, err error)
}

// MaxLeasePage bounds LeaseQuery.Limit.
const MaxLeasePage = 1000

// LeaseQuery selects a page of lease history (Leases.LeasePage).
type LeaseQuery struct {
	// Device keeps the leases of one device (its DeviceKey); "" = all.
	Device string
	// RunID keeps the leases of one run; "" = all.
	RunID string
	// Before keeps the leases whose fencing token is smaller (the next
	// page after one that ended at that token: keyset pagination); 0 =
	// from the newest.
	Before int64
	// Limit caps the page: 1..MaxLeasePage.
	Limit int
}

// Check reports a query LeasePage refuses: a Limit outside 1..MaxLeasePage,
// a negative Before, a Device or RunID over 255 bytes (ErrInvalidRequest).
func (q LeaseQuery) Check() error {
	switch {
	case q.Limit < 1 || q.Limit > MaxLeasePage:
		return Errorf(ErrInvalidRequest, "limit: %d is not a count from 1 to %d", q.Limit, MaxLeasePage)
	case q.Before < 0:
		return Errorf(ErrInvalidRequest, "before: %d is not a fencing token (1, 2, …)", q.Before)
	case len(q.Device) > 255:
		return Errorf(ErrInvalidRequest, "device: over 255 bytes")
	case len(q.RunID) > 255:
		return Errorf(ErrInvalidRequest, "runId: over 255 bytes")
	}
	return nil
}

// Fence names the device lease a commit is made under. A store commits a
// Step carrying a Fence only while the lease with that serial and fencing
// token is active and unexpired by the store's clock; otherwise it writes
// nothing and returns an error wrapping ErrLeaseLost. This is what keeps a
// daemon whose lease expired or was taken over (a paused process, a network
// partition) from committing another step of the run.
type Fence struct {
	Serial string `json:"serial"`
	Token  int64  `json:"fencingToken"`
}

type fenceKey struct{}

// WithFence returns ctx carrying f; the engine puts it on every Step it
// commits for the run driven with that ctx.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the Fence of ctx, or nil when it carries none.
func FenceFrom(ctx context.Context) *Fence {
	if f, ok := ctx.Value(fenceKey{}).(Fence); ok {
		return &f
	}
	return nil
}
