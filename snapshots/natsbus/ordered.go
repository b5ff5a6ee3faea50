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
	_ snapshots.CapablePublisher = (*JetStreamPublisher)(nil)
	_ snapshots.CapablePublisher = (*LazyPublisher)(nil)
	_ snapshots.PayloadLimiter   = (*LazyPublisher)(nil)
)

// PublisherCapabilities implements snapshots.CapablePublisher: pipelined
// windows (PublishOrdered), the chain of the streaming relay (SendChain;
// only this publisher, made for the in-process server: see chain.go), the
// stream's tail (LastSequence) and the server's max_payload.
func (p *JetStreamPublisher) PublisherCapabilities() snapshots.PublisherCapabilities {
	return snapshots.PublisherCapabilities{Ordered: p, Chain: p, Tail: p, Payload: p}
}

// PublisherCapabilities implements snapshots.CapablePublisher: those of
// JetStreamPublisher but the chain (an external server or cluster may store
// a row of an ended chain after a later one's: see chain.go).
func (p *LazyPublisher) PublisherCapabilities() snapshots.PublisherCapabilities {
	return snapshots.PublisherCapabilities{Ordered: p, Tail: p, Payload: p}
}

// jsErrCodeStreamWrongLastMsgID is the server's JSStreamWrongLastMsgIDErrF
// ("wrong last msg ID: ..."), which nats.go has no constant for.
const jsErrCodeStreamWrongLastMsgID jetstream.ErrorCode = 10070

// orderedState: how many windows are still to be published one row at a
// time per run after a window failed, and the counters (mu guards both);
// send is held while a window's rows go out.
//
// A window is one chain on the stream: Nats-Expected-Last-Msg-Id is a
// condition on the stream's last message, not the subject's, so two windows
// sent at once would break each other's chains. Only the sending is
// serialized, though: once a window's last row is sent the next window's
// rows follow on the same connection (the server receives them after this
// window's), while this window's acks are still waited for. Its rows
// cannot break the next window's conditions: those name the next window's
// own rows, of runs no other window holds (the relay's claims and passes
// see to that), and a run's first row in a window carries none. So a relay
// with two claim workers keeps the stream busy: one window's acks and the
// store's marks overlap the next window's sending.
type orderedState struct {
	send     sync.Mutex
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
	if p.oneByOneWindow() {
		return p.publishRunsOneByOne(ctx, rows)
	}
	grouped, back := groupByRun(rows)
	ok, err := p.publishWindow(ctx, grouped)
	return back(ok), err
}

// oneByOneWindow counts a window and reports whether it goes one row at a
// time per run (a failure's fallback windows are not used up yet).
func (p *JetStreamPublisher) oneByOneWindow() bool {
	st := &p.ordered
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.fallback > 0 {
		st.fallback--
		st.stats.OneByOne++
		return true
	}
	st.stats.Pipelined++
	return false
}

// windowBroke starts the fallback windows after a window's failure.
func (p *JetStreamPublisher) windowBroke() {
	st := &p.ordered
	st.mu.Lock()
	st.fallback = orderedFallbackWindows
	st.stats.Broken++
	st.mu.Unlock()
}

// publishWindow is PublishOrdered's pipelined window over rows grouped by
// run; ok is indexed like rows.
func (p *JetStreamPublisher) publishWindow(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	w := &window{p: p, rows: rows, ok: make([]bool, len(rows)), guardOnly: true}
	w.send(ctx)
	ok, firstErr := w.ok, w.firstErr
	if firstErr == nil {
		return ok, nil
	}
	p.windowBroke()
	if !w.guardOnly {
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

// window is one pipelined PublishOrdered window: rows (grouped by run) go
// out as async publishes, at most OrderedInFlight unacknowledged; a run's
// first row without a condition, each later one expecting the run's
// previous row as the stream's last message. Sending stops at the first
// failure seen; the acks of what was sent are still waited for.
type window struct {
	p    *JetStreamPublisher
	rows []agent.OutboxRow
	ok   []bool // ok[i]: rows[i] is stored (or a duplicate of a stored one)
	futs []jetstream.PubAckFuture
	done int // acks waited for
	// guardOnly: every failure was a rejection of a row's condition;
	// firstErr the first failure.
	guardOnly bool
	firstErr  error
}

// send sends the window's rows (holding the publisher's send lock until
// the last is sent) and waits for their acks.
func (w *window) send(ctx context.Context) {
	w.futs = make([]jetstream.PubAckFuture, 0, len(w.rows))
	if !w.sendRows(ctx) {
		return
	}
	for w.done < len(w.futs) {
		if !w.wait(ctx) {
			return
		}
	}
}

// sendRows sends the rows under the send lock, waiting for acks only to
// keep at most OrderedInFlight outstanding; false when ctx ended.
func (w *window) sendRows(ctx context.Context) bool {
	w.p.ordered.send.Lock()
	defer w.p.ordered.send.Unlock()
	for i := range w.rows {
		for w.firstErr == nil && len(w.futs)-w.done >= OrderedInFlight {
			if !w.wait(ctx) {
				return false
			}
		}
		if w.firstErr != nil {
			break
		}
		f, err := w.p.js.PublishMsgAsync(windowMsg(w.rows, i))
		if err != nil {
			w.fail(i, err, false)
			break
		}
		w.futs = append(w.futs, f)
	}
	return true
}

// fail records row i's failure; guard: it is a rejection of its condition.
func (w *window) fail(i int, err error, guard bool) {
	w.guardOnly = w.guardOnly && guard
	if w.firstErr == nil {
		w.firstErr = fmt.Errorf("snapshots: publish %s (%s): %w", w.rows[i].Subject, w.rows[i].EventID, err)
	}
}

// wait waits for the next outstanding ack; false when ctx ended first (the
// window gives up: its later rows count as failed).
func (w *window) wait(ctx context.Context) bool {
	i := w.done
	w.done++
	select {
	case ack := <-w.futs[i].Ok():
		if err := provenStored(ack); err != nil {
			w.fail(i, err, false)
			return true
		}
		w.ok[i] = true
		if ack.Duplicate {
			w.p.duplicates.Add(1)
		}
	case err := <-w.futs[i].Err():
		w.fail(i, err, wrongLast(err))
	case <-ctx.Done():
		w.guardOnly = false
		if w.firstErr == nil {
			w.firstErr = fmt.Errorf("snapshots: ordered publish window: %w", ctx.Err())
		}
		return false
	}
	return true
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
// It holds the send lock: its rows carry no chain condition, so sent
// between another window's rows they would break that window's chain.
func (p *JetStreamPublisher) publishRunsOneByOne(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	p.ordered.send.Lock()
	defer p.ordered.send.Unlock()
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
