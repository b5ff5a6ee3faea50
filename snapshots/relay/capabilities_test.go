package relay_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
)

// spyPublisher has every optional publisher method (each counted, then
// passed to a real JetStream publisher) but offers the relay only those its
// declared capabilities name: what a publisher declares is what the relay
// uses, whatever methods its type has.
type spyPublisher struct {
	pub     *natsbus.JetStreamPublisher
	declare snapshots.PublisherCapabilities // non-nil fields: offered (by the spy itself)
	limit   int64                           // MaxPayload's answer
	calls   struct{ publish, ordered, chain, tail, payload atomic.Int64 }
}

func (p *spyPublisher) PublisherCapabilities() snapshots.PublisherCapabilities {
	var c snapshots.PublisherCapabilities
	if p.declare.Ordered != nil {
		c.Ordered = p
	}
	if p.declare.Chain != nil {
		c.Chain = p
	}
	if p.declare.Tail != nil {
		c.Tail = p
	}
	if p.declare.Payload != nil {
		c.Payload = p
	}
	return c
}

func (p *spyPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	p.calls.publish.Add(1)
	return p.pub.Publish(ctx, subject, msgID, body)
}

func (p *spyPublisher) PublishOrdered(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	p.calls.ordered.Add(1)
	return p.pub.PublishOrdered(ctx, rows)
}

func (p *spyPublisher) SendChain(ctx context.Context, row agent.OutboxRow) (snapshots.ChainAck, error) {
	p.calls.chain.Add(1)
	return p.pub.SendChain(ctx, row)
}

func (p *spyPublisher) ResetChain() { p.pub.ResetChain() }

func (p *spyPublisher) LastSequence(ctx context.Context, subject string) (int64, bool, error) {
	p.calls.tail.Add(1)
	return p.pub.LastSequence(ctx, subject)
}

func (p *spyPublisher) MaxPayload() int64 {
	p.calls.payload.Add(1)
	return p.limit
}

// The relay reads a publisher's capabilities from what it declares
// (snapshots.PublisherCapabilities), never from its type: for each of the
// four, a publisher declaring it is used in that mode and one not declaring
// it (though it has the method) falls back, on the embedded store and a
// real JetStream. Before, the relay found them by type assertions, so the
// "not declared" cases used the capability anyway.
func TestRelayUsesDeclaredPublisherCapabilities(t *testing.T) {
	var offered snapshots.PublisherCapabilities
	{
		sp := &spyPublisher{}
		offered = snapshots.PublisherCapabilities{Ordered: sp, Chain: sp, Tail: sp, Payload: sp}
	}
	cases := []struct {
		name    string
		declare snapshots.PublisherCapabilities
		// run: Run (the stream when possible) instead of one Drain.
		run, verifyTails bool
		check            func(t *testing.T, p *spyPublisher, r *relay.Relay)
	}{
		{"ordered declared", snapshots.PublisherCapabilities{Ordered: offered.Ordered}, false, false, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if p.calls.ordered.Load() == 0 || p.calls.publish.Load() != 0 {
				t.Errorf("windows %d, single publishes %d; want windows only", p.calls.ordered.Load(), p.calls.publish.Load())
			}
		}},
		{"ordered not declared", snapshots.PublisherCapabilities{}, false, false, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if p.calls.ordered.Load() != 0 || p.calls.publish.Load() == 0 {
				t.Errorf("windows %d, single publishes %d; want single publishes only", p.calls.ordered.Load(), p.calls.publish.Load())
			}
		}},
		{"chain declared", snapshots.PublisherCapabilities{Ordered: offered.Ordered, Chain: offered.Chain}, true, false, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if p.calls.chain.Load() == 0 {
				t.Error("the relay did not stream through the declared chain")
			}
		}},
		{"chain not declared", snapshots.PublisherCapabilities{Ordered: offered.Ordered}, true, false, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if p.calls.chain.Load() != 0 || p.calls.ordered.Load() == 0 {
				t.Errorf("chained rows %d, windows %d; want pass by pass in windows", p.calls.chain.Load(), p.calls.ordered.Load())
			}
		}},
		{"tail declared", snapshots.PublisherCapabilities{Tail: offered.Tail}, false, true, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if p.calls.tail.Load() == 0 {
				t.Error("VerifyTails read no tail through the declared Tail")
			}
		}},
		{"tail not declared", snapshots.PublisherCapabilities{}, false, true, func(t *testing.T, p *spyPublisher, _ *relay.Relay) {
			if n := p.calls.tail.Load(); n != 0 {
				t.Errorf("the relay read %d tails of a publisher that declares none", n)
			}
		}},
		{"payload declared", snapshots.PublisherCapabilities{Payload: offered.Payload}, false, false, func(t *testing.T, p *spyPublisher, r *relay.Relay) {
			if p.calls.payload.Load() == 0 || r.Stats().Parked != 6 || p.calls.publish.Load() != 0 {
				t.Errorf("limit read %d times, parked %d, published %d; want every row parked at the declared limit",
					p.calls.payload.Load(), r.Stats().Parked, p.calls.publish.Load())
			}
		}},
		{"payload not declared", snapshots.PublisherCapabilities{}, false, false, func(t *testing.T, p *spyPublisher, r *relay.Relay) {
			if p.calls.payload.Load() != 0 || r.Stats().Parked != 0 || r.Stats().Published != 6 {
				t.Errorf("limit read %d times, parked %d, published %d; want no limit, all published",
					p.calls.payload.Load(), r.Stats().Parked, r.Stats().Published)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := testenv.Embedded(t)
			_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
			_, pub := testenv.ConnectPublisher(t, url)
			// MaxPayload answers 64 bytes (every row's message is over it) in
			// the payload cases, the server's own elsewhere.
			limit := pub.MaxPayload()
			if strings.HasPrefix(c.name, "payload") {
				limit = 64
			}
			sp := &spyPublisher{pub: pub, declare: c.declare, limit: limit}
			commitRuns(t, s, 2, 3)
			rl := &relay.Relay{Store: s, Publisher: sp, VerifyTails: c.verifyTails, PollInterval: time.Hour}
			if c.run {
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- rl.Run(ctx) }()
				for deadline := time.Now().Add(10 * time.Second); rl.Stats().Published < 6; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("published %d of 6", rl.Stats().Published)
					}
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else if _, err := rl.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			c.check(t, sp, rl)
		})
	}
}
