package snapshots

import (
	"context"
	"errors"

	"github.com/screengraph/screengraph-agent/agent"
)

// OutboxParker is implemented by stores whose outbox rows can be parked:
// ParkOutbox takes the unpublished row (run, sequence) out of the queue
// (published_at set, so the relay goes on with the rows behind it) and
// records parked_at and reason (migration 00005). A row already published
// or parked is left as is.
type OutboxParker interface {
	ParkOutbox(ctx context.Context, runID string, sequence int64, reason string) error
}

// OutboxCounter is implemented by stores that count their outbox rows with
// one grouped query: rows waiting to be published, and rows parked.
type OutboxCounter interface {
	OutboxCounts(ctx context.Context) (unpublished, parked int64, err error)
}

// Notifier is implemented by stores that signal their commits: the channel
// receives (without blocking the writer, coalesced) after every CommitStep
// that wrote events, so the relay drains at once instead of waiting for its
// poll interval. One consumer per store.
type Notifier interface {
	Commits() <-chan struct{}
}

// StepEventer is implemented by stores that know which events were committed
// with which snapshot (run_events.step_ordinal): Replay uses it.
type StepEventer interface {
	StepEvents(ctx context.Context, runID string, stepOrdinal int) ([]agent.Event, error)
}

// UpToMarker is implemented by stores that mark a run's outbox prefix in one
// statement: every unpublished row of the run with sequence <= upTo. The
// relay uses it to mark acked rows in groups instead of one write each.
type UpToMarker interface {
	MarkPublishedUpTo(ctx context.Context, runID string, upTo int64) (int, error)
}

// OutboxCursor is implemented by stores whose outbox has a single relay and
// whose row ids grow in commit order (the embedded store: one writer, ids
// from AUTOINCREMENT). UnpublishedAfter returns up to limit unpublished rows
// with an outbox id above after, in id order (each run's in sequence order),
// and the id of the last one returned (after itself when none).
type OutboxCursor interface {
	UnpublishedAfter(ctx context.Context, after int64, limit int) (rows []agent.OutboxRow, last int64, err error)
}

// MultiUpToMarker is implemented by stores that mark several runs' outbox
// prefixes in one transaction: for each entry of upTo (run id -> sequence),
// what MarkPublishedUpTo does. The relay marks a whole pipelined window with
// one write instead of one per run. It returns how many rows it marked; on
// an error nothing is marked.
type MultiUpToMarker interface {
	MarkPublishedUpToMany(ctx context.Context, upTo map[string]int64) (int, error)
}

// Requeuer is implemented by stores that can enqueue published events again
// (operator recovery after a stream was lost; tests of deduplication). It
// clears published_at of the run's outbox rows with sequence >= from and
// returns how many rows it reset.
type Requeuer interface {
	Requeue(ctx context.Context, runID string, fromSequence int64) (int, error)
}

// OutboxClaimer is implemented by stores that several relays drain at once
// (Postgres, one outbox for a fleet of daemons). ClaimOutbox locks the head
// row (lowest unpublished sequence) of up to maxRuns runs whose head no other
// claim holds and returns up to rowsPerRun unpublished rows of each, in
// sequence order; the claim holds those runs until Finish or Release. Two
// open claims never share a run, so each run is published by one relay at a
// time and strictly in order.
type OutboxClaimer interface {
	ClaimOutbox(ctx context.Context, maxRuns, rowsPerRun int) (OutboxClaim, error)
}

// OutboxClaim is one open claim of ClaimOutbox.
type OutboxClaim interface {
	// Runs are the claimed runs' rows: one slice per run, in sequence order,
	// starting at the run's first unpublished row. Empty: nothing to claim.
	Runs() [][]agent.OutboxRow
	// Finish marks each run's rows with sequence <= ackedUpTo[runID]
	// published and ends the claim (commits), returning how many rows it
	// marked. If it fails nothing is marked and the runs are free again.
	Finish(ctx context.Context, ackedUpTo map[string]int64) (int, error)
	// Release ends the claim without marking anything.
	Release()
	// Park parks a claimed row inside the claim's transaction (the claim
	// holds the row's lock): see OutboxParker.
	Park(ctx context.Context, runID string, sequence int64, reason string) error
}

