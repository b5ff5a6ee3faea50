package retention

import (
	"context"
	"fmt"
	"time"
)

// DefaultBlobGrace is how old an evidence blob no row names must be before
// a pass deletes it: a capture stores its blobs before the step that names
// them commits (seconds later), so a young unnamed blob may be about to be
// named.
const DefaultBlobGrace = time.Hour

// blobBatch is how many digests one ArtifactBlobsInUse call asks about.
const blobBatch = 500

// sweepBlobs deletes the evidence blobs older than now - grace that no
// artifact row names (their runs were pruned, or their step never
// committed). It returns how many it deleted.
func (c *Cleaner) sweepBlobs(ctx context.Context, now time.Time) (int64, error) {
	if c.Evidence == nil || c.Blobs == nil {
		return 0, nil
	}
	grace := c.BlobGrace
	if grace <= 0 {
		grace = DefaultBlobGrace
	}
	horizon := now.Add(-grace)
	var deleted int64
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		used, err := c.Evidence.ArtifactBlobsInUse(ctx, batch)
		if err != nil {
			return err
		}
		for _, sum := range batch {
			if used[sum] {
				continue
			}
			if err := c.Blobs.Delete(ctx, sum); err != nil {
				return err
			}
			deleted++
		}
		batch = batch[:0]
		return nil
	}
	err := c.Blobs.List(ctx, func(sum string, modified time.Time) error {
		if !modified.Before(horizon) {
			return nil
		}
		batch = append(batch, sum)
		if len(batch) >= blobBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return deleted, fmt.Errorf("retention: evidence blobs: %w", err)
	}
	return deleted, nil
}
