package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// Relay is the outbox forwarder: it drains unpublished run_outbox rows and
// publishes each, strictly in sequence order per run: sequence n+1 of a run
// is never handed to the Publisher before n was acknowledged, and a row is
// marked published only after its ack. A crash between the ack and the mark
// re-publishes the row on restart; the Publisher deduplicates by eventId
// (JetStream Nats-Msg-Id), so subscribers see each event once.
//
// Runs are independent: up to Concurrency runs publish side by side. On a
// failure the relay backs off (MinBackoff doubling to MaxBackoff, with
// jitter) and drains again from the first unpublished row.
//
// The store's declared snapshots.Capabilities and the Publisher's declared
// snapshots.PublisherCapabilities choose the mode (Capabilities.ModeWith)
// and each optional step; neither is probed by type. With a store whose
// Claimer is set (Postgres) the relay claims runs instead of reading
// Unpublished, so relays of several daemons drain one outbox together and
// never publish one run at the same time: see OutboxClaimer. The embedded
// store (one daemon per data dir) is read as is; when the Publisher declares
// Ordered (JetStream) each batch Drain reads or claims is published as one
// pipelined window, still strictly in order per run, and its acknowledged
// prefixes are marked with one write (MultiUpToMarker); with Chain, Run
// streams rows as they are committed (stream.go).
type Relay struct {
	Store     agent.Store
	Publisher agent.Publisher
	// Wake wakes the relay at once (commit notifications); default: the
	// store's Commits() when it is a Notifier. PollInterval (default 1 s) is
	// the fallback for commits made by another process.
	Wake         <-chan struct{}
	PollInterval time.Duration
	// BatchSize rows are read per Unpublished call (default 256).
	BatchSize int
	// Concurrency: runs published in parallel (default 4).
	Concurrency int
	// MarkEvery: with a store that is an UpToMarker, acked rows are marked
	// published in groups of up to MarkEvery (and at the end of each run's
	// batch or before a failure is reported), not one write per row. A crash
	// re-publishes at most MarkEvery-1 acked rows, which the stream
	// deduplicates. Default 32; 1 marks every row on its own.
	MarkEvery int
	// ClaimRows: with an OutboxClaimer store, rows one claim takes in all,
	// split evenly over its runs (default 4096). A claim
	// is one pipelined window when the Publisher declares Ordered.
	ClaimRows int
	// OneByOne: never pipeline (Ordered) nor stream (Chain); each run's next
	// row is published only after the previous one's ack (the mode the
	// relay falls back to anyway after a failed window).
	OneByOne bool
	// ClaimWorkers: with an OutboxClaimer store, claims open at once, each
	// holding up to ceil(Concurrency/ClaimWorkers) runs and one store
	// connection while it publishes (default 2).
	ClaimWorkers int
	// PublishTimeout bounds one publish's wait for its ack (default 5 s).
	PublishTimeout time.Duration
	// MaxMessageBytes: a row whose message would be larger is parked
	// (OutboxParker) instead of published; 0: the Publisher's declared
	// Payload limit (PayloadLimiter), the NATS server's max_payload.
	MaxMessageBytes int
	MinBackoff      time.Duration // default 50 ms
	MaxBackoff      time.Duration // default 5 s
	// VerifyTails: compare every pass's runs with the stream's last event
	// on their subjects (a publisher declaring Tail) before publishing; by
	// default only passes within 30 s of a failure do (tail.go).
	VerifyTails bool
	Log         zerolog.Logger

	once sync.Once
	// caps and pcaps: the Store's and the Publisher's declared
	// capabilities (snapshots.CapabilitiesOf, PublisherCapabilitiesOf),
	// read by defaults; the mode and each optional step follow from them.
	caps       snapshots.Capabilities
	pcaps      snapshots.PublisherCapabilities
	running    atomic.Bool
	published  atomic.Int64
	failures   atomic.Int64
	passByPass atomic.Int64
	parked     atomic.Int64
	// tail checks (tail.go)
	lastFailure   atomic.Int64 // unix ns of the last failed pass
	alreadyStored atomic.Int64
	requeued      atomic.Int64
}

