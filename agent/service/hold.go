package service

import (
	"context"
	"errors"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// Hold takes the device lease for a run driven outside a daemon (the
// one-shot `run`): it waits while another run holds the device (calling
// waiting once with the error), renews the lease every ttl/3 until release
// is called, and release ends it with the reason that fits the run's final
// status (a non-terminal status: LeaseShutdown, the run stays resumable).
// Errors: ctx done while waiting, or a store failure.
func Hold(ctx context.Context, l agent.Leases, serial, holder, runID string, ttl time.Duration, waiting func(error)) (agent.Lease, func(agent.RunStatus), error) {
	var (
		lease agent.Lease
		err   error
		told  bool
	)
	for {
		lease, err = l.AcquireLease(ctx, serial, holder, runID, ttl)
		if err == nil {
			break
		}
		if !errors.Is(err, agent.ErrLeaseHeld) {
			return agent.Lease{}, nil, err
		}
		if !told && waiting != nil {
			waiting(err)
			told = true
		}
		select {
		case <-ctx.Done():
			return agent.Lease{}, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	hbCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		heartbeat(hbCtx, l, lease, ttl, ttl/3, nil, nil)
	}()
	release := func(status agent.RunStatus) {
		stop()
		<-done
		reason := agent.LeaseShutdown
		switch status {
		case agent.RunFinished, agent.RunFailed:
			reason = agent.LeaseFinished
		case agent.RunCanceled:
			reason = agent.LeaseCanceled
		}
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l.ReleaseLease(rctx, serial, lease.FencingToken, reason)
	}
	return lease, release, nil
}

// heartbeat renews lease every `every` until ctx ends or the lease is lost
// (then it calls lost and returns). renewed sees each renewed lease. A failed
// renewal other than ErrLeaseLost (the store unreachable) is retried at the
// next beat, but once the lease's expiry is less than half a beat away
// without a renewal, the lease counts as lost: the holder must stop driving
// the device before another holder may take it (one beat after expiry).
// lost and renewed may be nil.
func heartbeat(ctx context.Context, l agent.Leases, lease agent.Lease, ttl, every time.Duration, renewed func(agent.Lease), lost func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	expires := lease.ExpiresAt
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		nl, err := l.RenewLease(ctx, lease.Serial, lease.FencingToken, ttl)
		switch {
		case err == nil:
			expires = nl.ExpiresAt
			if renewed != nil {
				renewed(nl)
			}
		case errors.Is(err, agent.ErrLeaseLost) || time.Until(expires) < every/2:
			if ctx.Err() != nil {
				return
			}
			if lost != nil {
				lost(err)
			}
			return
		}
	}
}
