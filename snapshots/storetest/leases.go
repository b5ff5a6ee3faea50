package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// Clock is a settable agent.Clock, safe for concurrent use. RunLeases gives
// one to every store it makes and moves it to drive lease expiry.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now implements agent.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// leaseEpoch is where RunLeases' clocks start: not in UTC and with
// nanoseconds, so a store that hands back the clock's reading instead of the
// time it stored (UTC, its own precision) is caught.
var leaseEpoch = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+2", 2*60*60))

// RunLeases runs the lease contract against stores made by newLeases: a
// fresh, empty, migrated store per call, whose times all come from clock
// (sqlite.Options.Clock, postgres.Options.Clock); newLeases registers its
// own cleanup.
func RunLeases(t *testing.T, newLeases func(t *testing.T, clock agent.Clock) agent.Leases) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s agent.Leases, c *Clock)
	}{
		{"AcquireFree", testLeaseAcquireFree},
		{"HeldByAnotherRun", testLeaseHeld},
		{"ReacquireRenews", testLeaseReacquireRenews},
		{"ReacquireExpiredIsNewAcquisition", testLeaseReacquireExpired},
		{"SameRunOtherHolderTakesOverAfterExpiry", testLeaseTakeover},
		{"ExpiredNotHandedOutDuringGrace", testLeaseGrace},
		{"ExpiredTakenOver", testLeaseExpiry},
		{"Renew", testLeaseRenew},
		{"Release", testLeaseRelease},
		{"StaleFencingToken", testLeaseStaleToken},
		{"ReleaseHolderLeases", testLeaseReleaseHolder},
		{"ReleaseHolderLeasesExpiredOnly", testLeaseReleaseHolderExpired},
		{"ActiveAndHistoryOrder", testLeaseHistoryOrder},
		{"PageNewestFirst", testLeasePage},
		{"FencingTokensIncrease", testLeaseTokensIncrease},
		{"ConcurrentAcquireFree", testLeaseConcurrentFree},
		{"ConcurrentTakeoverExpired", testLeaseConcurrentExpired},
		{"ConcurrentSameRunHolders", testLeaseConcurrentSameRun},
		{"KeyedByDeviceIdentity", testLeaseDeviceKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(leaseEpoch)
			tc.fn(t, newLeases(t, c), c)
		})
	}
}

const leaseTTL = 30 * time.Second

// handOut is how long after its acquisition an unrenewed lease of leaseTTL
// is handed to another holder: its expiry plus one of its holder's
// heartbeats (TTL/3) of grace, plus a second.
const handOut = leaseTTL + leaseTTL/3 + time.Second

func newRunID() string { return ulid.Make().String() }

func mustAcquire(t *testing.T, s agent.Leases, serial, holder, runID string, ttl time.Duration) agent.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx(t), serial, holder, runID, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%s, %s, %s): %v", serial, holder, runID, err)
	}
	return l
}

func mustRelease(t *testing.T, s agent.Leases, l agent.Lease, reason agent.LeaseReleaseReason) {
	t.Helper()
	if err := s.ReleaseLease(ctx(t), l.Serial, l.FencingToken, reason); err != nil {
		t.Fatalf("ReleaseLease(%s, %d): %v", l.Serial, l.FencingToken, err)
	}
}

// near: a stored time is the clock's reading at the store's precision
// (at least milliseconds).
func near(a, b time.Time) bool { d := a.Sub(b); return d > -time.Millisecond && d < time.Millisecond }

// released returns l as ReleaseLease(reason) at now leaves it (ReleasedAt
// compared with near).
func released(l agent.Lease, now time.Time, reason agent.LeaseReleaseReason) agent.Lease {
	l.ReleasedAt, l.ReleaseReason = &now, reason
	return l
}

func leaseString(l agent.Lease) string {
	rel := "active"
	if l.ReleasedAt != nil {
		rel = fmt.Sprintf("released %s (%s)", l.ReleasedAt.UTC().Format(time.RFC3339Nano), l.ReleaseReason)
	} else if l.ReleaseReason != "" {
		rel = fmt.Sprintf("active with release reason %q", l.ReleaseReason)
	}
	return fmt.Sprintf("{%s #%d run %s holder %s acquired %s renewed %s expires %s %s}", l.Serial, l.FencingToken, l.RunID, l.Holder,
		l.AcquiredAt.UTC().Format(time.RFC3339Nano), l.RenewedAt.UTC().Format(time.RFC3339Nano), l.ExpiresAt.UTC().Format(time.RFC3339Nano), rel)
}

// diffLease says how got differs from want: identity and reason exactly,
// AcquiredAt/RenewedAt/ExpiresAt equal (time.Equal), ReleasedAt near.
func diffLease(got, want agent.Lease) string {
	var d []string
	if got.Device != want.Device || got.Serial != want.Serial || got.Holder != want.Holder || got.RunID != want.RunID || got.FencingToken != want.FencingToken {
		d = append(d, "identity")
	}
	if !got.AcquiredAt.Equal(want.AcquiredAt) {
		d = append(d, "acquiredAt")
	}
	if !got.RenewedAt.Equal(want.RenewedAt) {
		d = append(d, "renewedAt")
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		d = append(d, "expiresAt")
	}
	switch {
	case (got.ReleasedAt == nil) != (want.ReleasedAt == nil):
		d = append(d, "releasedAt")
	case got.ReleasedAt != nil && !near(*got.ReleasedAt, *want.ReleasedAt):
		d = append(d, "releasedAt")
	}
	if got.ReleaseReason != want.ReleaseReason {
		d = append(d, "releaseReason")
	}
	return strings.Join(d, ", ")
}

