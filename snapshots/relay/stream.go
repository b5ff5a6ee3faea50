package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// The streaming relay: Run's mode for a store with a single relay
// (OutboxCursor: the embedded store) and a publisher declaring Chain
// (JetStream's in-process server). A
// pass-by-pass relay makes a row committed while a window is out wait for
// that window's acks and marks; at 32 devices on 2 cores those passes took
// 10-30 ms each, plus up to 50 ms waiting for SQLite's writer to mark. Here
// rows go out as they are committed, as one chain (ChainPublisher), acks are
// settled in order by a goroutine of their own, and acked rows are marked
// published in the background, coalesced into one write.
//
// A session reads the outbox from its first unpublished row, then only rows
// committed since (the cursor). It ends at the first row that is not stored
// (an error, a timeout, a rejected chain condition): the rows still out are settled, what was acked is marked,
// the chain is reset and a new session re-reads from the first unpublished
// row, whose run's earlier rows are all stored. Errors other than a broken
// chain back off (MinBackoff doubling to MaxBackoff). At a PollInterval tick
// with nothing sent since the last one (at the latest every sweepEvery ticks)
// a session also ends quietly, so rows enqueued again (Requeue) are read.

// streamCapable reports whether Run streams (see above): the store's and
// the Publisher's declared capabilities allow it (ModeWith) and the relay
// is not OneByOne.
func (r *Relay) streamCapable() (snapshots.OutboxCursor, snapshots.MultiUpToMarker, snapshots.ChainPublisher, bool) {
	if r.OneByOne || r.caps.ModeWith(r.pcaps) != snapshots.ModeStream {
		return nil, nil, nil, false
	}
	return r.caps.Cursor, r.caps.UpToMany, r.pcaps.Chain, true
}

// sweepEvery: under steady load a session sweeps every sweepEvery
// PollIntervals (else at the first quiet one).
const sweepEvery = 10

// sessionEnd says why a session ended.
type sessionEnd int

const (
	endStop  sessionEnd = iota // ctx ended
	endSweep                   // PollInterval: read the outbox from the start
	endBreak                   // the chain broke (rejection, duplicate): reset, no back-off
	endError                   // a publish or store error: reset and back off
)

// streamPause: after the chain broke streamBreaks times within
// streamBreakWindow (another publisher writes the stream: several daemons
// with embedded stores on one NATS server), Run publishes pass by pass
// (PublishOrdered, which falls back to one row at a time per run) for this
// long before it streams again.
const (
	streamBreaks      = 3
	streamBreakWindow = 2 * time.Second
	streamPause       = 30 * time.Second
)

// runStream streams until ctx ends (false) or the chain keeps breaking
// (true: Run goes pass by pass for streamPause).
func (r *Relay) runStream(ctx context.Context, cur snapshots.OutboxCursor, mk snapshots.MultiUpToMarker, cp snapshots.ChainPublisher) (contended bool) {
	m := &marker{r: r, mk: mk, pending: map[string]int64{}, kick: make(chan struct{}, 1)}
	mctx, stopMarker := context.WithCancel(context.WithoutCancel(ctx))
	markerDone := make(chan struct{})
	go func() { defer close(markerDone); m.run(mctx) }()
	defer func() {
		stopMarker()
		<-markerDone
		// A clean stop marks what was acked.
		if err := m.flush(context.WithoutCancel(ctx)); err != nil {
			r.Log.Warn().Err(err).Msg("outbox relay: marking acked rows at stop")
		}
	}()
	poll := time.NewTicker(r.PollInterval)
	defer poll.Stop()
	backoff := r.MinBackoff
	cp.ResetChain()
	var breaks []time.Time
	for {
		end, err := r.session(ctx, cur, cp, m, poll.C)
		if ferr := m.flush(context.WithoutCancel(ctx)); ferr != nil && end != endStop {
			// The next session would send the acked rows again (the stream
			// drops them as duplicates, which breaks the chain): back off.
			end, err = endError, errors.Join(err, ferr)
		}
		switch end {
		case endStop:
			return false
		case endSweep:
			backoff = r.MinBackoff
			continue
		case endBreak:
			cp.ResetChain()
			now := time.Now()
			breaks = append(breaks, now)
			for len(breaks) > 0 && now.Sub(breaks[0]) > streamBreakWindow {
				breaks = breaks[1:]
			}
			if len(breaks) >= streamBreaks {
				return true
			}
			continue
		}
		cp.ResetChain()
		if !r.backOff(ctx, err, &backoff) {
			return false
		}
	}
}

