package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

var _ snapshots.OrderedPublisher = (*JetStreamPublisher)(nil)

// jsErrCodeStreamWrongLastMsgID is the server's JSStreamWrongLastMsgIDErrF
// ("wrong last msg ID: ..."), which nats.go has no constant for.
const jsErrCodeStreamWrongLastMsgID jetstream.ErrorCode = 10070

// orderedState: how many windows are still to be published one row at a
// time per run after a window failed; mu serializes windows (a window is a
// chain on one connection).
type orderedState struct {
	mu       sync.Mutex
	fallback int
	stats    OrderedStats
}

// OrderedStats count PublishOrdered's windows since the publisher was made.
type OrderedStats struct {
	Pipelined int64 // windows sent as one chain
	Broken    int64 // of those, windows with a failed or rejected row
	OneByOne  int64 // windows published one row at a time per run (fallback)
	Chained   int64 // rows sent by SendChain (the streaming relay)
}

// OrderedStats returns the window counters.
func (p *JetStreamPublisher) OrderedStats() OrderedStats {
	p.ordered.mu.Lock()
	defer p.ordered.mu.Unlock()
	st := p.ordered.stats
	st.Chained = p.chain.sent.Load()
	return st
}

// orderedFallbackWindows: after a window had a failure (another publisher
// wrote to the stream meanwhile, a leader election, an outage), this many
// windows are published per run one row at a time before pipelining again.
const orderedFallbackWindows = 4

// PublishOrdered implements OrderedPublisher: a window of rows is pipelined
// (PublishAsync on one connection, no wait between rows) as one chain, each
// row after the first carrying Nats-Expected-Last-Msg-Id: the previous row's
// eventId. JetStream stores a row only if the stream's last message is the
// previous row of the window, so the rows stored are a prefix of the window,
// back to back: when a row is dropped or rejected (a leader election, a lost
// connection, another publisher's message in between) every later row of the
// window fails too, and n+1 of a run is never stored without n before it.
// The window's first row is its run's next unpublished row (every earlier
// one is stored), so it needs no condition. Measured on Debian's nats-server
// 2.9.10 (3 nodes, R3): the chain costs nothing against plain async
// publishing; Nats-Expected-Last-Subject-Sequence cannot be pipelined there
// (a second in-flight row of a subject is rejected), and
// Nats-Expected-Last-Sequence alone would let a row pass after a foreign
// message took its predecessor's place.
//
// When the only failures are those rejections (nothing is down), each run
// goes on from its first rejected row one row at a time, each after the
// previous one's ack, within the call. After any failure the next
// orderedFallbackWindows windows are published that way (runs side by side):
// with several relays writing one stream chains break often, and pipelining
// would only waste windows. Duplicates (eventId stored within the duplicate
// window) are acknowledged as published; they store nothing, so they break
// the chain too.
func (p *JetStreamPublisher) PublishOrdered(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	st := &p.ordered
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.fallback > 0 {
		st.fallback--
		st.stats.OneByOne++
		return p.publishRunsOneByOne(ctx, rows)
	}
	st.stats.Pipelined++
	ok := make([]bool, len(rows))
	guardOnly, firstErr := p.sendChain(ctx, rows, ok)
	if firstErr == nil {
		return ok, nil
	}
	st.fallback = orderedFallbackWindows
	st.stats.Broken++
	if !guardOnly {
		return ok, firstErr
	}
	// Only rejections: the chain broke (a duplicate stored nothing, another
	// relay wrote meanwhile). Nothing is down, so each run goes on from its
	// first rejected (or unsent) row, one row at a time: that row's
	// predecessor is stored.
	var rest []int
	broken := map[string]bool{}
	for i, row := range rows {
		if broken[row.RunID] || !ok[i] {
			broken[row.RunID] = true
			ok[i] = false
			rest = append(rest, i)
		}
	}
	sub := make([]agent.OutboxRow, len(rest))
	for j, i := range rest {
		sub[j] = rows[i]
	}
	ok2, err := p.publishRunsOneByOne(ctx, sub)
	for j, i := range rest {
		ok[i] = ok2[j]
	}
	return ok, err
}

// OrderedInFlight bounds the acks a window has outstanding
// (snapshots.ChainInFlight): row i is sent once row i-1024's ack is in.
const OrderedInFlight = snapshots.ChainInFlight

// sendChain publishes rows as one chain (rows[i] expects rows[i-1] as the
// stream's last message), at most OrderedInFlight unacknowledged, and sets
// ok. It stops sending at the first failure (every later row would be
// rejected) and waits for the acks of what it sent. guardOnly: every failure
// was a rejection of the chain's condition.
func (p *JetStreamPublisher) sendChain(ctx context.Context, rows []agent.OutboxRow, ok []bool) (guardOnly bool, firstErr error) {
	futs := make([]jetstream.PubAckFuture, 0, len(rows))
	guardOnly = true
	done := 0 // acks waited for
	wait := func() bool {
		i := done
		done++
		select {
		case ack := <-futs[i].Ok():
			ok[i] = true
			if ack.Duplicate {
				p.duplicates.Add(1)
			}
		case err := <-futs[i].Err():
			guardOnly = guardOnly && wrongLast(err)
			if firstErr == nil {
				firstErr = fmt.Errorf("snapshots: publish %s (%s): %w", rows[i].Subject, rows[i].EventID, err)
			}
		case <-ctx.Done():
			guardOnly = false
			if firstErr == nil {
				firstErr = fmt.Errorf("snapshots: ordered publish window: %w", ctx.Err())
			}
			return false
		}
		return true
	}
	for i, row := range rows {
		for firstErr == nil && len(futs)-done >= OrderedInFlight {
			if !wait() {
				return false, firstErr
			}
		}
		if firstErr != nil {
			break
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(row.EventID), jetstream.WithExpectStream(snapshots.StreamName)}
		if i > 0 {
			opts = append(opts, jetstream.WithExpectLastMsgID(rows[i-1].EventID))
		}
		f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: row.Subject, Data: row.Body}, opts...)
		if err != nil {
			guardOnly = false
			firstErr = fmt.Errorf("snapshots: publish %s (%s): %w", row.Subject, row.EventID, err)
			break
		}
		futs = append(futs, f)
	}
	for done < len(futs) {
		if !wait() {
			return false, firstErr
		}
	}
	return guardOnly, firstErr
}

// wrongLast: err is JetStream's rejection of an expected last message id
// (or sequence) header.
func wrongLast(err error) bool {
	var jerr jetstream.JetStreamError
	if !errors.As(err, &jerr) || jerr.APIError() == nil {
		return false
	}
	switch jerr.APIError().ErrorCode {
	case jsErrCodeStreamWrongLastMsgID, jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return true
	}
	return false
}

// publishRunsOneByOne publishes each run's rows in order, each after the
// previous one's ack, runs side by side; a run stops at its first failure.
func (p *JetStreamPublisher) publishRunsOneByOne(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	ok := make([]bool, len(rows))
	byRun := map[string][]int{}
	var order []string
	for i, row := range rows {
		if _, seen := byRun[row.RunID]; !seen {
			order = append(order, row.RunID)
		}
		byRun[row.RunID] = append(byRun[row.RunID], i)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, run := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range byRun[run] {
				if err := p.Publish(ctx, rows[i].Subject, rows[i].EventID, rows[i].Body); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				ok[i] = true
			}
		}()
	}
	wg.Wait()
	return ok, errors.Join(errs...)
}
