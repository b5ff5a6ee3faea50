package relay

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
)

// headerAllowance is what a published message carries besides its body:
// the subject and the Nats-Msg-Id and expected-stream/last-id headers
// (JetStream counts headers in max_payload).
const headerAllowance = 1024

// messageLimit is MaxMessageBytes, else the Publisher's declared Payload
// limit; 0 when not known (none declared, or not connected yet: the
// publish itself will tell).
func (r *Relay) messageLimit() int64 {
	if r.MaxMessageBytes > 0 {
		return int64(r.MaxMessageBytes)
	}
	if pl := r.pcaps.Payload; pl != nil {
		return pl.MaxPayload()
	}
	return 0
}

// unpublishable reports why row can never be published (its message is over
// limit), or "" when it may be.
func unpublishable(row agent.OutboxRow, limit int64) string {
	if limit <= 0 {
		return ""
	}
	if size := int64(len(row.Body) + len(row.Subject) + len(row.EventID) + headerAllowance); size > limit {
		return fmt.Sprintf("message of %d bytes (envelope %d) is over the NATS server's max_payload of %d bytes", size, len(row.Body), limit)
	}
	return ""
}

// parkUnpublishable parks, through park, every row of rows that can never be
// published and returns the others, in order. Without a park function (a
// store that cannot park) rows are returned as they are.
func (r *Relay) parkUnpublishable(ctx context.Context, rows []agent.OutboxRow, park func(ctx context.Context, runID string, sequence int64, reason string) error) ([]agent.OutboxRow, error) {
	limit := r.messageLimit()
	if park == nil || limit <= 0 {
		return rows, nil
	}
	var kept []agent.OutboxRow
	for i, row := range rows {
		reason := unpublishable(row, limit)
		if reason == "" {
			if kept != nil {
				kept = append(kept, row)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]agent.OutboxRow, 0, len(rows)), rows[:i]...)
		}
		if err := park(ctx, row.RunID, row.Sequence, reason); err != nil {
			return nil, err
		}
		r.parked.Add(1)
		r.Log.Error().Str("run_id", row.RunID).Int64("sequence", row.Sequence).Str("event_id", row.EventID).Str("reason", reason).
			Msg("outbox relay: event parked, it can never be published; the runs behind it go on")
	}
	if kept == nil {
		return rows, nil
	}
	return kept, nil
}

// storeParker is the store's ParkOutbox, or nil.
func (r *Relay) storeParker() func(ctx context.Context, runID string, sequence int64, reason string) error {
	if r.caps.Parker != nil {
		return r.caps.Parker.ParkOutbox
	}
	return nil
}