// inFlight is a row sent and not yet settled.
type inFlight struct {
	row  agent.OutboxRow
	ack  snapshots.ChainAck
	sent time.Time
}

// session streams from the first unpublished row until a row is not stored,
// ctx ends or tick fires; every row it sent is settled when it returns.
func (r *Relay) session(ctx context.Context, cur snapshots.OutboxCursor, cp snapshots.ChainPublisher, m *marker, tick <-chan time.Time) (sessionEnd, error) {
	out := make(chan inFlight, snapshots.ChainInFlight)
	broken := make(chan struct{}) // closed by the acker at the first row not stored
	var (
		ackEnd sessionEnd
		ackErr error
	)
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		ackEnd, ackErr = r.settle(ctx, out, m, broken)
	}()
	end, err := r.send(ctx, cur, cp, out, broken, tick)
	close(out)
	<-ackDone
	if ackErr != nil || ackEnd != endSweep {
		// The acker's verdict wins: the chain broke or a row failed.
		return ackEnd, ackErr
	}
	return end, err
}

// send reads committed rows and sends them until broken closes, ctx ends,
// tick fires or reading or sending fails.
func (r *Relay) send(ctx context.Context, cur snapshots.OutboxCursor, cp snapshots.ChainPublisher, out chan<- inFlight, broken <-chan struct{}, tick <-chan time.Time) (sessionEnd, error) {
	var cursor int64
	// A sweep settles everything in flight first, which would hold up rows
	// committed meanwhile: it waits for a tick with nothing sent since the
	// last one, or sweepEvery ticks under steady load.
	sentSinceTick, busyTicks := false, 0
	for {
		rows, last, err := cur.UnpublishedAfter(ctx, cursor, r.BatchSize)
		if err != nil {
			if ctx.Err() != nil {
				return endStop, nil
			}
			return endError, fmt.Errorf("snapshots: relay read outbox: %w", err)
		}
		n := len(rows)
		if rows, err = r.parkUnpublishable(ctx, rows, r.storeParker()); err != nil {
			return endError, err
		}
		if end, stop, err := r.sendRows(ctx, cp, rows, out, broken); stop {
			return end, err
		}
		sentSinceTick = sentSinceTick || len(rows) > 0
		cursor = last
		if n == r.BatchSize {
			continue
		}
		select {
		case <-ctx.Done():
			return endStop, nil
		case <-broken:
			return endSweep, nil
		case <-tick:
			if !sentSinceTick || busyTicks >= sweepEvery {
				return endSweep, nil
			}
			sentSinceTick = false
			busyTicks++
		case <-r.Wake:
		}
	}
}

// sendRows sends rows on the chain, handing each to the acker through out;
// stop: the session ends (broken closed, ctx ended, a send failed) with
// end and err.
func (r *Relay) sendRows(ctx context.Context, cp snapshots.ChainPublisher, rows []agent.OutboxRow, out chan<- inFlight, broken <-chan struct{}) (end sessionEnd, stop bool, err error) {
	for _, row := range rows {
		select {
		case <-broken:
			return endSweep, true, nil // the acker reports why
		case <-ctx.Done():
			return endStop, true, nil
		default:
		}
		a, err := cp.SendChain(ctx, row)
		if err != nil {
			return endError, true, fmt.Errorf("run %s sequence %d: %w", row.RunID, row.Sequence, err)
		}
		select {
		case out <- inFlight{row: row, ack: a, sent: time.Now()}:
		case <-broken:
			return endSweep, true, nil
		case <-ctx.Done():
			// Sent: the acker still settles it (a clean stop marks it).
			out <- inFlight{row: row, ack: a, sent: time.Now()}
			return endStop, true, nil
		}
	}
	return endSweep, false, nil
}