// RelayStats are counters since the Relay was made.
type RelayStats struct {
	Published int64 // rows acked and marked published
	Failures  int64 // drain passes that stopped on an error
	// PassByPass counts the times a streaming relay found other writers on
	// the stream and went pass by pass for a while (relay_stream.go).
	PassByPass int64
	// Parked counts rows parked because they can never be published.
	Parked int64
	// AlreadyStored counts rows a tail check found in the stream though
	// unmarked (acks lost); they were marked without publishing them again.
	AlreadyStored int64
	// Requeued counts rows a tail check found missing from the stream
	// though marked published (a cluster lost them); enqueued again.
	Requeued int64
}

// Stats returns the counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Published: r.published.Load(), Failures: r.failures.Load(), PassByPass: r.passByPass.Load(), Parked: r.parked.Load(),
		AlreadyStored: r.alreadyStored.Load(), Requeued: r.requeued.Load()}
}

func (r *Relay) defaults() { r.once.Do(r.setDefaults) }

func (r *Relay) setDefaults() {
	if r.PollInterval <= 0 {
		r.PollInterval = time.Second
	}
	if r.BatchSize <= 0 {
		r.BatchSize = 256
	}
	if r.Concurrency <= 0 {
		r.Concurrency = 4
	}
	if r.ClaimWorkers <= 0 {
		r.ClaimWorkers = 2
	}
	if r.ClaimRows <= 0 {
		r.ClaimRows = 4096
	}
	if r.MarkEvery <= 0 {
		r.MarkEvery = 32
	}
	if r.PublishTimeout <= 0 {
		r.PublishTimeout = 5 * time.Second
	}
	if r.MinBackoff <= 0 {
		r.MinBackoff = 50 * time.Millisecond
	}
	if r.MaxBackoff < r.MinBackoff {
		r.MaxBackoff = max(5*time.Second, r.MinBackoff)
	}
	r.caps = snapshots.CapabilitiesOf(r.Store)
	r.pcaps = snapshots.PublisherCapabilitiesOf(r.Publisher)
	if r.Wake == nil && r.caps.Notifier != nil {
		r.Wake = r.caps.Notifier.Commits()
	}
}

// Run drains until ctx is done, then returns nil. A row in flight when ctx
// ends is left unpublished (or published but not marked): the next Run
// re-publishes it and the stream deduplicates it.
func (r *Relay) Run(ctx context.Context) error {
	if r.Store == nil || r.Publisher == nil {
		return errors.New("snapshots: relay needs a Store and a Publisher")
	}
	r.defaults()
	if !r.running.CompareAndSwap(false, true) {
		return ErrRelayRunning
	}
	defer r.running.Store(false)
	cur, mk, cp, canStream := r.streamCapable()
	var streamAgain time.Time // pass by pass until then (the stream had other writers)
	poll := time.NewTicker(r.PollInterval)
	defer poll.Stop()
	backoff := r.MinBackoff
	for {
		if canStream && !time.Now().Before(streamAgain) {
			if !r.runStream(ctx, cur, mk, cp) {
				return nil
			}
			r.passByPass.Add(1)
			r.Log.Warn().Dur("for", streamPause).Msg("outbox relay: another publisher writes the stream; publishing pass by pass")
			streamAgain = time.Now().Add(streamPause)
		}
		_, err := r.drain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !r.backOff(ctx, err, &backoff) {
				return nil
			}
			continue
		}
		backoff = r.MinBackoff
		select {
		case <-ctx.Done():
			return nil
		case <-r.Wake:
		case <-poll.C:
		}
	}
}

// backOff counts a failed attempt, logs it and waits the jittered back-off
// (then doubles it, up to MaxBackoff); false when ctx ended first. New
// commits do not cut a back-off short: the publisher is failing.
func (r *Relay) backOff(ctx context.Context, err error, backoff *time.Duration) bool {
	r.failures.Add(1)
	wait := *backoff/2 + rand.N(*backoff/2+1)
	r.Log.Warn().Err(err).Dur("retry_in", wait).Msg("outbox relay: publish failed")
	*backoff = min(2**backoff, r.MaxBackoff)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// Drain publishes unpublished rows until there are none left or an error
// stops a run's sequence; it returns how many rows it published. Rows of a run
// after a failed one stay for the next Drain. Not to be called while Run runs.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	if r.running.Load() {
		return 0, ErrRelayRunning
	}
	return r.drain(ctx)
}

