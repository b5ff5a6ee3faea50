package relay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
)

// switchPublisher refuses every publish while down.
type switchPublisher struct{ down atomic.Bool }

func (p *switchPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	if p.down.Load() {
		return errors.New("injected: NATS down")
	}
	return nil
}

// TestBackgroundStopDrains: Stop ends the relay, then publishes what is
// left in the outbox; when the publisher refuses, Stop says so (events left
// for the next start) within its budget, and a second Stop is a no-op.
func TestBackgroundStopDrains(t *testing.T) {
	ctx := context.Background()
	s := testenv.Embedded(t)
	pub := &switchPublisher{}
	pub.down.Store(true)
	b := relay.Start(&relay.Relay{Store: s, Publisher: pub, PollInterval: 10 * time.Millisecond})
	commitRuns(t, s, 2, 6)
	start := time.Now()
	if err := b.Stop(ctx, 2*time.Second); err == nil {
		t.Fatal("Stop with NATS down: no error, want the events left unpublished")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Stop took %v", time.Since(start))
	}
	if n, _, err := s.OutboxCounts(ctx); err != nil || n != 12 {
		t.Fatalf("unpublished after a failed Stop: %d, %v; want 12", n, err)
	}
	if err := b.Stop(ctx, time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// A relay that never got to publish (stopped at once): Stop's drain
	// publishes everything.
	pub.down.Store(false)
	b = relay.Start(&relay.Relay{Store: s, Publisher: pub, PollInterval: time.Hour, Wake: make(chan struct{})})
	if err := b.Stop(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.OutboxCounts(ctx); err != nil || n != 0 {
		t.Fatalf("unpublished after Stop: %d, %v; want 0", n, err)
	}
}