func sameLease(t *testing.T, what string, got, want agent.Lease) {
	t.Helper()
	if d := diffLease(got, want); d != "" {
		t.Errorf("%s = %s,\n\twant %s (differs in %s)", what, leaseString(got), leaseString(want), d)
	}
}

func sameLeases(t *testing.T, what string, got []agent.Lease, want ...agent.Lease) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = diffLease(got[i], want[i]) == ""
	}
	if ok {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: got %d leases, want %d", what, len(got), len(want))
	for i := range max(len(got), len(want)) {
		g, w := "-", "-"
		if i < len(got) {
			g = leaseString(got[i])
		}
		if i < len(want) {
			w = leaseString(want[i])
		}
		fmt.Fprintf(&b, "\n\t[%d] got  %s\n\t    want %s", i, g, w)
	}
	t.Error(b.String())
}

func active(t *testing.T, s agent.Leases) []agent.Lease {
	t.Helper()
	ls, err := s.ActiveLeases(ctx(t), agent.Admin())
	if err != nil {
		t.Fatalf("ActiveLeases: %v", err)
	}
	return ls
}

func history(t *testing.T, s agent.Leases, serial string) []agent.Lease {
	t.Helper()
	ls, err := s.LeaseHistory(ctx(t), agent.Admin(), serial)
	if err != nil {
		t.Fatalf("LeaseHistory(%q): %v", serial, err)
	}
	return ls
}

// checkFresh: l is a new lease of (serial, holder, run) acquired now for ttl.
func checkFresh(t *testing.T, l agent.Lease, serial, holder, runID string, now time.Time, ttl time.Duration) {
	t.Helper()
	if l.Device != serial || l.Serial != serial || l.Holder != holder || l.RunID != runID {
		t.Errorf("lease = %s, want device %s holder %s run %s", leaseString(l), serial, holder, runID)
	}
	if l.FencingToken <= 0 {
		t.Errorf("lease fencing token %d, want > 0", l.FencingToken)
	}
	if !near(l.AcquiredAt, now) || !l.RenewedAt.Equal(l.AcquiredAt) || !l.ExpiresAt.Equal(l.AcquiredAt.Add(ttl)) {
		t.Errorf("lease times = %s, want acquired = renewed = %s, expires %s later", leaseString(l), now, ttl)
	}
	if l.ReleasedAt != nil || l.ReleaseReason != "" {
		t.Errorf("new lease released: %s", leaseString(l))
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

func testLeaseAcquireFree(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	for _, bad := range []struct {
		serial, holder, run string
		ttl                 time.Duration
	}{
		{"", "daemon-1", runA, leaseTTL},
		{"emulator-5554", "", runA, leaseTTL},
		{"emulator-5554", "daemon-1", "", leaseTTL},
		{"emulator-5554", "daemon-1", runA, 0},
		{"emulator-5554", "daemon-1", runA, -time.Second},
	} {
		if l, err := s.AcquireLease(ctx(t), bad.serial, bad.holder, bad.run, bad.ttl); err == nil {
			t.Errorf("AcquireLease(%q, %q, %q, %v) = %s, want an error", bad.serial, bad.holder, bad.run, bad.ttl, leaseString(l))
		}
	}
	sameLeases(t, "history after invalid acquisitions", history(t, s, ""))
	sameLeases(t, "active before any lease", active(t, s))

	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	checkFresh(t, a, "emulator-5554", "daemon-1", runA, c.Now(), leaseTTL)
	sameLeases(t, "ActiveLeases", active(t, s), a)
	sameLeases(t, "LeaseHistory(serial)", history(t, s, "emulator-5554"), a)
	sameLeases(t, "LeaseHistory(all)", history(t, s, ""), a)
	sameLeases(t, "LeaseHistory(other device)", history(t, s, "emulator-5556"))

	// Another device is free for another run, not for the same run (a run
	// is driven on one device at a time).
	c.Advance(time.Second)
	b := mustAcquire(t, s, "emulator-5556", "daemon-2", runB, time.Minute)
	checkFresh(t, b, "emulator-5556", "daemon-2", runB, c.Now(), time.Minute)
	_, err := s.AcquireLease(ctx(t), "emulator-5558", "daemon-1", runA, leaseTTL)
	wantErr(t, "AcquireLease(same run, another device)", err, agent.ErrLeaseRunElsewhere)
	a2 := mustAcquire(t, s, "emulator-5558", "daemon-1", newRunID(), leaseTTL)
	if !(a.FencingToken < b.FencingToken && b.FencingToken < a2.FencingToken) {
		t.Errorf("fencing tokens %d, %d, %d: want increasing", a.FencingToken, b.FencingToken, a2.FencingToken)
	}
	sameLeases(t, "ActiveLeases", active(t, s), a, b, a2)
}

func testLeaseHeld(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(leaseTTL - time.Second)
	_, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-1", runB, leaseTTL)
	wantErr(t, "another run, same holder", err, agent.ErrLeaseHeld)
	_, err = s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runB, leaseTTL)
	wantErr(t, "another run, another holder", err, agent.ErrLeaseHeld)
	sameLeases(t, "history after refused acquisitions", history(t, s, ""), a)
	sameLeases(t, "active after refused acquisitions", active(t, s), a)
}

func testLeaseReacquireRenews(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(20 * time.Second)
	r, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-1", runA, time.Minute)
	if err != nil {
		t.Fatalf("re-acquire by the same run and holder: %v", err)
	}
	want := a
	want.RenewedAt, want.ExpiresAt = r.RenewedAt, r.RenewedAt.Add(time.Minute)
	sameLease(t, "re-acquired lease", r, want)
	if !near(r.RenewedAt, c.Now()) {
		t.Errorf("re-acquired lease renewed at %v, want now (%v)", r.RenewedAt, c.Now())
	}
	sameLeases(t, "history", history(t, s, ""), r)
	sameLeases(t, "active", active(t, s), r)
	// Past the first expiry, inside the renewed one: still held.
	c.Advance(40 * time.Second)
	_, err = s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runB, leaseTTL)
	wantErr(t, "another run after the re-acquisition", err, agent.ErrLeaseHeld)
}