// ErrRelayRunning: Drain or a second Run was called while Run is active;
// two drains would publish one run's rows side by side, out of order.
var ErrRelayRunning = errors.New("snapshots: relay is running; stop Run before calling Drain")

func (r *Relay) drain(ctx context.Context) (n int, err error) {
	r.defaults()
	defer func() {
		if err != nil {
			r.noteFailure()
		}
	}()
	if r.caps.Mode() == snapshots.ModeClaims {
		return r.drainClaims(ctx, r.caps.Claimer)
	}
	op := r.ordered()
	total := 0
	for {
		rows, err := r.Store.Unpublished(ctx, r.BatchSize)
		if err != nil {
			return total, fmt.Errorf("snapshots: relay read outbox: %w", err)
		}
		if len(rows) == 0 {
			return total, nil
		}
		full := len(rows) == r.BatchSize
		if rows, err = r.parkUnpublishable(ctx, rows, r.storeParker()); err != nil {
			return total, err
		}
		if tail, ok := r.checksTails(); ok {
			var stored int
			requeued := r.requeued.Load()
			if rows, stored, err = r.checkTailsOfBatch(ctx, tail, rows); err != nil {
				return total, err
			}
			total += stored
			full = full || r.requeued.Load() != requeued // read the rows enqueued again
		}
		var n int
		switch {
		case len(rows) == 0:
		case op != nil:
			n, err = r.publishWindow(ctx, op, rows)
		default:
			n, err = r.publishBatch(ctx, rows)
		}
		total += n
		if err != nil {
			return total, err
		}
		if !full {
			return total, nil
		}
	}
}

// ordered is the Publisher's declared Ordered capability, or nil when it
// has none or the relay goes OneByOne.
func (r *Relay) ordered() snapshots.OrderedPublisher {
	if r.OneByOne {
		return nil
	}
	return r.pcaps.Ordered
}

// publishWindow publishes rows (ordered by run, sequence; one relay on the
// stream, as with the embedded store) as one pipelined window through op and
// marks each run's acknowledged prefix: with a MultiUpToMarker store in one
// write, else per run (UpToMarker) or per row. A run whose row failed keeps
// that row and the rest unpublished for the next pass. It returns how many
// rows it marked.
func (r *Relay) publishWindow(ctx context.Context, op snapshots.OrderedPublisher, rows []agent.OutboxRow) (int, error) {
	runs := splitRuns(rows)
	acked := make(map[string]int64, len(runs))
	perr := r.publishPipelined(ctx, op, runs, acked)
	if len(acked) == 0 {
		return 0, perr
	}
	marked, merr := r.markAcked(ctx, rows, acked)
	return marked, errors.Join(perr, merr)
}

// markAcked marks each run's rows up to acked[run] published: with a
// MultiUpToMarker store in one write, else per run (UpToMarker) or per row
// of rows. Also on a canceled ctx: a clean stop marks what was acked; the
// store calls are short and get their own deadline.
func (r *Relay) markAcked(ctx context.Context, rows []agent.OutboxRow, acked map[string]int64) (int, error) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.PublishTimeout)
	defer cancel()
	marked := 0
	var merr error
	switch {
	case r.caps.UpToMany != nil:
		marked, merr = r.caps.UpToMany.MarkPublishedUpToMany(mctx, acked)
	case r.caps.UpTo != nil:
		for runID, seq := range acked {
			n, err := r.caps.UpTo.MarkPublishedUpTo(mctx, runID, seq)
			marked += n
			if err != nil {
				merr = err
				break
			}
		}
	default:
		for _, row := range rows {
			if seq, ok := acked[row.RunID]; !ok || row.Sequence > seq {
				continue
			}
			if err := r.Store.MarkPublished(mctx, row.RunID, row.Sequence); err != nil {
				merr = err
				break
			}
			marked++
		}
	}
	r.published.Add(int64(marked))
	if merr != nil {
		merr = fmt.Errorf("acked outbox rows, mark published: %w", merr)
	}
	return marked, merr
}

