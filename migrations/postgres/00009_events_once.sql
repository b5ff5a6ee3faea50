-- Each event written once (issue 26 part 1): the event's envelope (the
-- exact bytes published) is its one copy. run_events.payload (JSONB)
-- repeated the envelope's payload and run_outbox.body the envelope: an
-- event was written three times. The outbox row now points at its event
-- (run_id, sequence); the relay reads the body from run_events.envelope.
-- Existing rows keep everything they need: every body was its event's
-- envelope, byte for byte, and nothing read payload. Keep in step with
-- ../sqlite/00009_events_once.sql.

-- +goose Up
ALTER TABLE run_events DROP COLUMN payload;
ALTER TABLE run_outbox DROP COLUMN body;
-- StepEvents (run_id = ? AND step_ordinal = ? ORDER BY sequence) reads the
-- run's events through run_events_run_sequence_key (a run has tens of
-- events); its own index cost every event insert one more B-tree page.
DROP INDEX run_events_step_idx;

-- +goose Down
CREATE INDEX run_events_step_idx ON run_events (run_id, step_ordinal);
ALTER TABLE run_outbox ADD COLUMN body BYTEA;
UPDATE run_outbox o SET body = e.envelope FROM run_events e WHERE e.run_id = o.run_id AND e.sequence = o.sequence;
ALTER TABLE run_outbox ALTER COLUMN body SET NOT NULL;
ALTER TABLE run_events ADD COLUMN payload JSONB;
UPDATE run_events SET payload = coalesce(convert_from(envelope, 'UTF8')::jsonb -> 'payload', 'null'::jsonb);
ALTER TABLE run_events ALTER COLUMN payload SET NOT NULL;
