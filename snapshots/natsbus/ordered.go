package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

var (
	_ snapshots.OrderedPublisher = (*JetStreamPublisher)(nil)
	_ snapshots.StreamTail       = (*JetStreamPublisher)(nil)
	_ snapshots.StreamTail       = (*LazyPublisher)(nil)
)

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
// (PublishAsync on one connection, no wait between rows), one run after the
// other (rows are grouped by run, each run's in the order given). A run's
// first row in the window is its next unpublished row (every earlier one is
// stored), so it carries no condition; each later row carries
// Nats-Expected-Last-Msg-Id = the previous row of the SAME run, so JetStream
// stores it only directly after its own predecessor: a run's rows stored are
// a prefix of its rows in the window, back to back, and n+1 of a run is never
// stored without n before it, whatever else reaches the stream meanwhile.
//
// Why never a condition that names another run's row: such a condition says
// "the stream's last message is that row", not "my predecessor is stored".
// With runs interleaved in one chain, a row of run A sent in a window that
// failed (its acks lost in a leader kill, delivered late from a reconnect
// buffer or a slow proposal) was stored after the next window's first row,
// an unconditioned row of run B that the old chain named, although A's
// earlier rows were not in the stream: TestRelayFleetOrderUnderNATSFailures
// found run sequences 24, 27…120, 25, 26 on Debian's nats-server 2.9.10.
// A condition on the same run's predecessor holds however late it is
// evaluated. Measured on 2.9.10 (3 nodes, R3): the chain costs nothing
// against plain async publishing; Nats-Expected-Last-Subject-Sequence cannot
// be pipelined there (a second in-flight row of a subject is rejected).
//
// When the only failures are rejections of those conditions (nothing is
// down), each run goes on from its first rejected row one row at a time,
// each after the previous one's ack, within the call. After any failure the
// next orderedFallbackWindows windows are published that way (runs side by
// side): with several relays writing one stream chains break often, and
// pipelining would only waste windows. Duplicates (eventId stored within the
// duplicate window) are acknowledged as published; they store nothing, so
// the next row of their run is rejected unless the duplicate was the
// stream's last message.
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
	grouped, back := groupByRun(rows)
	ok, err := p.publishWindow(ctx, grouped)
	return back(ok), err
}

