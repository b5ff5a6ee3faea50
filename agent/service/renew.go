package service

import (
	"context"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// renewer renews the leases of every run this daemon drives in one
// statement per heartbeat (agent.LeaseBatchRenewer), instead of one
// statement per lease: 32,000 devices renewed every TTL/3 are then a
// statement per host per heartbeat (about 100/s for 1,000 hosts), not 3,200
// (issue 26 part 4). Each run's keep still decides, on its own lease's
// answers and its own local expiry timer, when its lease is lost; a lease
// the store reports lost stops its run alone.
type renewer struct {
	store      agent.LeaseBatchRenewer
	ttl, every time.Duration
	logf       func(format string, args ...any)

	mu     sync.Mutex
	leases map[int64]*renewee // by fencing token
}

// renewee is one lease the renewer renews, and where its answers go.
type renewee struct {
	fence   agent.Fence
	results chan renewal
}

func newRenewer(store agent.LeaseBatchRenewer, ttl, every time.Duration, logf func(string, ...any)) *renewer {
	return &renewer{store: store, ttl: ttl, every: every, logf: logf, leases: map[int64]*renewee{}}
}

// add makes l one of the leases renewed at each beat, until remove; its
// answers come on the channel returned (buffered: a beat never waits for a
// run).
func (r *renewer) add(l agent.Lease) <-chan renewal {
	e := &renewee{fence: agent.Fence{Serial: l.Serial, Token: l.FencingToken}, results: make(chan renewal, 1)}
	r.mu.Lock()
	r.leases[l.FencingToken] = e
	r.mu.Unlock()
	return e.results
}

// remove stops renewing the lease with that fencing token.
func (r *renewer) remove(token int64) {
	r.mu.Lock()
	delete(r.leases, token)
	r.mu.Unlock()
}

// run renews the leases every `every` until ctx ends, and returns once no
// renewal is in flight. A beat that comes while the last one is still stuck
// in the store (past its deadline) is skipped, as a lease's own heartbeat
// skips it.
func (r *renewer) run(ctx context.Context) {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	done := make(chan struct{}, 1)
	pending := false
	for {
		select {
		case <-ctx.Done():
			if pending {
				<-done // its deadline is ctx's: it ends now
			}
			return
		case <-done:
			pending = false
		case <-tick.C:
			if pending {
				continue
			}
			pending = true
			go func() {
				r.beat(ctx, time.Now())
				done <- struct{}{}
			}()
		}
	}
}

// beat sends one renewal of every lease added, with a heartbeat's deadline
// (renewTimeout), and hands each lease's answer to its run. A failure of
// the whole call (the store unreachable, the deadline passed) hands out
// nothing: each run's lease is tried again at the next beat, and its local
// expiry timer runs on.
func (r *renewer) beat(ctx context.Context, sent time.Time) {
	r.mu.Lock()
	batch := make([]*renewee, 0, len(r.leases))
	fences := make([]agent.Fence, 0, len(r.leases))
	for _, e := range r.leases {
		batch = append(batch, e)
		fences = append(fences, e.fence)
	}
	r.mu.Unlock()
	if len(fences) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, renewTimeout(r.ttl, r.every))
	renewed, lost, err := r.store.RenewLeases(rctx, fences, r.ttl)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.logf("lease renewal of %d devices: %v; retrying at the next beat", len(fences), err)
		}
		return
	}
	for i, e := range batch {
		select {
		case e.results <- renewal{renewed[i], lost[i], sent}:
		default: // its run has not read the last answer: it ends or reads it
		}
	}
}

// batchWatched is the store's agent.LeaseBatchRenewer telling the live
// screen about a lease lost (taken over by another run), as watchedLeases
// does for one lease.
type batchWatched struct {
	agent.LeaseBatchRenewer
	changed func()
}

func (w batchWatched) RenewLeases(ctx context.Context, fences []agent.Fence, ttl time.Duration) ([]agent.Lease, []error, error) {
	renewed, lost, err := w.LeaseBatchRenewer.RenewLeases(ctx, fences, ttl)
	for _, e := range lost {
		if e != nil {
			w.changed()
			break
		}
	}
	return renewed, lost, err
}