// checkTailsOfBatch is checkTails over a batch read by Unpublished (rows
// ordered by run, sequence): rows the stream holds are marked at once; it
// returns the rows left to publish and how many it marked.
func (r *Relay) checkTailsOfBatch(ctx context.Context, tail snapshots.StreamTail, rows []agent.OutboxRow) ([]agent.OutboxRow, int, error) {
	stored := map[string]int64{}
	runs, err := r.checkTails(ctx, tail, splitRuns(rows), stored)
	if err != nil {
		return nil, 0, err
	}
	marked := 0
	if len(stored) > 0 {
		if marked, err = r.markAcked(ctx, rows, stored); err != nil {
			return nil, marked, err
		}
	}
	var left []agent.OutboxRow
	for _, run := range runs {
		left = append(left, run...)
	}
	return left, marked, nil
}

// splitRuns cuts rows (ordered by run, sequence) into one slice per run.
func splitRuns(rows []agent.OutboxRow) [][]agent.OutboxRow {
	var runs [][]agent.OutboxRow
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].RunID == rows[i].RunID {
			j++
		}
		runs = append(runs, rows[i:j])
		i = j
	}
	return runs
}

// publishBatch publishes rows (ordered by run, sequence) with one goroutine
// per run, at most Concurrency at once.
func (r *Relay) publishBatch(ctx context.Context, rows []agent.OutboxRow) (int, error) {
	runs := splitRuns(rows)
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, r.Concurrency)
		mu       sync.Mutex
		firstErr error
		count    atomic.Int64
	)
	for _, run := range runs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n, err := r.publishRun(ctx, run)
			count.Add(int64(n))
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(count.Load()), firstErr
}

// publishRun publishes one run's rows in sequence order, each only after the
// previous one was acked, and marks them published (one by one, or in groups
// through UpToMarker). It returns how many rows it marked.
func (r *Relay) publishRun(ctx context.Context, rows []agent.OutboxRow) (int, error) {
	um := r.caps.UpTo
	group := um != nil && r.MarkEvery > 1
	marked, acked := 0, 0 // acked: rows acked but not marked yet (group mode)
	flush := func() error {
		if acked == 0 {
			return nil
		}
		last := rows[marked+acked-1]
		// A canceled ctx must not lose acked rows' marks needlessly; the store
		// call is short, so give it its own deadline.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.PublishTimeout)
		_, err := um.MarkPublishedUpTo(mctx, last.RunID, last.Sequence)
		cancel()
		if err != nil {
			return fmt.Errorf("run %s up to sequence %d acked, mark published: %w", last.RunID, last.Sequence, err)
		}
		marked += acked
		r.published.Add(int64(acked))
		acked = 0
		return nil
	}
	for _, row := range rows {
		if ctx.Err() != nil {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, r.PublishTimeout)
		err := r.Publisher.Publish(pctx, row.Subject, row.EventID, row.Body)
		cancel()
		if err != nil {
			err = fmt.Errorf("run %s sequence %d: %w", row.RunID, row.Sequence, err)
			if group {
				err = errors.Join(err, flush())
			}
			return marked, err // n+1 waits until n is acked
		}
		if !group {
			if err := r.Store.MarkPublished(ctx, row.RunID, row.Sequence); err != nil {
				return marked, fmt.Errorf("run %s sequence %d acked, mark published: %w", row.RunID, row.Sequence, err)
			}
			marked++
			r.published.Add(1)
			continue
		}
		acked++
		if acked >= r.MarkEvery {
			if err := flush(); err != nil {
				return marked, err
			}
		}
	}
	if group {
		// Also on a canceled ctx: a clean stop marks what was acked.
		if err := flush(); err != nil {
			return marked, err
		}
	}
	return marked, ctx.Err()
}

// drainClaims is drain on an OutboxClaimer: ClaimWorkers loops, each
// claiming runs, publishing every claimed run side by side (each strictly in
// order, stopping at its first failure), marking the acked prefix of each in
// the claim's transaction and committing, until a claim finds no free run.
func (r *Relay) drainClaims(ctx context.Context, c snapshots.OutboxClaimer) (int, error) {
	perClaim := (r.Concurrency + r.ClaimWorkers - 1) / r.ClaimWorkers
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		total    atomic.Int64
	)
	for range r.ClaimWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, more, err := r.claimOnce(ctx, c, perClaim)
				total.Add(int64(n))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(total.Load()), firstErr
}