// A holder re-acquiring its own lease after it expired (a run stopped by a
// store outage, resumed by the same daemon) makes a new acquisition with a
// larger fencing token: the old token no longer passes the fence, so a late
// commit of the stopped attempt cannot land. Inside the grace as after it.
func testLeaseReacquireExpired(t *testing.T, s agent.Leases, c *Clock) {
	for _, wait := range []time.Duration{leaseTTL, handOut} {
		runA := newRunID()
		old := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
		c.Advance(wait)
		nl, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-1", runA, leaseTTL)
		if err != nil {
			t.Fatalf("re-acquire %v after: %v", wait, err)
		}
		checkFresh(t, nl, "emulator-5554", "daemon-1", runA, c.Now(), leaseTTL)
		if nl.FencingToken <= old.FencingToken {
			t.Fatalf("re-acquired %v after expiry: fencing token %d, want > %d (a new acquisition)", wait-leaseTTL, nl.FencingToken, old.FencingToken)
		}
		h := history(t, s, "emulator-5554")
		sameLeases(t, "last two leases", h[len(h)-2:], released(old, c.Now(), agent.LeaseExpired), nl)
		sameLeases(t, "active", active(t, s), nl)
		_, err = s.RenewLease(ctx(t), "emulator-5554", old.FencingToken, leaseTTL)
		wantErr(t, "renew under the old token", err, agent.ErrLeaseLost)
		mustRelease(t, s, nl, agent.LeaseFinished)
	}
}

func testLeaseTakeover(t *testing.T, s agent.Leases, c *Clock) {
	runA := newRunID()
	old := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(5 * time.Second)
	// A live lease is never taken, not even by another holder of its run (a
	// second daemon that believes the first is dead).
	_, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runA, leaseTTL)
	wantErr(t, "same run, another holder, lease live", err, agent.ErrLeaseHeld)
	c.Advance(handOut - 5*time.Second)
	nl, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runA, leaseTTL)
	if err != nil {
		t.Fatalf("same run, another holder, after expiry: %v", err)
	}
	checkFresh(t, nl, "emulator-5554", "daemon-2", runA, c.Now(), leaseTTL)
	if nl.FencingToken <= old.FencingToken {
		t.Errorf("takeover fencing token %d, want > %d", nl.FencingToken, old.FencingToken)
	}
	sameLeases(t, "history", history(t, s, "emulator-5554"), released(old, c.Now(), agent.LeaseHolderLost), nl)
	sameLeases(t, "active", active(t, s), nl)
	// The old holder is fenced off.
	_, err = s.RenewLease(ctx(t), "emulator-5554", old.FencingToken, leaseTTL)
	wantErr(t, "old holder renews", err, agent.ErrLeaseLost)
	err = s.ReleaseLease(ctx(t), "emulator-5554", old.FencingToken, agent.LeaseFinished)
	wantErr(t, "old holder releases", err, agent.ErrLeaseLost)
	sameLeases(t, "active after the old holder's attempts", active(t, s), nl)
}

// Between its expiry and expiry + TTL/3 a lease is neither renewable (its
// holder must stop) nor handed out (its holder gets time to let go).
func testLeaseGrace(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	old := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(leaseTTL + time.Second)
	_, err := s.RenewLease(ctx(t), "emulator-5554", old.FencingToken, leaseTTL)
	wantErr(t, "renew after expiry", err, agent.ErrLeaseLost)
	_, err = s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runB, leaseTTL)
	wantErr(t, "another run inside the grace", err, agent.ErrLeaseHeld)
	sameLeases(t, "active inside the grace", active(t, s), old)
	c.Advance(handOut - leaseTTL - time.Second)
	nl := mustAcquire(t, s, "emulator-5554", "daemon-2", runB, leaseTTL)
	sameLeases(t, "history", history(t, s, ""), released(old, c.Now(), agent.LeaseExpired), nl)
}

