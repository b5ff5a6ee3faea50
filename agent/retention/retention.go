// Package retention ages out what the agent keeps: a Cleaner deletes ended
// runs older than the retention with everything only they refer to, in
// batches, through the store's agent.Pruner (River's JobCleaner is the
// model: app-clock horizon, fixed interval, bounded batches). Runs whose
// outbox rows are not all published are never deleted; each pass reports
// them (Held) so an operator sees a relay that is stuck.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// Defaults of a Cleaner.
const (
	DefaultRetention = 720 * time.Hour
	DefaultInterval  = 5 * time.Minute
	DefaultBatchSize = 500
	// DefaultPassTimeout bounds one pass (all its batches).
	DefaultPassTimeout = 2 * time.Minute
)

// Cleaner prunes the store every Interval. The zero values of the optional
// fields take the defaults above.
type Cleaner struct {
	Store agent.Pruner
	// Retention is how long an ended run is kept after its last status
	// change; <= 0 keeps everything (no pass deletes anything).
	Retention time.Duration
	// Interval between passes; BatchSize runs per transaction (the embedded
	// store's writer waits for each); PassTimeout bounds a pass.
	Interval    time.Duration
	BatchSize   int
	PassTimeout time.Duration
	// Evidence and Blobs, when both set, let a pass delete the evidence
	// blobs no artifact row names any more, once older than BlobGrace
	// (default DefaultBlobGrace).
	Evidence  agent.ArtifactIndex
	Blobs     agent.BlobStore
	BlobGrace time.Duration
	// Logf reports each pass that deleted or held something, and failures;
	// nil drops it.
	Logf func(format string, args ...any)
}

func (c *Cleaner) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// Pass deletes, batch after batch, the ended runs whose last status change
// is older than now - Retention, until a batch comes back short. It returns
// the sum of the batches (Held as the last batch counted it). Errors: the
// store's, or ctx's; what earlier batches deleted stays deleted.
func (c *Cleaner) Pass(ctx context.Context, now time.Time) (agent.PruneResult, error) {
	var total agent.PruneResult
	if c.Retention <= 0 {
		return total, nil
	}
	if c.Store == nil {
		return total, errors.New("retention: no store")
	}
	batch := c.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	cutoff := now.Add(-c.Retention)
	for {
		res, err := c.Store.PruneRuns(ctx, cutoff, batch)
		total.Add(res)
		if err != nil {
			return total, fmt.Errorf("retention: prune runs ended before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		if res.Runs < int64(batch) {
			n, err := c.sweepBlobs(ctx, now)
			total.EvidenceBlobs += n
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// now is the time a pass's cutoff counts from: the store's clock when the
// store tells it (agent.StoreClock: Postgres's, shared by every daemon of a
// fleet, so a daemon whose clock runs ahead does not prune every tenant's
// ended runs early), else this process's.
func (c *Cleaner) now(ctx context.Context) (time.Time, error) {
	if sc, ok := c.Store.(agent.StoreClock); ok {
		t, err := sc.StoreNow(ctx)
		if err != nil {
			return t, fmt.Errorf("retention: the store's clock: %w", err)
		}
		return t, nil
	}
	return time.Now(), nil
}

// Run makes a pass at once and then every Interval until ctx ends. A failed
// pass is logged and tried again at the next interval.
func (c *Cleaner) Run(ctx context.Context) {
	if c.Retention <= 0 {
		return
	}
	every := c.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	limit := c.PassTimeout
	if limit <= 0 {
		limit = DefaultPassTimeout
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, limit)
		now, err := c.now(pctx)
		var res agent.PruneResult
		if err == nil {
			res, err = c.Pass(pctx, now)
		}
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			c.logf("retention: %v (deleted %d runs before it)", err, res.Runs)
		case res.Runs > 0 || res.Held > 0 || res.EvidenceBlobs > 0:
			c.logf("retention: deleted %d runs ended more than %v ago (%d events, %d outbox rows, %d snapshots, %d control rows, %d leases, %d evidence rows) and %d evidence blobs no row names; %d such runs held: outbox rows not yet published or lease active (first: %v)",
				res.Runs, c.Retention, res.Events, res.Outbox, res.Snapshots, res.Controls, res.Leases, res.EvidenceRows, res.EvidenceBlobs, res.Held, res.HeldRuns[:min(len(res.HeldRuns), 5)])
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