// OrderedPublisher is offered (PublisherCapabilities.Ordered) by publishers
// that pipeline many rows at once and still keep each run strictly in order (JetStreamPublisher, with
// JetStream's expected-sequence headers). rows hold several runs' rows, each
// run's in sequence order starting at its next unpublished row; ok[i] tells
// whether rows[i] was acknowledged (stored, or a duplicate of a stored
// event). The promise: a row of a run is stored only directly after the
// run's previous row, so after a failure of row n no later row of the run is
// in the stream. err reports the first failure.
type OrderedPublisher interface {
	PublishOrdered(ctx context.Context, rows []agent.OutboxRow) (ok []bool, err error)
}

// StreamTail is offered (PublisherCapabilities.Tail) by publishers that can
// read what the stream holds last on a run's subject (JetStream: the subject's last message). A
// relay resuming after failures checks each run against it instead of
// trusting its own acks and the stream's deduplication, which a cluster that
// lost its leader or restarted can break (an acknowledged message gone, a
// re-published one stored twice).
type StreamTail interface {
	// LastSequence returns the event sequence (the envelope's "sequence")
	// of the last message stored on subject; ok is false when the subject
	// holds none. err when the stream cannot be read or the message is not
	// an event envelope.
	LastSequence(ctx context.Context, subject string) (seq int64, ok bool, err error)
}

// PayloadLimiter is offered (PublisherCapabilities.Payload) by publishers
// that know the largest message their server accepts (NATS: the server's max_payload, from its INFO).
type PayloadLimiter interface {
	MaxPayload() int64
}

// ChainPublisher (PublisherCapabilities.Chain) publishes outbox rows as one
// chain kept across calls, for a relay that is the stream's only writer (the embedded store's): rows go out
// as they are committed, without waiting for the acks of the rows before.
type ChainPublisher interface {
	// SendChain sends row without waiting for its ack (but for the chain's
	// first row, after ResetChain, whose ack it waits for). Unless row is
	// the chain's first, it carries a condition that the row sent before it
	// is the stream's last message (JetStream: Nats-Expected-Last-Sequence,
	// never another row's eventId, which would be stored with the message
	// for its tenant to read), so JetStream stores the rows sent as a prefix
	// of them, back to back: after a row is lost or rejected, every later
	// one is rejected too. The caller sends a chain's first row only when
	// every earlier row of its run is stored.
	SendChain(ctx context.Context, row agent.OutboxRow) (ChainAck, error)
	// ResetChain makes the next row sent the first of a new chain.
	ResetChain()
}

// ChainAck is a sent row's acknowledgement.
type ChainAck interface {
	// Wait returns when the stream answered or ctx ended: nil when the row
	// is stored; duplicate when the stream had it already (it stored
	// nothing: the stream's last message is another one). An error wrapping
	// ErrChainBroken: the stream refused the row because the row before it
	// is not its last message; every later row of the chain is refused too.
	Wait(ctx context.Context) (duplicate bool, err error)
}

// ErrChainBroken is what a ChainAck's error wraps when the stream refused
// the row for its expected-last-message condition (JetStream's wrong last
// message id or sequence): the chain broke, not the connection.
var ErrChainBroken = errors.New("snapshots: chain broken: the row before is not the stream's last message")

// ChainInFlight is how many sent rows a chain or an ordered window keeps
// waiting for their acks (nats.go stalls async publishes at 4,000).
const ChainInFlight = 1024

// ErrNotConnected: SendChain while the NATS connection is down. Rows are not
// queued in the client's reconnect buffer (they would be sent again anyway
// after the relay's back-off).
var ErrNotConnected = errors.New("snapshots: NATS connection is down")