// settle waits for each sent row's ack in order, hands acked rows (stored,
// or duplicates of stored ones) to the marker and closes broken at the first
// row not stored. Rows after that are settled, not marked.
func (r *Relay) settle(ctx context.Context, out <-chan inFlight, m *marker, broken chan<- struct{}) (sessionEnd, error) {
	end, endErr := endSweep, error(nil)
	stop := func(e sessionEnd, err error) {
		if end == endSweep {
			end, endErr = e, err
			close(broken)
		}
	}
	// Acks of a stopping relay are still waited for, PublishTimeout at most.
	actx := context.WithoutCancel(ctx)
	for f := range out {
		wctx, cancel := context.WithDeadline(actx, f.sent.Add(r.PublishTimeout))
		_, err := f.ack.Wait(wctx)
		cancel()
		if end != endSweep {
			continue // after the break nothing more is marked
		}
		if err != nil {
			if ctx.Err() != nil {
				stop(endStop, nil)
				continue
			}
			err = fmt.Errorf("run %s sequence %d: %w", f.row.RunID, f.row.Sequence, err)
			if errors.Is(err, snapshots.ErrChainBroken) {
				stop(endBreak, nil)
			} else {
				stop(endError, err)
			}
			continue
		}
		// A duplicate is in the stream already: marked like any stored row.
		// The chain goes on: a later row that is new is stored only right
		// after its predecessor (its condition), else it is rejected there.
		m.add(f.row.RunID, f.row.Sequence)
	}
	return end, endErr
}

// marker marks acked rows published in the background: whatever was acked
// while a write was on its way goes into the next one (one transaction,
// MultiUpToMarker).
type marker struct {
	r       *Relay
	mk      snapshots.MultiUpToMarker
	mu      sync.Mutex
	pending map[string]int64 // run -> highest acked sequence not yet marked
	kick    chan struct{}
	write   sync.Mutex // one write at a time (run and flush)
}

func (m *marker) add(runID string, seq int64) {
	m.mu.Lock()
	if seq > m.pending[runID] {
		m.pending[runID] = seq
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// markCoalesce: after a mark write the marker waits this long before the
// next one, so acks of that while go into one write. The marks are writes of
// the embedded store's single writer, in the group commits that also carry
// the steps: marking after every settled batch (one UPDATE per run per
// batch, and the outbox pages it dirties written to the WAL again each time)
// was 7% of the process's CPU at 32 devices and lengthened the commits'
// groups (BenchmarkCommitToNATS, docs/decisions.md). A crash re-publishes at
// most this long's acked rows, which the stream drops as duplicates
// (Nats-Msg-Id); a session's end and a stop mark at once. An atomic so the
// side-by-side benchmark can set it (export_test.go); the relay never does.
var markCoalesce atomic.Int64

func init() { markCoalesce.Store(int64(100 * time.Millisecond)) }

func (m *marker) run(ctx context.Context) {
	backoff := m.r.MinBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		if d := time.Duration(markCoalesce.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return // runStream marks what is pending
			case <-t.C:
			}
		}
		if err := m.flush(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			m.r.Log.Warn().Err(err).Msg("outbox relay: marking acked rows published")
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, m.r.MaxBackoff)
			select {
			case m.kick <- struct{}{}:
			default:
			}
			continue
		}
		backoff = m.r.MinBackoff
	}
}

// flush writes every pending mark; on an error they stay pending.
func (m *marker) flush(ctx context.Context) error {
	m.write.Lock()
	defer m.write.Unlock()
	m.mu.Lock()
	batch := m.pending
	m.pending = map[string]int64{}
	m.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, m.r.PublishTimeout)
	n, err := m.mk.MarkPublishedUpToMany(wctx, batch)
	cancel()
	if err != nil {
		m.mu.Lock()
		for run, seq := range batch {
			if seq > m.pending[run] {
				m.pending[run] = seq
			}
		}
		m.mu.Unlock()
		return fmt.Errorf("acked outbox rows, mark published: %w", err)
	}
	m.r.published.Add(int64(n))
	return nil
}