func testLeaseExpiry(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	old := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(handOut)
	nl, err := s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runB, leaseTTL)
	if err != nil {
		t.Fatalf("acquire after the TTL passed: %v", err)
	}
	checkFresh(t, nl, "emulator-5554", "daemon-2", runB, c.Now(), leaseTTL)
	if nl.FencingToken <= old.FencingToken {
		t.Errorf("fencing token %d after expiry, want > %d", nl.FencingToken, old.FencingToken)
	}
	sameLeases(t, "history", history(t, s, ""), released(old, c.Now(), agent.LeaseExpired), nl)
	sameLeases(t, "active", active(t, s), nl)
	_, err = s.RenewLease(ctx(t), "emulator-5554", old.FencingToken, leaseTTL)
	wantErr(t, "expired holder renews", err, agent.ErrLeaseLost)
	err = s.ReleaseLease(ctx(t), "emulator-5554", old.FencingToken, agent.LeaseFinished)
	wantErr(t, "expired holder releases", err, agent.ErrLeaseLost)
	_, err = s.AcquireLease(ctx(t), "emulator-5554", "daemon-1", runA, leaseTTL)
	wantErr(t, "expired run acquires again", err, agent.ErrLeaseHeld)
	sameLeases(t, "history at the end", history(t, s, ""), released(old, c.Now(), agent.LeaseExpired), nl)
}

func testLeaseRenew(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(20 * time.Second)
	r, err := s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, leaseTTL)
	if err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	want := a
	want.RenewedAt, want.ExpiresAt = r.RenewedAt, r.RenewedAt.Add(leaseTTL)
	sameLease(t, "renewed lease", r, want)
	if !near(r.RenewedAt, c.Now()) {
		t.Errorf("renewed at %v, want now (%v)", r.RenewedAt, c.Now())
	}
	sameLeases(t, "history", history(t, s, ""), r)
	// 40 s after the acquisition, 20 s after the renewal: still held.
	c.Advance(20 * time.Second)
	_, err = s.AcquireLease(ctx(t), "emulator-5554", "daemon-2", runB, leaseTTL)
	wantErr(t, "another run after the renewal", err, agent.ErrLeaseHeld)
	// Renewing again keeps the token and moves the expiry.
	r2, err := s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, time.Minute)
	if err != nil {
		t.Fatalf("second RenewLease: %v", err)
	}
	want.RenewedAt, want.ExpiresAt = r2.RenewedAt, r2.RenewedAt.Add(time.Minute)
	sameLease(t, "renewed twice", r2, want)
	sameLeases(t, "active", active(t, s), r2)
	// An expired lease cannot be renewed, even when nobody took it over: its
	// holder has to stop driving the device at expiry (and acquire again).
	c.Advance(2 * time.Minute)
	_, err = s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, leaseTTL)
	wantErr(t, "RenewLease of an expired lease nobody took", err, agent.ErrLeaseLost)
	sameLeases(t, "active after the refused renewal", active(t, s), r2)
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, ttl); err == nil {
			t.Errorf("RenewLease(ttl %v) = nil error, want one", ttl)
		}
	}
	sameLeases(t, "history at the end", history(t, s, ""), r2)
}

func testLeaseRelease(t *testing.T, s agent.Leases, c *Clock) {
	runA, runB := newRunID(), newRunID()
	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	c.Advance(time.Second)
	err := s.ReleaseLease(ctx(t), "emulator-5556", a.FencingToken, agent.LeaseFinished)
	wantErr(t, "release on another device", err, agent.ErrLeaseLost)
	sameLeases(t, "active after a release on another device", active(t, s), a)
	mustRelease(t, s, a, agent.LeaseFinished)
	sameLeases(t, "history", history(t, s, ""), released(a, c.Now(), agent.LeaseFinished))
	sameLeases(t, "active", active(t, s))
	// Released once: a second release and a renewal are lost.
	c.Advance(time.Second)
	err = s.ReleaseLease(ctx(t), "emulator-5554", a.FencingToken, agent.LeaseCanceled)
	wantErr(t, "second release", err, agent.ErrLeaseLost)
	_, err = s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, leaseTTL)
	wantErr(t, "renew after release", err, agent.ErrLeaseLost)
	sameLeases(t, "history after the second release", history(t, s, ""), released(a, c.Now().Add(-time.Second), agent.LeaseFinished))
	// The device is free at once, long before the TTL.
	b := mustAcquire(t, s, "emulator-5554", "daemon-2", runB, leaseTTL)
	if b.FencingToken <= a.FencingToken {
		t.Errorf("fencing token %d after release, want > %d", b.FencingToken, a.FencingToken)
	}
	// Every reason is stored as given.
	var want []agent.Lease
	for i, reason := range []agent.LeaseReleaseReason{agent.LeaseCanceled, agent.LeaseDeviceAbsent, agent.LeaseShutdown, agent.LeaseHolderLost} {
		l := mustAcquire(t, s, fmt.Sprintf("emulator-%d", 5560+2*i), "daemon-1", newRunID(), leaseTTL)
		mustRelease(t, s, l, reason)
		want = append(want, released(l, c.Now(), reason))
	}
	for _, w := range want {
		sameLeases(t, "history of "+w.Serial, history(t, s, w.Serial), w)
	}
	sameLeases(t, "active at the end", active(t, s), b)
}

