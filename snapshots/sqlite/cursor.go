package sqlite

import (
	"context"
	"database/sql"

	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// The embedded relay's stored position (migration 00014): agent_kv
// 'relay.embedded.cursor', a run_events id (the rowid, commit order) at or
// below which every event is published or parked. The events above it are
// the relay's work, published or not: every read of unpublished events
// reads that rowid range (no index of unpublished events is written at
// each commit), and the relay's marks move the cursor up in their own
// transaction. Requeue moves it down to below the first event it sends
// again; retention to the table's highest id at most, so that a new event
// (rowid: the highest + 1) is always above it.
const (
	cursorKey = `relay.embedded.cursor`
	// sqlCursor is the cursor's value (0: none stored, every event above).
	sqlCursor = `coalesce((SELECT CAST(value AS INTEGER) FROM agent_kv WHERE key = '` + cursorKey + `'), 0)`
	// sqlCursorAdvance moves the cursor to below the first unpublished
	// event above it, or to the last event when there is none: one walk of
	// the rowid range above it, up to its first unpublished row.
	sqlCursorAdvance = `UPDATE agent_kv SET value = CAST(coalesce(
		(SELECT id - 1 FROM run_events WHERE id > CAST(agent_kv.value AS INTEGER) AND published_at IS NULL ORDER BY id LIMIT 1),
		(SELECT max(id) FROM run_events), 0) AS TEXT), updated_at = ?
		WHERE key = '` + cursorKey + `'`
	// sqlCursorRequeue moves the cursor below the first event of run ?2
	// from sequence ?3 on (Requeue's).
	sqlCursorRequeue = `UPDATE agent_kv SET value = CAST(min(CAST(value AS INTEGER),
		coalesce((SELECT min(id) FROM run_events WHERE run_id = ?2 AND sequence >= ?3), CAST(value AS INTEGER) + 1) - 1) AS TEXT), updated_at = ?1
		WHERE key = '` + cursorKey + `'`
	// sqlCursorClamp keeps the cursor at or below the highest id left
	// (retention's): events deleted at the table's end would otherwise let
	// a new event's rowid fall below it.
	sqlCursorClamp = `UPDATE agent_kv SET value = CAST(min(CAST(value AS INTEGER), coalesce((SELECT max(id) FROM run_events), 0)) AS TEXT), updated_at = ?
		WHERE key = '` + cursorKey + `' AND CAST(value AS INTEGER) > coalesce((SELECT max(id) FROM run_events), 0)`
	// sqlMarkUpTo marks run ?2's unpublished events up to sequence ?3: the
	// rowid range from the cursor to the id of the run's event ?3 (a run's
	// events are inserted in sequence order, so its ids ascend with its
	// sequences; that id is one probe of run_events_run_sequence_key,
	// which holds the rowid). The unary + keeps the planner on that rowid
	// range, off the key, which would walk the run's published events.
	sqlMarkUpTo = `UPDATE run_events SET published_at = ?1 WHERE id > ` + sqlCursor + `
		AND id <= (SELECT id FROM run_events WHERE run_id = ?2 AND sequence <= ?3 ORDER BY sequence DESC LIMIT 1)
		AND +run_id = ?2 AND +sequence <= ?3 AND published_at IS NULL`
)

// advanceCursor runs sqlCursorAdvance in tx, stamped now.
func (s *Store) advanceCursor(ctx context.Context, tx *sql.Tx) error {
	q, err := s.ws.tx(ctx, tx, sqlCursorAdvance)
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, storekit.FmtTime(s.clock.Now()))
	return err
}