// claimOnce claims up to maxRuns runs, publishes them and finishes the
// claim. more: a claim found runs (there may be more to do).
func (r *Relay) claimOnce(ctx context.Context, c snapshots.OutboxClaimer, maxRuns int) (marked int, more bool, err error) {
	claim, err := c.ClaimOutbox(ctx, maxRuns, max(r.ClaimRows/maxRuns, 1))
	if err != nil {
		return 0, false, fmt.Errorf("snapshots: relay claim outbox: %w", err)
	}
	if len(claim.Runs()) == 0 {
		claim.Release()
		return 0, false, nil
	}
	runs, err := r.parkClaimed(ctx, claim)
	if err != nil {
		claim.Release()
		return 0, false, err
	}
	acked := make(map[string]int64, len(runs))
	if tail, ok := r.checksTails(); ok {
		// Rows the stream holds go into acked: Finish marks them.
		if runs, err = r.checkTails(ctx, tail, runs, acked); err != nil {
			claim.Release()
			return 0, false, err
		}
	}
	errs := r.publishClaimed(ctx, runs, acked)
	// Also on a canceled ctx: a clean stop marks what was acked. The store
	// call is short; it gets its own deadline.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.PublishTimeout)
	n, ferr := claim.Finish(fctx, acked)
	cancel()
	r.published.Add(int64(n))
	if ferr != nil {
		errs = append(errs, ferr)
	}
	if ctx.Err() != nil && ferr == nil {
		return n, false, nil
	}
	return n, true, errors.Join(errs...)
}

// parkClaimed parks the claim's rows that can never be published (inside
// the claim's transaction) and returns the claimed runs left to publish.
func (r *Relay) parkClaimed(ctx context.Context, claim snapshots.OutboxClaim) ([][]agent.OutboxRow, error) {
	runs := claim.Runs()
	kept := runs[:0:0]
	for _, run := range runs {
		run, err := r.parkUnpublishable(ctx, run, claim.Park)
		if err != nil {
			return nil, err
		}
		if len(run) > 0 {
			kept = append(kept, run)
		}
	}
	return kept, nil
}

// publishClaimed publishes the claimed runs, as one pipelined window when
// the Publisher declares Ordered, else each run on its own goroutine one
// row at a time, and records each run's acknowledged prefix in acked. It
// returns the failures.
func (r *Relay) publishClaimed(ctx context.Context, runs [][]agent.OutboxRow, acked map[string]int64) []error {
	if len(runs) == 0 {
		return nil
	}
	if op := r.ordered(); op != nil {
		if err := r.publishPipelined(ctx, op, runs, acked); err != nil {
			return []error{err}
		}
		return nil
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := r.publishSequential(ctx, run)
			mu.Lock()
			defer mu.Unlock()
			if n > 0 {
				acked[run[0].RunID] = run[n-1].Sequence
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return errs
}

// publishSequential publishes rows in order, each only after the previous
// one's ack, and returns how many were acked (a prefix of rows).
func (r *Relay) publishSequential(ctx context.Context, rows []agent.OutboxRow) (int, error) {
	for i, row := range rows {
		if ctx.Err() != nil {
			return i, nil
		}
		pctx, cancel := context.WithTimeout(ctx, r.PublishTimeout)
		err := r.Publisher.Publish(pctx, row.Subject, row.EventID, row.Body)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return i, nil
			}
			return i, fmt.Errorf("run %s sequence %d: %w", row.RunID, row.Sequence, err)
		}
	}
	return len(rows), nil
}

// publishPipelined publishes the claimed runs' rows in one window through
// op, one run after the other (op chains each run's rows on the run's own
// predecessor), and records in acked each run's last row of the
// acknowledged prefix.
func (r *Relay) publishPipelined(ctx context.Context, op snapshots.OrderedPublisher, runs [][]agent.OutboxRow, acked map[string]int64) error {
	var rows []agent.OutboxRow
	for _, run := range runs {
		rows = append(rows, run...)
	}
	// PublishTimeout per ack, plus the window's own length at 5,000 rows/s.
	pctx, cancel := context.WithTimeout(ctx, r.PublishTimeout+time.Duration(len(rows))*200*time.Microsecond)
	ok, err := op.PublishOrdered(pctx, rows)
	cancel()
	broken := map[string]bool{}
	for i, row := range rows {
		if broken[row.RunID] {
			continue
		}
		if i >= len(ok) || !ok[i] {
			broken[row.RunID] = true
			continue
		}
		acked[row.RunID] = row.Sequence
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