func testLeaseStaleToken(t *testing.T, s agent.Leases, c *Clock) {
	runA := newRunID()
	a := mustAcquire(t, s, "emulator-5554", "daemon-1", runA, leaseTTL)
	b := mustAcquire(t, s, "emulator-5556", "daemon-1", newRunID(), leaseTTL)
	c.Advance(time.Second)
	for _, tok := range []int64{a.FencingToken + 1000, a.FencingToken - 1, b.FencingToken, 0, -1} {
		_, err := s.RenewLease(ctx(t), "emulator-5554", tok, leaseTTL)
		wantErr(t, fmt.Sprintf("RenewLease(token %d)", tok), err, agent.ErrLeaseLost)
		err = s.ReleaseLease(ctx(t), "emulator-5554", tok, agent.LeaseFinished)
		wantErr(t, fmt.Sprintf("ReleaseLease(token %d)", tok), err, agent.ErrLeaseLost)
	}
	_, err := s.RenewLease(ctx(t), "emulator-9999", a.FencingToken, leaseTTL)
	wantErr(t, "RenewLease on an unknown device", err, agent.ErrLeaseLost)
	sameLeases(t, "active after stale attempts", active(t, s), a, b)
	sameLeases(t, "history after stale attempts", history(t, s, ""), a, b)
	// A takeover makes the first token stale.
	c.Advance(handOut)
	n := mustAcquire(t, s, "emulator-5554", "daemon-2", runA, leaseTTL)
	_, err = s.RenewLease(ctx(t), "emulator-5554", a.FencingToken, leaseTTL)
	wantErr(t, "RenewLease with the token taken over", err, agent.ErrLeaseLost)
	if _, err := s.RenewLease(ctx(t), "emulator-5554", n.FencingToken, leaseTTL); err != nil {
		t.Errorf("RenewLease with the current token: %v", err)
	}
}

func testLeaseReleaseHolder(t *testing.T, s agent.Leases, c *Clock) {
	a := mustAcquire(t, s, "emulator-5554", "daemon-1/pid-100", newRunID(), leaseTTL)
	b := mustAcquire(t, s, "emulator-5556", "daemon-1/pid-100", newRunID(), leaseTTL)
	cli := mustAcquire(t, s, "emulator-5558", "cli/pid-7", newRunID(), leaseTTL)
	d := mustAcquire(t, s, "emulator-5560", "daemon-1/pid-100", newRunID(), leaseTTL)
	e := mustAcquire(t, s, "emulator-5562", "daemon-1/pid-200", newRunID(), leaseTTL)
	mustRelease(t, s, d, agent.LeaseFinished)
	dRel := c.Now()
	c.Advance(time.Second)
	var (
		mu   sync.Mutex
		seen []string
	)
	got, err := s.ReleaseHolderLeases(ctx(t), func(h string) bool {
		mu.Lock()
		seen = append(seen, h)
		mu.Unlock()
		return strings.HasPrefix(h, "daemon-1/") && h != "daemon-1/pid-200"
	}, false, agent.LeaseHolderLost)
	if err != nil {
		t.Fatalf("ReleaseHolderLeases: %v", err)
	}
	if !slices.Contains(seen, "cli/pid-7") || !slices.Contains(seen, "daemon-1/pid-200") {
		t.Errorf("match saw holders %v, want every active holder", seen)
	}
	slices.SortFunc(got, byToken)
	now := c.Now()
	sameLeases(t, "ReleaseHolderLeases", got, released(a, now, agent.LeaseHolderLost), released(b, now, agent.LeaseHolderLost))
	sameLeases(t, "active", active(t, s), cli, e)
	sameLeases(t, "history", history(t, s, ""),
		released(a, now, agent.LeaseHolderLost), released(b, now, agent.LeaseHolderLost), cli,
		released(d, dRel, agent.LeaseFinished), e)
	_, err = s.RenewLease(ctx(t), a.Serial, a.FencingToken, leaseTTL)
	wantErr(t, "renew a lease taken back", err, agent.ErrLeaseLost)
	again, err := s.ReleaseHolderLeases(ctx(t), func(h string) bool { return strings.HasPrefix(h, "daemon-1/pid-100") }, false, agent.LeaseHolderLost)
	if err != nil || len(again) != 0 {
		t.Errorf("second ReleaseHolderLeases = %d leases, %v; want none", len(again), err)
	}
	none, err := s.ReleaseHolderLeases(ctx(t), func(string) bool { return false }, false, agent.LeaseShutdown)
	if err != nil || len(none) != 0 {
		t.Errorf("ReleaseHolderLeases(match nothing) = %d leases, %v; want none", len(none), err)
	}
	sameLeases(t, "active at the end", active(t, s), cli, e)
	// The devices taken back are free.
	mustAcquire(t, s, a.Serial, "daemon-1/pid-300", a.RunID, leaseTTL)
}

// With expiredOnly a holder's leases are ended only once expired by the
// store's clock: a live holder that a local record calls dead (a copied
// data dir's lock) keeps its lease, renews it and commits under it.
func testLeaseReleaseHolderExpired(t *testing.T, s agent.Leases, c *Clock) {
	live := mustAcquire(t, s, "emulator-5554", "daemon-1", newRunID(), leaseTTL)
	c.Advance(leaseTTL / 2)
	dead := mustAcquire(t, s, "emulator-5556", "daemon-1", newRunID(), leaseTTL/4)
	c.Advance(leaseTTL / 4)
	dead2 := mustAcquire(t, s, "emulator-5558", "daemon-1", newRunID(), leaseTTL/8)
	c.Advance(leaseTTL / 8)
	// live: 3/8 TTL left; dead: expired 0 s ago (expiry = now); dead2 too.
	got, err := s.ReleaseHolderLeases(ctx(t), func(h string) bool { return h == "daemon-1" }, true, agent.LeaseHolderLost)
	if err != nil {
		t.Fatalf("ReleaseHolderLeases(expiredOnly): %v", err)
	}
	slices.SortFunc(got, byToken)
	now := c.Now()
	sameLeases(t, "ended", got, released(dead, now, agent.LeaseHolderLost), released(dead2, now, agent.LeaseHolderLost))
	sameLeases(t, "active", active(t, s), live)
	if _, err := s.RenewLease(ctx(t), live.Serial, live.FencingToken, leaseTTL); err != nil {
		t.Errorf("the live holder renews after the take-back: %v", err)
	}
}

