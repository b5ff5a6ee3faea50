package service

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// hungLeases is an agent.Leases whose renewals hang until unblock is closed,
// ignoring their context (a store stuck below the driver), or, with
// honorCtx, until their context ends. Each renewal's deadline is recorded.
type hungLeases struct {
	agent.Leases
	honorCtx  bool
	unblock   chan struct{}
	mu        sync.Mutex
	deadlines []time.Duration // time left to each renewal's deadline at its start
}

func (h *hungLeases) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	d, ok := ctx.Deadline()
	h.mu.Lock()
	if ok {
		h.deadlines = append(h.deadlines, time.Until(d))
	} else {
		h.deadlines = append(h.deadlines, -1)
	}
	h.mu.Unlock()
	if h.honorCtx {
		select {
		case <-ctx.Done():
			return agent.Lease{}, ctx.Err()
		case <-h.unblock:
		}
	} else {
		<-h.unblock
	}
	return agent.Lease{}, errors.New("store unreachable")
}

// A store that never answers a renewal: the local timer ends the lease
// every/2 before ttl has passed since the acquisition was sent, whatever the
// store does, and every renewal carries a deadline shorter than TTL/3.
func TestHeartbeatStopsBeforeExpiryWhenStoreHangs(t *testing.T) {
	for _, honor := range []bool{false, true} {
		name := map[bool]string{false: "IgnoresContext", true: "HonorsContext"}[honor]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl, every = 30 * time.Second, 10 * time.Second
				h := &hungLeases{honorCtx: honor, unblock: make(chan struct{})}
				defer close(h.unblock) // lets a renewal stuck in the store end
				since := time.Now()
				var lostAt time.Duration
				var cause error
				heartbeat(t.Context(), h, agent.Lease{Serial: "emulator-5554", FencingToken: 7}, since, ttl, every, nil,
					func(err error) { lostAt, cause = time.Since(since), err })
				if !errors.Is(cause, agent.ErrLeaseLost) {
					t.Fatalf("lost with %v, want ErrLeaseLost", cause)
				}
				if want := ttl - every/2; lostAt != want {
					t.Errorf("lease given up %v after the acquisition, want %v (before the %v expiry)", lostAt, want, ttl)
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				if len(h.deadlines) == 0 {
					t.Fatal("no renewal was attempted")
				}
				for i, d := range h.deadlines {
					if d < 0 || d >= ttl/3 {
						t.Errorf("renewal %d: deadline %v away, want one shorter than TTL/3 = %v", i, d, ttl/3)
					}
				}
			})
		})
	}
}

// renewingLeases renews every lease for ttl, counting renewals.
type renewingLeases struct {
	agent.Leases
	n int
}

func (r *renewingLeases) RenewLease(_ context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	r.n++
	if r.n > 3 {
		return agent.Lease{}, errors.New("store unreachable")
	}
	return agent.Lease{Serial: serial, FencingToken: token, ExpiresAt: time.Now().Add(ttl)}, nil
}

// The local expiry counts from the last successful renewal's send: three
// renewals (at 10, 20, 30 s) push it to 30+30-5 = 55 s; the failures after
// that do not.
func TestHeartbeatLocalExpiryFollowsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl, every = 30 * time.Second, 10 * time.Second
		r := &renewingLeases{}
		since := time.Now()
		var lostAt time.Duration
		renewed := 0
		heartbeat(t.Context(), r, agent.Lease{Serial: "emulator-5554", FencingToken: 7}, since, ttl, every,
			func(agent.Lease) { renewed++ }, func(error) { lostAt = time.Since(since) })
		if renewed != 3 || lostAt != 55*time.Second {
			t.Errorf("renewed %d times, lost after %v; want 3 and 55s", renewed, lostAt)
		}
	})
}