// publishWindow is PublishOrdered's pipelined window over rows grouped by
// run; ok is indexed like rows. p.ordered.mu is held.
func (p *JetStreamPublisher) publishWindow(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	st := &p.ordered
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

// groupByRun returns rows reordered so that each run's rows are contiguous
// (runs in the order of their first row, each run's rows in the order
// given), and back, which maps a result indexed like the reordered rows to
// the caller's order.
func groupByRun(rows []agent.OutboxRow) ([]agent.OutboxRow, func([]bool) []bool) {
	if grouped(rows) { // the relay's windows are: nothing to copy
		return rows, func(ok []bool) []bool { return ok }
	}
	byRun := make(map[string][]int, 8)
	var order []string
	for i, row := range rows {
		if _, seen := byRun[row.RunID]; !seen {
			order = append(order, row.RunID)
		}
		byRun[row.RunID] = append(byRun[row.RunID], i)
	}
	perm := make([]int, 0, len(rows)) // perm[j]: the caller's index of grouped row j
	for _, run := range order {
		perm = append(perm, byRun[run]...)
	}
	grouped := make([]agent.OutboxRow, len(rows))
	for j, i := range perm {
		grouped[j] = rows[i]
	}
	return grouped, func(ok []bool) []bool {
		out := make([]bool, len(ok))
		for j, i := range perm {
			out[i] = ok[j]
		}
		return out
	}
}

// grouped: each run's rows are contiguous in rows.
func grouped(rows []agent.OutboxRow) bool {
	var done []string // runs whose rows ended; a window holds a few runs
	for i := 1; i < len(rows); i++ {
		if rows[i].RunID == rows[i-1].RunID {
			continue
		}
		done = append(done, rows[i-1].RunID)
		if slices.Contains(done, rows[i].RunID) {
			return false
		}
	}
	return true
}

// OrderedInFlight bounds the acks a window has outstanding
// (snapshots.ChainInFlight): row i is sent once row i-1024's ack is in.
const OrderedInFlight = snapshots.ChainInFlight

// sendChain publishes rows (grouped by run) as one pipeline, at most
// OrderedInFlight unacknowledged, and sets ok: a run's first row without a
// condition, each later one expecting the run's previous row as the stream's
// last message. It stops sending at the first failure it sees and waits for
// the acks of what it sent. guardOnly: every failure was a rejection of a
// row's condition.
func (p *JetStreamPublisher) sendChain(ctx context.Context, rows []agent.OutboxRow, ok []bool) (guardOnly bool, firstErr error) {
	futs := make([]jetstream.PubAckFuture, 0, len(rows))
	guardOnly = true
	done := 0 // acks waited for
	wait := func() bool {
		i := done
		done++
		select {
		case ack := <-futs[i].Ok():
			if err := provenStored(ack); err != nil {
				guardOnly = false
				if firstErr == nil {
					firstErr = fmt.Errorf("snapshots: publish %s (%s): %w", rows[i].Subject, rows[i].EventID, err)
				}
				break
			}
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
		f, err := p.js.PublishMsgAsync(windowMsg(rows, i))
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

// windowMsg is the message of rows[i] in a window grouped by run:
// Nats-Msg-Id = its eventId, Nats-Expected-Stream = AGENT_EVENTS and, unless
// it is its run's first row in the window, Nats-Expected-Last-Msg-Id = the
// run's previous row.
func windowMsg(rows []agent.OutboxRow, i int) *nats.Msg {
	row := rows[i]
	m := &nats.Msg{Subject: row.Subject, Data: row.Body, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, row.EventID)
	m.Header.Set(jetstream.ExpectedStreamHeader, snapshots.StreamName)
	if i > 0 && rows[i-1].RunID == row.RunID {
		m.Header.Set(jetstream.ExpectedLastMsgIDHeader, rows[i-1].EventID)
	}
	return m
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

// stream is AGENT_EVENTS's handle, looked up (one STREAM.INFO request) once
// and kept: a tail check then costs one direct read per run.
func (p *JetStreamPublisher) stream(ctx context.Context) (jetstream.Stream, error) {
	p.tail.Lock()
	defer p.tail.Unlock()
	if p.tail.st == nil {
		st, err := p.js.Stream(ctx, snapshots.StreamName)
		if err != nil {
			return nil, fmt.Errorf("snapshots: stream %s: %w", snapshots.StreamName, err)
		}
		p.tail.st = st
	}
	return p.tail.st, nil
}

// LastSequence implements snapshots.StreamTail: the last message stored on
// subject in AGENT_EVENTS (a direct read of the stream, not a consumer), and
// its envelope's sequence.
func (p *JetStreamPublisher) LastSequence(ctx context.Context, subject string) (int64, bool, error) {
	st, err := p.stream(ctx)
	if err != nil {
		return 0, false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("snapshots: last message on %s: %w", subject, err)
	}
	var e struct {
		Sequence *int64 `json:"sequence"`
	}
	if err := json.Unmarshal(m.Data, &e); err != nil || e.Sequence == nil {
		return 0, false, fmt.Errorf("snapshots: last message on %s (stream sequence %d) is not an event envelope", subject, m.Sequence)
	}
	return *e.Sequence, true, nil
}

// LastSequence implements snapshots.StreamTail (see
// JetStreamPublisher.LastSequence).
func (p *LazyPublisher) LastSequence(ctx context.Context, subject string) (int64, bool, error) {
	pub, err := p.get(ctx)
	if err != nil {
		return 0, false, err
	}
	return pub.LastSequence(ctx, subject)
}