// Interleaved acquisitions, releases and takeovers on three devices:
// ActiveLeases and LeaseHistory list them in acquisition order.
func testLeaseHistoryOrder(t *testing.T, s agent.Leases, c *Clock) {
	s1, s2, s3 := "emulator-5554", "emulator-5556", "192.168.1.20:5555"
	l1 := mustAcquire(t, s, s1, "daemon-1", newRunID(), leaseTTL)
	c.Advance(time.Second)
	l2 := mustAcquire(t, s, s2, "daemon-1", newRunID(), leaseTTL)
	c.Advance(time.Second)
	mustRelease(t, s, l1, agent.LeaseFinished)
	l1r := released(l1, c.Now(), agent.LeaseFinished)
	l3 := mustAcquire(t, s, s1, "daemon-2", newRunID(), time.Hour)
	c.Advance(time.Second)
	l4 := mustAcquire(t, s, s3, "daemon-2", newRunID(), time.Hour)
	c.Advance(handOut)
	l5 := mustAcquire(t, s, s2, "daemon-2", newRunID(), time.Hour) // l2 expired
	l2r := released(l2, c.Now(), agent.LeaseExpired)
	c.Advance(time.Hour + 21*time.Minute)                        // l4's TTL and its grace (TTL/3)
	l6 := mustAcquire(t, s, s3, "daemon-3", l4.RunID, time.Hour) // takes l4 over
	l4r := released(l4, c.Now(), agent.LeaseHolderLost)

	sameLeases(t, "LeaseHistory(all)", history(t, s, ""), l1r, l2r, l3, l4r, l5, l6)
	sameLeases(t, "LeaseHistory(s1)", history(t, s, s1), l1r, l3)
	sameLeases(t, "LeaseHistory(s2)", history(t, s, s2), l2r, l5)
	sameLeases(t, "LeaseHistory(s3)", history(t, s, s3), l4r, l6)
	sameLeases(t, "LeaseHistory(unknown)", history(t, s, "emulator-9999"))
	sameLeases(t, "ActiveLeases", active(t, s), l3, l5, l6)
}

// LeasePage pages the history newest first by fencing token, filtered by
// device and run, and refuses a query outside its limits.
func testLeasePage(t *testing.T, s agent.Leases, c *Clock) {
	s1, s2 := "emulator-5554", "emulator-5556"
	run := newRunID()
	l1 := mustAcquire(t, s, s1, "daemon-1", run, leaseTTL)
	c.Advance(time.Second)
	mustRelease(t, s, l1, agent.LeaseFinished)
	l1r := released(l1, c.Now(), agent.LeaseFinished)
	l2 := mustAcquire(t, s, s2, "daemon-1", newRunID(), leaseTTL)
	c.Advance(time.Second)
	l3 := mustAcquire(t, s, s1, "daemon-1", run, leaseTTL) // the run again
	c.Advance(time.Second)
	l4 := mustAcquire(t, s, "192.168.1.20:5555", "daemon-2", newRunID(), leaseTTL)
	page := func(q agent.LeaseQuery) []agent.Lease {
		t.Helper()
		ls, err := s.LeasePage(ctx(t), agent.Admin(), q)
		if err != nil {
			t.Fatalf("LeasePage(%+v): %v", q, err)
		}
		return ls
	}
	sameLeases(t, "LeasePage(limit 2)", page(agent.LeaseQuery{Limit: 2}), l4, l3)
	sameLeases(t, "LeasePage(limit 2, before l3)", page(agent.LeaseQuery{Limit: 2, Before: l3.FencingToken}), l2, l1r)
	sameLeases(t, "LeasePage(limit 2, before l1)", page(agent.LeaseQuery{Limit: 2, Before: l1.FencingToken}))
	sameLeases(t, "LeasePage(device s1)", page(agent.LeaseQuery{Device: s1, Limit: 10}), l3, l1r)
	sameLeases(t, "LeasePage(run)", page(agent.LeaseQuery{RunID: run, Limit: 1}), l3)
	sameLeases(t, "LeasePage(run, device s2)", page(agent.LeaseQuery{RunID: run, Device: s2, Limit: 10}))
	for _, q := range []agent.LeaseQuery{{Limit: 0}, {Limit: agent.MaxLeasePage + 1}, {Limit: 1, Before: -1}, {Limit: 1, Device: strings.Repeat("x", 256)}} {
		if _, err := s.LeasePage(ctx(t), agent.Admin(), q); err == nil || agent.Classify(err).ID != agent.ErrInvalidRequest {
			t.Errorf("LeasePage(limit %d, before %d, device of %d bytes) = %v, want invalid_request_error", q.Limit, q.Before, len(q.Device), err)
		}
	}
}

