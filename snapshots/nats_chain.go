package snapshots

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
)

// ChainPublisher publishes outbox rows as one chain kept across calls, for a
// relay that is the stream's only writer (the embedded store's): rows go out
// as they are committed, without waiting for the acks of the rows before.
type ChainPublisher interface {
	// SendChain sends row without waiting for its ack. Unless row is the
	// chain's first (after ResetChain), it carries
	// Nats-Expected-Last-Msg-Id = the previous row sent, so JetStream stores
	// the rows sent as a prefix of them, back to back: after a row is lost
	// or rejected, every later one is rejected too. The caller sends a
	// chain's first row only when every earlier row of its run is stored.
	SendChain(ctx context.Context, row agent.OutboxRow) (ChainAck, error)
	// ResetChain makes the next row sent the first of a new chain.
	ResetChain()
}

// ChainAck is a sent row's acknowledgement.
type ChainAck interface {
	// Wait returns when the stream answered or ctx ended: nil when the row
	// is stored; duplicate when the stream had it already (it stored
	// nothing: the stream's last message is another one).
	Wait(ctx context.Context) (duplicate bool, err error)
}

// ErrNotConnected: SendChain while the NATS connection is down. Rows are not
// queued in the client's reconnect buffer (they would be sent again anyway
// after the relay's back-off).
var ErrNotConnected = errors.New("snapshots: NATS connection is down")

var (
	_ ChainPublisher = (*JetStreamPublisher)(nil)
	_ ChainPublisher = (*LazyPublisher)(nil)
)

// chainState is SendChain's chain: the event id of the last row sent.
type chainState struct {
	mu   sync.Mutex
	last string
	sent atomic.Int64
}

// SendChain implements ChainPublisher with an async JetStream publish
// (Nats-Msg-Id = eventId, expected stream AGENT_EVENTS).
func (p *JetStreamPublisher) SendChain(ctx context.Context, row agent.OutboxRow) (ChainAck, error) {
	if !p.js.Conn().IsConnected() {
		return nil, ErrNotConnected
	}
	p.chain.mu.Lock()
	defer p.chain.mu.Unlock()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(row.EventID), jetstream.WithExpectStream(StreamName)}
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
		if ack.Duplicate {
			a.p.duplicates.Add(1)
		}
		return ack.Duplicate, nil
	case err := <-a.f.Err():
		return false, fmt.Errorf("snapshots: publish %s (%s): %w", a.row.Subject, a.row.EventID, err)
	case <-ctx.Done():
		return false, fmt.Errorf("snapshots: publish %s (%s): no ack: %w", a.row.Subject, a.row.EventID, ctx.Err())
	}
}

// SendChain implements ChainPublisher (see JetStreamPublisher.SendChain).
func (p *LazyPublisher) SendChain(ctx context.Context, row agent.OutboxRow) (ChainAck, error) {
	pub, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return pub.SendChain(ctx, row)
}

// ResetChain implements ChainPublisher.
func (p *LazyPublisher) ResetChain() {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub != nil {
		pub.ResetChain()
	}
}
