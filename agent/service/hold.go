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
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				if _, err := l.RenewLease(hbCtx, serial, lease.FencingToken, ttl); errors.Is(err, agent.ErrLeaseLost) {
					return
				}
			}
		}
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
