package natsbus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// Only the publisher of the in-process server chains across calls: the
// chain's conditions name whatever row was sent before, often another run's,
// which proves that run's order only if every row reaches the stream in the
// order sent. One in-process R1 server does that; an external server or a
// cluster may store a row of a session that ended (its ack lost in a leader
// change, a reconnect) after a later session's rows
// (TestPublishOrderedLateRowAfterOtherRunsHead), so LazyPublisher (external
// NATS) is not a ChainPublisher and its relay goes pass by pass
// (PublishOrdered, whose conditions name the row's own run).
var _ snapshots.ChainPublisher = (*JetStreamPublisher)(nil)

// chainState is SendChain's chain: the event id of the last row sent.
type chainState struct {
	mu   sync.Mutex
	last string
	sent atomic.Int64
}

// SendChain implements ChainPublisher with an async JetStream publish
// (Nats-Msg-Id = eventId, expected stream AGENT_EVENTS).
func (p *JetStreamPublisher) SendChain(ctx context.Context, row agent.OutboxRow) (snapshots.ChainAck, error) {
	if !p.js.Conn().IsConnected() {
		return nil, snapshots.ErrNotConnected
	}
	p.chain.mu.Lock()
	defer p.chain.mu.Unlock()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(row.EventID), jetstream.WithExpectStream(snapshots.StreamName)}
	if p.chain.last != "" {
		opts = append(opts, jetstream.WithExpectLastMsgID(p.chain.last))
	}
	f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: row.Subject, Data: row.Body}, opts...)
	if err != nil {
		return nil, fmt.Errorf("snapshots: publish %s (%s): %w", row.Subject, row.EventID, err)
	}
	p.chain.last = row.EventID
	p.chain.sent.Add(1)
	return &chainAck{p: p, f: f, row: row}, nil
}

// ResetChain implements ChainPublisher.
func (p *JetStreamPublisher) ResetChain() {
	p.chain.mu.Lock()
	p.chain.last = ""
	p.chain.mu.Unlock()
}

type chainAck struct {
	p   *JetStreamPublisher
	f   jetstream.PubAckFuture
	row agent.OutboxRow
}

func (a *chainAck) Wait(ctx context.Context) (bool, error) {
	select {
	case ack := <-a.f.Ok():
		if err := provenStored(ack); err != nil {
			return false, fmt.Errorf("snapshots: publish %s (%s): %w", a.row.Subject, a.row.EventID, err)
		}
		if ack.Duplicate {
			a.p.duplicates.Add(1)
		}
		return ack.Duplicate, nil
	case err := <-a.f.Err():
		if wrongLast(err) {
			err = chainBroken{err}
		}
		return false, fmt.Errorf("snapshots: publish %s (%s): %w", a.row.Subject, a.row.EventID, err)
	case <-ctx.Done():
		return false, fmt.Errorf("snapshots: publish %s (%s): no ack: %w", a.row.Subject, a.row.EventID, ctx.Err())
	}
}

// chainBroken is JetStream's wrong-last error, unchanged in its text, that
// also is snapshots.ErrChainBroken (the relay asks that, not JetStream).
type chainBroken struct{ error }

func (e chainBroken) Unwrap() error        { return e.error }
func (e chainBroken) Is(target error) bool { return target == snapshots.ErrChainBroken }
