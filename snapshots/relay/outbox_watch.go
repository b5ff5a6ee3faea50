package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots"
)

// OutboxWatch tells whether the outbox is stuck, for /readyz: events wait
// (lag > 0) and nothing moved them — the relay published or parked no row
// and the lag did not shrink (another daemon's relay, in a fleet) — for
// longer than Threshold. A relay retrying one row forever, or a NATS server
// that stays unreachable, makes the daemon not ready instead of silently
// holding every run's events.
type OutboxWatch struct {
	Counter snapshots.OutboxCounter
	// Relay is this daemon's relay (its published and parked counters); nil:
	// only a shrinking lag counts as progress.
	Relay *Relay
	// Threshold is how long the outbox may go without progress while events
	// wait (default 2 min).
	Threshold time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	lastLag int64
	lastOut int64
	since   time.Time // when the lag was last seen without progress after progress; zero: no lag
}

// Check returns nil while the outbox moves (or is empty), and an error
// naming the lag and for how long nothing moved once that is longer than
// Threshold. Each call is one observation; /readyz calls it when probed.
func (w *OutboxWatch) Check(ctx context.Context) error {
	lag, _, err := w.Counter.OutboxCounts(ctx)
	if err != nil {
		return fmt.Errorf("outbox: counting: %w", err)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	threshold := w.Threshold
	if threshold <= 0 {
		threshold = 2 * time.Minute
	}
	var out int64
	if w.Relay != nil {
		st := w.Relay.Stats()
		out = st.Published + st.Parked
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := now()
	moved := out > w.lastOut || lag < w.lastLag
	w.lastOut, w.lastLag = out, lag
	switch {
	case lag == 0:
		w.since = time.Time{}
	case moved || w.since.IsZero():
		w.since = t
	case t.Sub(w.since) > threshold:
		return fmt.Errorf("outbox stuck: %d events unpublished and none published or parked for %s (threshold %s); see the relay's log and GET /v1/outbox/parked",
			lag, t.Sub(w.since).Truncate(time.Second), threshold)
	}
	return nil
}
