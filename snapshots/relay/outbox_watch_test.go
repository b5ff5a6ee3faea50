package relay

import (
	"context"
	"strings"
	"testing"
	"time"
)

type fakeCounter struct{ lag int64 }

func (f *fakeCounter) OutboxCounts(context.Context) (int64, int64, error) { return f.lag, 0, nil }

// The outbox is reported stuck once events wait with no progress for longer
// than the threshold, and ready again when the relay moves.
func TestOutboxWatchReportsStuckOutbox(t *testing.T) {
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	c := &fakeCounter{}
	r := &Relay{}
	w := &OutboxWatch{Counter: c, Relay: r, Threshold: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	step := func(d time.Duration, lag int64) error {
		now = now.Add(d)
		c.lag = lag
		return w.Check(ctx)
	}
	if err := step(0, 0); err != nil {
		t.Fatalf("empty outbox: %v", err)
	}
	// A poison row: the lag grows, the relay publishes nothing.
	for i, lag := range []int64{1, 5, 9, 20} {
		if err := step(20*time.Second, lag); err != nil {
			t.Fatalf("observation %d (%s without progress): %v", i, time.Duration(i)*20*time.Second, err)
		}
	}
	err := step(20*time.Second, 30)
	if err == nil || !strings.Contains(err.Error(), "outbox stuck: 30 events") {
		t.Fatalf("80 s without progress (threshold 1 min): %v, want outbox stuck", err)
	}
	// The relay parks the row and publishes again: ready.
	r.parked.Add(1)
	r.published.Add(29)
	if err := step(time.Second, 30); err != nil {
		t.Fatalf("after progress: %v", err)
	}
	// A lag that shrinks (another daemon's relay) is progress too.
	for range 5 {
		if err := step(30*time.Second, c.lag-1); err != nil {
			t.Fatalf("shrinking lag: %v", err)
		}
	}
	if err := step(30*time.Second, 0); err != nil {
		t.Fatalf("drained: %v", err)
	}
}
