package relay

import (
	"context"
	"time"
)

// Background is a relay running in its own goroutine (Start) until Stop.
type Background struct {
	r    *Relay
	stop context.CancelFunc
	done chan error
}

// Start runs r.Run in a goroutine until Stop.
func Start(r *Relay) *Background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{r: r, stop: cancel, done: make(chan error, 1)}
	go func() { b.done <- r.Run(ctx) }()
	return b
}

// Stop ends Run and waits for it, then publishes what is left in the
// outbox (Drain, which must not run beside Run), for at most budget or
// until ctx ends. It returns Drain's error: events left unpublished, which
// the next start publishes. Safe on nil and after a first Stop (nil then).
func (b *Background) Stop(ctx context.Context, budget time.Duration) error {
	if b == nil || b.stop == nil {
		return nil
	}
	b.stop()
	<-b.done
	b.stop = nil
	dctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	_, err := b.r.Drain(dctx)
	return err
}