// Fencing tokens grow with every acquisition, store-wide, whatever ended the
// previous lease; renewals keep them.
func testLeaseTokensIncrease(t *testing.T, s agent.Leases, c *Clock) {
	serials := []string{"emulator-5554", "emulator-5556", "emulator-5558"}
	cur := map[string]agent.Lease{}
	var last int64
	next := func(l agent.Lease) {
		t.Helper()
		if l.FencingToken <= last {
			t.Fatalf("fencing token %d after %d: want strictly increasing", l.FencingToken, last)
		}
		last = l.FencingToken
		cur[l.Serial] = l
	}
	for i := range 24 {
		serial := serials[i%len(serials)]
		l, held := cur[serial]
		switch {
		case !held:
			next(mustAcquire(t, s, serial, "daemon-1", newRunID(), leaseTTL))
		case i%4 == 0:
			mustRelease(t, s, l, agent.LeaseFinished)
			next(mustAcquire(t, s, serial, "daemon-1", newRunID(), leaseTTL))
		case i%4 == 1:
			next(mustAcquire(t, s, serial, fmt.Sprintf("daemon-takeover-%d", i), l.RunID, leaseTTL)) // takeover
		case i%4 == 2:
			r, err := s.RenewLease(ctx(t), serial, l.FencingToken, leaseTTL)
			if err != nil || r.FencingToken != l.FencingToken {
				t.Fatalf("RenewLease = token %d, %v; want token %d", r.FencingToken, err, l.FencingToken)
			}
			r, err = s.AcquireLease(ctx(t), serial, l.Holder, l.RunID, leaseTTL) // re-acquire
			if err != nil || r.FencingToken != l.FencingToken {
				t.Fatalf("re-acquire = token %d, %v; want token %d", r.FencingToken, err, l.FencingToken)
			}
		default:
			c.Advance(handOut)
			next(mustAcquire(t, s, serial, "daemon-9", newRunID(), leaseTTL)) // expired
		}
		c.Advance(time.Second)
	}
	h := history(t, s, "")
	for i := 1; i < len(h); i++ {
		if h[i].FencingToken <= h[i-1].FencingToken {
			t.Errorf("history tokens not increasing at %d: %d after %d", i, h[i].FencingToken, h[i-1].FencingToken)
		}
	}
	if n := len(active(t, s)); n != len(serials) {
		t.Errorf("%d active leases, want %d", n, len(serials))
	}
}

func byToken(x, y agent.Lease) int { return cmp.Compare(x.FencingToken, y.FencingToken) }

const racers = 8

// race runs fn(i) for i in [0, racers) at once and returns the leases won
// and the errors.
func race(fn func(i int) (agent.Lease, error)) ([]agent.Lease, []error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		won   []agent.Lease
		errs  []error
		start = make(chan struct{})
	)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := fn(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else {
				won = append(won, l)
			}
		}()
	}
	close(start)
	wg.Wait()
	slices.SortFunc(won, byToken)
	return won, errs
}

// racers runs acquire the same free device for different runs at once:
// exactly one wins, every other gets ErrLeaseHeld.
func testLeaseConcurrentFree(t *testing.T, s agent.Leases, c *Clock) {
	var winners []agent.Lease
	for round := range 4 {
		serial := fmt.Sprintf("emulator-%d", 5554+2*round)
		won, errs := race(func(i int) (agent.Lease, error) {
			return s.AcquireLease(ctx(t), serial, fmt.Sprintf("daemon-%d", i), newRunID(), leaseTTL)
		})
		if len(won) != 1 {
			t.Fatalf("round %d: %d acquisitions of one free device won, want exactly 1 (errors %v)", round, len(won), errs)
		}
		for _, err := range errs {
			wantErr(t, fmt.Sprintf("round %d: a losing acquisition", round), err, agent.ErrLeaseHeld)
		}
		sameLeases(t, "history of "+serial, history(t, s, serial), won[0])
		winners = append(winners, won[0])
		c.Advance(time.Second)
	}
	sameLeases(t, "active", active(t, s), winners...)
}

// After the TTL, racers runs take the expired lease over at once: one
// wins, the old lease is released (expired) once.
func testLeaseConcurrentExpired(t *testing.T, s agent.Leases, c *Clock) {
	old := mustAcquire(t, s, "emulator-5554", "daemon-0", newRunID(), leaseTTL)
	c.Advance(handOut)
	won, errs := race(func(i int) (agent.Lease, error) {
		return s.AcquireLease(ctx(t), "emulator-5554", fmt.Sprintf("daemon-%d", i+1), newRunID(), leaseTTL)
	})
	if len(won) != 1 {
		t.Fatalf("%d takeovers of one expired lease won, want exactly 1 (errors %v)", len(won), errs)
	}
	for _, err := range errs {
		wantErr(t, "a losing takeover", err, agent.ErrLeaseHeld)
	}
	sameLeases(t, "history", history(t, s, ""), released(old, c.Now(), agent.LeaseExpired), won[0])
	sameLeases(t, "active", active(t, s), won[0])
}

