package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// Hold takes the lease of device (its agent.DeviceKey) for a run driven
// outside a daemon (the one-shot `run` and `runs resume`): it waits while another run holds the
// device (calling waiting once with the error), then renews the lease every
// ttl/3 until release is called. runCtx is ctx carrying the lease's
// agent.Fence; it is canceled, with cause agent.ErrLeaseLost, as soon as the
// lease is lost (the store refused a renewal, or no renewal succeeded before
// the lease's expiry by this process's clock), so the node in flight stops
// before another holder may take the device. release ends the lease with the
// reason that fits the run's final status (a non-terminal status:
// LeaseShutdown, the run stays resumable); it also ends runCtx.
// Errors: ctx done while waiting, or a store failure.
func Hold(ctx context.Context, l agent.Leases, device, holder, runID string, ttl time.Duration, waiting func(error)) (lease agent.Lease, runCtx context.Context, release func(agent.RunStatus), err error) {
	var (
		told  bool
		since time.Time
	)
	for {
		since = time.Now()
		lease, err = l.AcquireLease(ctx, device, holder, runID, ttl)
		if err == nil {
			break
		}
		if !errors.Is(err, agent.ErrLeaseHeld) {
			return agent.Lease{}, nil, nil, err
		}
		if !told && waiting != nil {
			waiting(err)
			told = true
		}
		select {
		case <-ctx.Done():
			return agent.Lease{}, nil, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	rctx, cancelRun := context.WithCancelCause(agent.WithFence(ctx, agent.Fence{Serial: lease.Serial, Token: lease.FencingToken}))
	hbCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		heartbeat(hbCtx, l, lease, since, ttl, ttl/3, nil, func(err error) { cancelRun(err) })
	}()
	release = func(status agent.RunStatus) {
		stop()
		<-done
		defer cancelRun(context.Canceled)
		if context.Cause(rctx) != nil && errors.Is(context.Cause(rctx), agent.ErrLeaseLost) {
			return // another holder may own the device now
		}
		reason := agent.LeaseShutdown
		switch status {
		case agent.RunFinished, agent.RunFailed:
			reason = agent.LeaseFinished
		case agent.RunCanceled:
			reason = agent.LeaseCanceled
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l.ReleaseLease(ctx, lease.Serial, lease.FencingToken, reason)
	}
	return lease, rctx, release, nil
}

// renewTimeout is the deadline of one renewal: half the beat, and never
// more than TTL/6, so a hung store answers (or is given up on) well before
// the next beat and long before the lease's expiry.
func renewTimeout(ttl, every time.Duration) time.Duration {
	return min(every, ttl/3) / 2
}

// heartbeat renews lease every `every` until ctx ends or the lease is lost;
// then it calls lost (unless ctx ended) and returns. since is this process's
// time just before the acquisition that returned lease was sent.
//
// Each renewal runs with a deadline (renewTimeout); what happens between
// the renewals is keep's.
func heartbeat(ctx context.Context, l agent.Leases, lease agent.Lease, since time.Time, ttl, every time.Duration, renewed func(agent.Lease), lost func(error)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	// Buffered: a renewal still stuck in the store when heartbeat returns
	// finishes into it and its goroutine ends.
	results := make(chan renewal, 1)
	timeout := renewTimeout(ttl, every)
	renew := func(sent time.Time) {
		go func() {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			nl, err := l.RenewLease(rctx, lease.Serial, lease.FencingToken, ttl)
			cancel()
			results <- renewal{nl, err, sent}
		}()
	}
	keep(ctx, lease, since, ttl, every, tick.C, renew, results, renewed, lost)
}

// renewal is the store's answer to one renewal of a lease, and when this
// process sent it.
type renewal struct {
	lease agent.Lease
	err   error
	sent  time.Time
}

// keep is the local side of a lease's heartbeat, until ctx ends or the
// lease is lost; then it calls lost (unless ctx ended) and returns. At each
// tick it calls renew (unless the last renewal is still stuck), whose
// answer comes on results; a nil tick and renew leave the renewals to
// someone else (the daemon's batch renewer), whose answers come on results
// all the same.
//
// Apart from the renewals, a local timer ends the lease every/2 before ttl
// has passed since the last successful renewal (or the acquisition) was
// sent: the store computed that lease's expiry from its own clock when it
// received the request, which was after the send, so this timer fires
// before the expiry whatever the store answers (a hung store, a renewal
// stuck in the network) and whatever the two clocks say: it measures only
// elapsed time on this process's monotonic clock, never compares the
// store's timestamps with the local wall clock. A failed renewal other than
// ErrLeaseLost (the store unreachable, the deadline passed) is retried at
// the next beat. renewed sees each renewed lease; lost gets the cause,
// wrapping agent.ErrLeaseLost. Both may be nil.
func keep(ctx context.Context, lease agent.Lease, since time.Time, ttl, every time.Duration, tick <-chan time.Time, renew func(sent time.Time), results <-chan renewal, renewed func(agent.Lease), lost func(error)) {
	margin := every / 2
	expiry := time.NewTimer(time.Until(since.Add(ttl - margin)))
	defer expiry.Stop()
	pending := false
	fail := func(err error) {
		if ctx.Err() == nil && lost != nil {
			lost(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry.C:
			fail(fmt.Errorf("device %s lease %d: no renewal succeeded before its expiry (ttl %v): %w", lease.Serial, lease.FencingToken, ttl, agent.ErrLeaseLost))
			return
		case <-tick:
			if pending {
				continue // the last renewal is still stuck past its deadline
			}
			pending = true
			renew(time.Now())
		case r := <-results:
			pending = false
			switch {
			case r.err == nil:
				expiry.Reset(time.Until(r.sent.Add(ttl - margin)))
				if renewed != nil {
					renewed(r.lease)
				}
			case errors.Is(r.err, agent.ErrLeaseLost):
				fail(r.err)
				return
			}
		}
	}
}

// OneShot drives one run in this process, outside a daemon (the one-shot
// `run` and `runs resume`), under its device's lease (Hold).
type OneShot struct {
	Leases agent.Leases
	Runner Runner
	// HostID is the adb server's machine (device.HostID) and Identity
	// reads a connected device's identity: the lease is Keys.Key of the
	// run's local device name, as a daemon's scheduler keys it.
	HostID   string
	Identity DeviceIdentity
	// Holder names this process in the lease ("run:<pid>", "resume:<pid>").
	Holder string
	// LeaseTTL is the lease's TTL (0: 30 s).
	LeaseTTL time.Duration
	// Waiting is called once, with the reason, when another run holds the
	// device; Started once the lease is held, before the first node. Either
	// may be nil.
	Waiting func(error)
	Started func()
}

// Run runs run (its RunID, on its Serial) to its end or until ctx ends or
// the lease is lost, then releases the lease with the reason that fits the
// status. It returns the run's status and how long the runner ran (from
// the lease taken). Errors: LocalName's (another host's device);
// agent.ErrInterrupted "waiting for device S" when ctx ends before the
// device is free; the runner's error, or agent.ErrLeaseLost when the lease
// was lost under the node in flight (the run stays resumable).
func (o OneShot) Run(ctx context.Context, run agent.Run) (agent.RunStatus, time.Duration, error) {
	keys := Keys{HostID: o.HostID, Identity: o.Identity}
	local, err := keys.Local(ctx, run.Serial)
	if err != nil {
		return "", 0, err
	}
	key, err := keys.Key(ctx, local)
	if err != nil {
		// The device's identity cannot be read (adb server down, device not
		// answering): nothing can drive it now, so the host's key does, and
		// EnsureDevice says what is wrong (a resumed run with no device node
		// left still finishes). One host's store only: `run` has no fleet.
		key = agent.DeviceKey(o.HostID, local)
	}
	ttl := o.LeaseTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	_, runCtx, release, err := Hold(ctx, o.Leases, key, o.Holder, run.RunID, ttl, o.Waiting)
	if err != nil {
		return "", 0, agent.Wrap(agent.ErrInterrupted, err, "waiting for device %s", run.Serial)
	}
	if o.Started != nil {
		o.Started()
	}
	start := time.Now()
	// runCtx carries the lease's fencing token (every step commits under it)
	// and ends the node in flight when the lease is lost.
	status, err := o.Runner.Run(runCtx, run.RunID)
	if cause := context.Cause(runCtx); err != nil && errors.Is(cause, agent.ErrLeaseLost) {
		err = cause
	}
	took := time.Since(start)
	release(status)
	return status, took, err
}
