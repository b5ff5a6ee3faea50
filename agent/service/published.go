package service

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// WaitPublished polls st's outbox every poll (5 ms when 0) until no
// unpublished row of runID is left, so NATS has every event of the run
// when a one-shot process (`run`, `runs resume`) exits. It only reads the
// outbox: the relay running beside it publishes (a relay's Drain must not
// run beside its Run). It reads at most 65536 unpublished rows a poll.
// Errors: the store's, or ctx's wrapped with how many events were left
// ("run ID: N events not yet published: context deadline exceeded").
func WaitPublished(ctx context.Context, st agent.Store, runID string, poll time.Duration) error {
	if poll <= 0 {
		poll = 5 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		rows, err := st.Unpublished(ctx, 1<<16)
		if err != nil {
			return err
		}
		left := 0
		for _, r := range rows {
			if r.RunID == runID {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s: %d events not yet published: %w", runID, left, ctx.Err())
		case <-t.C:
		}
	}
}

// StoreReady is the daemon's readiness check of its store (GET /readyz):
// listing one run answers within ctx, and a store that can tell whether it
// takes writes (the embedded store's Writable: its disk is not full) does.
// Errors: the store's (resource_exhausted for a full disk).
func StoreReady(st agent.Store) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if _, err := st.ListRuns(ctx, agent.Admin(), agent.RunFilter{Limit: 1}); err != nil {
			return err
		}
		if w, ok := st.(writable); ok {
			return w.Writable(ctx)
		}
		return nil
	}
}

// ClockSkew measures this process's clock against the store's: the local
// time halfway through a StoreNow call minus the store's answer (positive:
// this daemon's clock is ahead). Errors: the store's.
func ClockSkew(st agent.StoreClock) func(ctx context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		before := time.Now()
		now, err := st.StoreNow(ctx)
		if err != nil {
			return 0, err
		}
		after := time.Now()
		return before.Add(after.Sub(before) / 2).Sub(now), nil
	}
}

// writable is a store that knows whether it can take writes now.
type writable interface {
	Writable(ctx context.Context) error
}
