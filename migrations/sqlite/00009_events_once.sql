-- Each event written once (issue 26 part 1): the event's envelope (the
-- whole event, as published) is its one copy. run_events.payload repeated
-- the envelope's payload and run_outbox.body the envelope: an event was
-- written three times. The outbox row now points at its event
-- (run_id, sequence); the relay reads the body from run_events.envelope.
-- Existing rows keep everything they need: every body was its event's
-- envelope, byte for byte (both written from one marshal), and nothing
-- read payload. Keep in step with ../postgres/00009_events_once.sql.

-- +goose Up
ALTER TABLE run_events DROP COLUMN payload;
ALTER TABLE run_outbox DROP COLUMN body;
-- StepEvents (run_id = ? AND step_ordinal = ? ORDER BY sequence) reads the
-- run's events through run_events_run_sequence_key (a run has tens of
-- events); its own index cost every event insert one more B-tree page.
DROP INDEX run_events_step_idx;

-- +goose Down
CREATE INDEX run_events_step_idx ON run_events (run_id, step_ordinal);
-- The copies come back from the one kept (payload from the envelope's
-- "payload" member, as JSON text).
ALTER TABLE run_outbox ADD COLUMN body BLOB NOT NULL DEFAULT x'';
UPDATE run_outbox SET body = CAST((SELECT e.envelope FROM run_events e WHERE e.run_id = run_outbox.run_id AND e.sequence = run_outbox.sequence) AS BLOB);
ALTER TABLE run_events ADD COLUMN payload TEXT NOT NULL DEFAULT 'null';
UPDATE run_events SET payload = coalesce(json_extract(envelope, '$.payload'), 'null');
