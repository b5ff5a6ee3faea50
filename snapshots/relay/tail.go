package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// Checking the stream's tail after failures. The relay's own record (a row
// is marked published once acknowledged) and the stream's deduplication
// (Nats-Msg-Id within the duplicate window) are what keep each event in the
// stream once. A JetStream cluster whose stream leader is killed, or that is
// restarted as a whole, can break both on Debian's nats-server 2.9.10: the
// fleet test saw an acknowledged event missing from the stream (the next one
// stored after its predecessor's predecessor) and a re-published event
// stored twice. So for tailCheckWindow after any failure (or always, with
// VerifyTails) each run a pass is about to publish is first compared with
// the last event the stream holds on the run's subject:
//   - the stream holds rows the outbox has not marked (their acks were lost):
//     they are marked without being published again;
//   - the stream lacks rows the outbox marked published (the cluster lost
//     them): the run's rows from the first missing one are enqueued again
//     (Requeuer) and published in order in a later pass; nothing of the run
//     is later in the stream, so its order holds.
// The check is one direct read per run; a healthy relay does not make it.

// tailCheckWindow: how long after a failure passes check the stream's tail.
const tailCheckWindow = 30 * time.Second

// checksTails reports whether this pass compares runs with the stream.
func (r *Relay) checksTails() (snapshots.StreamTail, bool) {
	tail := r.pcaps.Tail
	if tail == nil {
		return nil, false
	}
	if r.VerifyTails {
		return tail, true
	}
	last := r.lastFailure.Load()
	return tail, last != 0 && time.Since(time.Unix(0, last)) < tailCheckWindow
}

// noteFailure starts (or extends) the window in which passes check tails.
func (r *Relay) noteFailure() { r.lastFailure.Store(time.Now().UnixNano()) }

// checkTails compares each run (rows from its first unpublished one) with
// the stream's tail on its subject. Rows the stream already holds are
// recorded in stored (run -> highest such sequence among the run's rows) and
// cut off; a run whose earlier, published rows the stream lacks is enqueued
// again from the first missing one and left out. It returns what is left to
// publish. An error (the stream cannot be read) leaves runs unchanged for
// the caller to give up the pass.
func (r *Relay) checkTails(ctx context.Context, tail snapshots.StreamTail, runs [][]agent.OutboxRow, stored map[string]int64) ([][]agent.OutboxRow, error) {
	out := runs[:0:0]
	for _, run := range runs {
		head := run[0]
		tctx, cancel := context.WithTimeout(ctx, r.PublishTimeout)
		last, ok, err := tail.LastSequence(tctx, head.Subject)
		cancel()
		if err != nil {
			return runs, fmt.Errorf("snapshots: relay: check run %s against the stream: %w", head.RunID, err)
		}
		switch {
		case !ok || last == head.Sequence-1:
			// Nothing of the run stored yet (or aged out), or in step.
			out = append(out, run)
		case last >= head.Sequence:
			k := 0
			for k < len(run) && run[k].Sequence <= last {
				k++
			}
			stored[head.RunID] = run[k-1].Sequence
			r.alreadyStored.Add(int64(k))
			r.Log.Warn().Str("run_id", head.RunID).Int64("from", head.Sequence).Int64("to", run[k-1].Sequence).
				Msg("outbox relay: the stream already holds these events (their acks were lost); marked without publishing them again")
			if k < len(run) {
				out = append(out, run[k:])
			}
		default: // last < head.Sequence-1: published rows missing
			rq := r.caps.Requeuer
			if rq == nil {
				r.Log.Error().Str("run_id", head.RunID).Int64("stream_last", last).Int64("next", head.Sequence).
					Msg("outbox relay: the stream lost acknowledged events of this run and the store cannot enqueue them again")
				out = append(out, run)
				continue
			}
			n, err := rq.Requeue(ctx, head.RunID, last+1)
			if err != nil {
				return runs, fmt.Errorf("snapshots: relay: enqueue run %s again from sequence %d: %w", head.RunID, last+1, err)
			}
			if n == 0 { // the rows are gone (pruned): go on without them
				r.Log.Error().Str("run_id", head.RunID).Int64("stream_last", last).Int64("next", head.Sequence).
					Msg("outbox relay: the stream lost acknowledged events of this run and the outbox no longer has them")
				out = append(out, run)
				continue
			}
			r.requeued.Add(int64(n))
			r.Log.Error().Str("run_id", head.RunID).Int64("stream_last", last).Int64("next", head.Sequence).Int("requeued", n).
				Msg("outbox relay: the stream lost acknowledged events of this run; publishing them again in order")
		}
	}
	return out, nil
}