// racers holders of one run (daemons that each believe the run orphaned)
// acquire its device at once while the lease is live: all are refused; once
// it expired past the grace, exactly one takes it over (holder_lost).
func testLeaseConcurrentSameRun(t *testing.T, s agent.Leases, c *Clock) {
	runA := newRunID()
	first := mustAcquire(t, s, "emulator-5554", "daemon-0", runA, leaseTTL)
	acquire := func(i int) (agent.Lease, error) {
		return s.AcquireLease(ctx(t), "emulator-5554", fmt.Sprintf("daemon-%d", i+1), runA, leaseTTL)
	}
	won, errs := race(acquire)
	if len(won) != 0 {
		t.Fatalf("%d acquisitions of a live lease by other holders of its run won, want 0", len(won))
	}
	for _, err := range errs {
		wantErr(t, "a holder of the same run, lease live", err, agent.ErrLeaseHeld)
	}
	c.Advance(handOut)
	won, errs = race(acquire)
	if len(won) != 1 {
		t.Fatalf("%d takeovers of an expired lease by holders of its run won, want 1 (errors %v)", len(won), errs)
	}
	for _, err := range errs {
		wantErr(t, "a losing takeover", err, agent.ErrLeaseHeld)
	}
	sameLeases(t, "history", history(t, s, "emulator-5554"), released(first, c.Now(), agent.LeaseHolderLost), won[0])
	sameLeases(t, "active", active(t, s), won[0])
}

// Leases are keyed by the device's fleet identity (agent.DeviceKey): two
// hosts' emulator-5554 are two devices, leased at once, each lease keeping
// the bare serial; one host's is one device whoever asks; renewals, releases
// and history work per key; a key without a serial is refused.
func testLeaseDeviceKey(t *testing.T, s agent.Leases, c *Clock) {
	keyA, keyB := agent.DeviceKey("0a1b2c3d4e5f", "emulator-5554"), agent.DeviceKey("f5e4d3c2b1a0", "emulator-5554")
	a := mustAcquire(t, s, keyA, "daemon-a", newRunID(), leaseTTL)
	b := mustAcquire(t, s, keyB, "daemon-b", newRunID(), leaseTTL)
	checkKeyedLeases(t, "emulator-5554", map[string]agent.Lease{keyA: a, keyB: b})
	if _, err := s.AcquireLease(ctx(t), keyA, "daemon-c", newRunID(), leaseTTL); !errors.Is(err, agent.ErrLeaseHeld) {
		t.Errorf("a second daemon of host a acquired its emulator-5554: %v, want ErrLeaseHeld", err)
	}
	// The bare serial is a device of its own (a single host's key).
	bare := mustAcquire(t, s, "emulator-5554", "daemon-d", newRunID(), leaseTTL)
	c.Advance(leaseTTL / 2)
	if _, err := s.RenewLease(ctx(t), b.Serial, b.FencingToken, leaseTTL); err != nil {
		t.Errorf("renew host b's lease: %v", err)
	}
	mustRelease(t, s, a, agent.LeaseFinished)
	act, err := s.ActiveLeases(ctx(t), agent.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if len(act) != 2 || act[0].FencingToken != b.FencingToken || act[1].FencingToken != bare.FencingToken {
		t.Errorf("active after releasing host a's lease: %v, want host b's and the bare serial's", act)
	}
	if h := history(t, s, keyA); len(h) != 1 || h[0].FencingToken != a.FencingToken || h[0].ReleasedAt == nil {
		t.Errorf("history of %s: %v", keyA, h)
	}
	checkRunMovesDevice(t, s, c, keyA, b)
	for _, bad := range []string{"0a1b2c3d4e5f/", "/", strings.Repeat("x", 300)} {
		if _, err := s.AcquireLease(ctx(t), bad, "daemon-e", newRunID(), leaseTTL); err == nil || errors.Is(err, agent.ErrLeaseHeld) {
			t.Errorf("AcquireLease(%q) = %v, want an invalid-request error", bad, err)
		}
	}
}

// checkKeyedLeases: each lease of leases (by the key it was acquired
// with) is keyed by it and keeps the bare serial.
func checkKeyedLeases(t *testing.T, serial string, leases map[string]agent.Lease) {
	t.Helper()
	for key, l := range leases {
		if l.Serial != serial || l.Device != key {
			t.Errorf("lease %s: device %q serial %q, want %q and %q", leaseString(l), l.Device, l.Serial, key, serial)
		}
	}
}

// checkRunMovesDevice: a run is driven on one device at a time. While
// lease b of the run on another device lives (and its grace), device key
// is refused the run; after, key takes the run over and b ends expired.
func checkRunMovesDevice(t *testing.T, s agent.Leases, c *Clock, key string, b agent.Lease) {
	if _, err := s.AcquireLease(ctx(t), key, "daemon-a", b.RunID, leaseTTL); !errors.Is(err, agent.ErrLeaseRunElsewhere) || !errors.Is(err, agent.ErrLeaseHeld) {
		t.Errorf("a second device for a run with a live lease: %v, want ErrLeaseRunElsewhere", err)
	}
	c.Advance(handOut)
	moved := mustAcquire(t, s, key, "daemon-a", b.RunID, leaseTTL)
	if h := history(t, s, b.Device); len(h) != 1 || h[0].ReleaseReason != agent.LeaseExpired {
		t.Errorf("host b's lease after the run moved: %v, want released expired", h)
	}
	if moved.Device != key {
		t.Errorf("moved lease %s", leaseString(moved))
	}
}