// Capabilities are what a store's outbox offers the relay beyond
// agent.Store, declared by the store itself (Capable) in one value: the
// relay's mode (Mode) and each optional step follow from it, instead of a
// type assertion per interface. A nil field is a capability the store does
// not have.
type Capabilities struct {
	// Notifier signals commits (the relay's default Wake).
	Notifier Notifier
	// StepEvents lists the events of one step (Replay).
	StepEvents StepEventer
	// Parker parks unpublishable rows; Counter counts rows waiting and
	// parked.
	Parker  OutboxParker
	Counter OutboxCounter
	// Requeuer enqueues published rows again (a stream that lost them).
	Requeuer Requeuer
	// UpTo marks a run's acked prefix in one write; UpToMany several runs'
	// in one transaction.
	UpTo     UpToMarker
	UpToMany MultiUpToMarker
	// Cursor: one relay drains the outbox in commit order (the embedded
	// store); with UpToMany and a ChainPublisher the relay streams.
	Cursor OutboxCursor
	// Claimer: several relays drain the outbox together by claims (a
	// fleet's Postgres).
	Claimer OutboxClaimer
}

// Capable is a store that declares its Capabilities.
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf is s's declared Capabilities; none for a store that
// declares nothing (a bare agent.Store: the relay goes pass by pass and
// marks one row at a time).
func CapabilitiesOf(s agent.Store) Capabilities {
	if c, ok := s.(Capable); ok {
		return c.Capabilities()
	}
	return Capabilities{}
}

// RelayMode is how a relay drains a store's outbox.
type RelayMode int

const (
	// ModePasses: read the unpublished rows, publish them, mark; again.
	ModePasses RelayMode = iota
	// ModeStream: a single relay follows the outbox by its cursor and
	// publishes rows as they are committed (with a ChainPublisher).
	ModeStream
	// ModeClaims: relays of several daemons claim runs (OutboxClaimer).
	ModeClaims
)

// Mode is the relay mode c allows: claims when the store has them, the
// stream when it has a cursor and one-write marks, else passes.
func (c Capabilities) Mode() RelayMode {
	switch {
	case c.Claimer != nil:
		return ModeClaims
	case c.Cursor != nil && c.UpToMany != nil:
		return ModeStream
	}
	return ModePasses
}

// ModeWith is the relay mode of a store with capabilities c and a publisher
// with capabilities p: Mode, but the stream only with a publisher that
// declares Chain (else passes).
func (c Capabilities) ModeWith(p PublisherCapabilities) RelayMode {
	if m := c.Mode(); m != ModeStream || p.Chain != nil {
		return m
	}
	return ModePasses
}

// PublisherCapabilities are what a publisher offers the relay beyond
// agent.Publisher, declared by the publisher itself (CapablePublisher) in
// one value, as a store declares its Capabilities: the relay pipelines,
// streams, checks the stream's tail and parks oversized rows only through
// what is declared here, never by probing the publisher's type. A nil field
// is a capability the publisher does not offer, even if it has the method
// (LazyPublisher has no Chain: see natsbus/chain.go).
type PublisherCapabilities struct {
	// Ordered pipelines a window of rows, each run strictly in order (the
	// pass and claim relays); without it each run's rows are published one
	// at a time, each after the previous one's ack.
	Ordered OrderedPublisher
	// Chain publishes rows as one chain across calls, for the streaming
	// relay (a store whose Mode is ModeStream); without it that store is
	// drained pass by pass.
	Chain ChainPublisher
	// Tail reads the stream's last event of a run (the tail checks after a
	// failure); without it the relay trusts its acks and the stream's
	// deduplication.
	Tail StreamTail
	// Payload knows the largest message the server accepts; rows over it
	// are parked. Without it (and without Relay.MaxMessageBytes) the
	// publish itself fails on them.
	Payload PayloadLimiter
}

// CapablePublisher is a publisher that declares its PublisherCapabilities.
type CapablePublisher interface {
	agent.Publisher
	PublisherCapabilities() PublisherCapabilities
}

// PublisherCapabilitiesOf is p's declared PublisherCapabilities; none for a
// publisher that declares nothing (a bare agent.Publisher: each run's rows
// are published one at a time, pass by pass).
func PublisherCapabilitiesOf(p agent.Publisher) PublisherCapabilities {
	if c, ok := p.(CapablePublisher); ok {
		return c.PublisherCapabilities()
	}
	return PublisherCapabilities{}
}
