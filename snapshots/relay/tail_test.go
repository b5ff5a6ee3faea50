package relay_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
)

// tailStores: the relay's two paths, claims (Postgres) and Unpublished
// batches (the embedded store read pass by pass).
func tailStores() map[string]func(t *testing.T) agent.Store {
	return map[string]func(t *testing.T) agent.Store{
		"postgres": func(t *testing.T) agent.Store { return testenv.Postgres(t) },
		"embedded": func(t *testing.T) agent.Store { return testenv.Embedded(t) },
	}
}

// storedAhead commits one run of 9 events to s and publishes its first n
// straight to a fresh embedded NATS, the outbox left unmarked; it returns
// the store, the publisher, the run and its outbox rows.
func storedAhead(t *testing.T, s agent.Store, n int) (agent.Store, *natsbus.JetStreamPublisher, []agent.Run, []agent.OutboxRow) {
	t.Helper()
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	runs := commitRuns(t, s, 1, 9)
	rows, err := s.Unpublished(t.Context(), 100)
	if err != nil || len(rows) != 9 {
		t.Fatalf("outbox: %d rows, %v", len(rows), err)
	}
	for _, row := range rows[:n] {
		if err := pub.Publish(t.Context(), row.Subject, row.EventID, row.Body); err != nil {
			t.Fatal(err)
		}
	}
	return s, pub, runs, rows
}

// A run's events the stream already holds though the outbox never marked
// them (their acks were lost in a leader change) are marked without being
// published again: a resuming relay does not lean on the stream's
// deduplication, which a restarted 2.9.10 cluster broke once (an event
// stored twice in TestRelayFleetOrderUnderNATSFailures).
func TestRelayTailCheckMarksRowsTheStreamHolds(t *testing.T) {
	for name, open := range tailStores() {
		t.Run(name, func(t *testing.T) {
			s, pub, runs, rows := storedAhead(t, open(t), 4) // stored, acks lost
			counts := newCounting()
			rl := &relay.Relay{Store: s, Publisher: counts.via(pub, new(atomic.Int64), nil), VerifyTails: true}
			if _, err := rl.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, row := range rows[:4] {
				if n := counts.calls[row.EventID]; n != 0 {
					t.Errorf("sequence %d, already in the stream, was published again (%d times)", row.Sequence, n)
				}
			}
			if st := rl.Stats(); st.AlreadyStored != 4 || st.Published != 9 {
				t.Errorf("stats %+v, want 4 already stored and 9 marked", st)
			}
			if v := relayCounter(t, rl, "screengraph_relay_already_stored_total"); v != 4 {
				t.Errorf("/metrics shows %v rows already stored, want 4", v)
			}
			checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 9))
		})
	}
}

// Events the outbox marked published but the stream lacks (a cluster lost
// acknowledged messages in a leader kill) are enqueued again and published
// in order, before the run's later events.
func TestRelayTailCheckRepublishesLostRows(t *testing.T) {
	for name, open := range tailStores() {
		t.Run(name, func(t *testing.T) {
			s, pub, runs, _ := storedAhead(t, open(t), 2)
			// 1-5 acknowledged and marked; the stream kept only 1 and 2.
			if _, err := snapshots.CapabilitiesOf(s).UpTo.MarkPublishedUpTo(t.Context(), runs[0].RunID, 5); err != nil {
				t.Fatal(err)
			}
			rl := &relay.Relay{Store: s, Publisher: pub, VerifyTails: true}
			if _, err := rl.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			if st := rl.Stats(); st.Requeued != 3 {
				t.Errorf("stats %+v, want 3 rows enqueued again", st)
			}
			if v := relayCounter(t, rl, "screengraph_relay_requeued_total"); v != 3 {
				t.Errorf("/metrics shows %v rows requeued, want 3", v)
			}
			checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 9))
		})
	}
}

// Without a failure (and without VerifyTails) a pass does not read the
// stream's tail: a healthy relay pays nothing for the check.
func TestRelayChecksTailsOnlyAfterFailures(t *testing.T) {
	s := testenv.Embedded(t)
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	runs := commitRuns(t, s, 2, 6)
	tail := &countingTail{JetStreamPublisher: pub}
	rl := &relay.Relay{Store: s, Publisher: tail}
	if _, err := rl.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := tail.reads.Load(); n != 0 {
		t.Errorf("a healthy pass read the stream's tail %d times", n)
	}
	checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 12))
}

type countingTail struct {
	*natsbus.JetStreamPublisher
	reads atomic.Int64
}

// PublisherCapabilities: the publisher's, with this tail in place of its
// own (the relay reads the tail only through what is declared).
func (c *countingTail) PublisherCapabilities() snapshots.PublisherCapabilities {
	caps := c.JetStreamPublisher.PublisherCapabilities()
	caps.Tail = c
	return caps
}

func (c *countingTail) LastSequence(ctx context.Context, subject string) (int64, bool, error) {
	c.reads.Add(1)
	return c.JetStreamPublisher.LastSequence(ctx, subject)
}

// relayCounter is the value /metrics shows of the relay's counter name.
func relayCounter(t *testing.T, rl *relay.Relay, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(relay.Metrics(rl)...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
