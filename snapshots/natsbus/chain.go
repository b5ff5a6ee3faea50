package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// NATS) does not declare Chain (PublisherCapabilities) and its relay goes
// pass by pass (PublishOrdered, whose conditions name the row's own run).
var _ snapshots.ChainPublisher = (*JetStreamPublisher)(nil)

// chainState is SendChain's chain: the last row sent and its ack.
type chainState struct {
	mu   sync.Mutex
	last *chainAck // nil: the next row is the chain's first
	// dead: a row's predecessor of another tenant was not stored, so that
	// row was not sent; nothing is sent until ResetChain.
	dead bool
	sent atomic.Int64
}

// SendChain implements ChainPublisher with an async JetStream publish
// (Nats-Msg-Id = eventId, expected stream AGENT_EVENTS). The condition that
// the row sent before is the stream's last message names that row by its
// eventId (Nats-Expected-Last-Msg-Id) only when it is of the same tenant
// (same subject but for the run token): the header is stored with the
// message, and a tenant reading its events must not read another tenant's
// event ids (issue 22). After a row of another tenant the condition is
// Nats-Expected-Last-Sequence = that row's stream sequence, which is the
// message's own sequence minus one (no news to its reader); it is known
// from that row's ack, so SendChain waits for it there: one round trip per
// change of tenant in the chain, none on a single-tenant host. A stream
// sequence is never predicted: with another writer on the stream a
// predicted one can name a message other than the row before, and admit a
// row whose predecessor was refused.
func (p *JetStreamPublisher) SendChain(ctx context.Context, row agent.OutboxRow) (snapshots.ChainAck, error) {
	if !p.js.Conn().IsConnected() {
		return nil, snapshots.ErrNotConnected
	}
	p.chain.mu.Lock()
	defer p.chain.mu.Unlock()
	if p.chain.dead {
		return settledAck{err: fmt.Errorf("snapshots: publish %s (%s): %w", row.Subject, row.EventID, chainBroken{errPredecessorNotStored})}, nil
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(row.EventID), jetstream.WithExpectStream(snapshots.StreamName)}
	if prev := p.chain.last; prev != nil {
		if tenantSubject(prev.row.Subject) == tenantSubject(row.Subject) {
			opts = append(opts, jetstream.WithExpectLastMsgID(prev.row.EventID))
		} else {
			// A duplicate's sequence is where its event was stored before:
			// the row is stored only if that is still the stream's last.
			if _, err := prev.Wait(ctx); err != nil {
				p.chain.dead = true
				return settledAck{err: fmt.Errorf("snapshots: publish %s (%s): %w", row.Subject, row.EventID, chainBroken{errPredecessorNotStored})}, nil
			}
			opts = append(opts, jetstream.WithExpectLastSequence(prev.seq))
		}
	}
	f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: row.Subject, Data: row.Body}, opts...)
	if err != nil {
		return nil, fmt.Errorf("snapshots: publish %s (%s): %w", row.Subject, row.EventID, err)
	}
	a := &chainAck{p: p, f: f, row: row}
	p.chain.last = a
	p.chain.sent.Add(1)
	return a, nil
}

// tenantSubject is subject without its last token: agent.events.<tenant>
// for an event subject agent.events.<tenant>.<run>.
func tenantSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[:i]
	}
	return subject
}

// errPredecessorNotStored: the row before, of another tenant, was not
// stored, so the row was not sent.
var errPredecessorNotStored = errors.New("the row before (another tenant's) is not the stream's last message")

// ResetChain implements ChainPublisher.
func (p *JetStreamPublisher) ResetChain() {
	p.chain.mu.Lock()
	p.chain.last, p.chain.dead = nil, false
	p.chain.mu.Unlock()
}

// settledAck is the ack of a row whose answer is known at SendChain.
type settledAck struct {
	duplicate bool
	err       error
}

func (a settledAck) Wait(context.Context) (bool, error) { return a.duplicate, a.err }

// chainAck is a sent row's ack. Its answer is kept: SendChain may wait for
// it (the next row is another tenant's) before the relay does.
type chainAck struct {
	p   *JetStreamPublisher
	f   jetstream.PubAckFuture
	row agent.OutboxRow

	mu   sync.Mutex
	done bool
	dup  bool
	err  error
	seq  uint64 // the stream sequence of the stored (or duplicate) row
}

func (a *chainAck) Wait(ctx context.Context) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return a.dup, a.err
	}
	select {
	case ack := <-a.f.Ok():
		a.done = true
		if err := provenStored(ack); err != nil {
			a.err = fmt.Errorf("snapshots: publish %s (%s): %w", a.row.Subject, a.row.EventID, err)
			return false, a.err
		}
		if ack.Duplicate {
			a.p.duplicates.Add(1)
		}
		a.dup, a.seq = ack.Duplicate, ack.Sequence
		return a.dup, nil
	case err := <-a.f.Err():
		a.done = true
		if wrongLast(err) {
			err = chainBroken{err}
		}
		a.err = fmt.Errorf("snapshots: publish %s (%s): %w", a.row.Subject, a.row.EventID, err)
		return false, a.err
	case <-ctx.Done():
		return false, fmt.Errorf("snapshots: publish %s (%s): no ack: %w", a.row.Subject, a.row.EventID, ctx.Err())
	}
}

// chainBroken is JetStream's wrong-last error, unchanged in its text, that
// also is snapshots.ErrChainBroken (the relay asks that, not JetStream).
type chainBroken struct{ error }

func (e chainBroken) Unwrap() error        { return e.error }
func (e chainBroken) Is(target error) bool { return target == snapshots.ErrChainBroken }
