-- A step commit writes the B-trees a query reads, and no others (issue 26
-- part 1, fourth step); see ../sqlite/00014_event_row_snapshot.sql for the
-- reasoning and the queries each index left serves. On Postgres a step
-- commit (3 events and a snapshot) wrote 3,454 WAL bytes: three event heap
-- tuples, four index entries each (run_events_run_sequence_key,
-- run_events_event_id_key and the two partial indexes of unpublished
-- events), a snapshot heap tuple and its key's entry. Now:
--   * run_events_event_id_key is dropped (no query reads by event_id);
--   * the step's snapshot is written in its last event's tuple (node_name,
--     resume_token, state, created_at beside step_ordinal), not in a heap
--     and an index of its own; agent_state_snapshot keeps the snapshots of
--     steps committed without events;
--   * kind, ts and checksum, copies of the envelope's members that no query
--     read, are dropped (the envelope is the event's one copy).
-- The unpublished indexes and the relay's marks are unchanged.
--
-- Carried over: each snapshot goes on the last event (highest sequence) of
-- its run committed with that step ordinal; a snapshot whose step has no
-- event row stays in agent_state_snapshot.

-- +goose Up
ALTER TABLE run_events DROP CONSTRAINT run_events_event_id_key,
    DROP COLUMN kind, DROP COLUMN ts, DROP COLUMN checksum,
    ADD COLUMN node_name TEXT,
    ADD COLUMN resume_token TEXT,
    ADD COLUMN state JSONB,
    ADD COLUMN created_at TIMESTAMPTZ;
COMMENT ON COLUMN run_events.node_name IS 'the step''s snapshot is on its last event row (node_name, resume_token, state, created_at); NULL on other rows';
UPDATE run_events e SET node_name = s.node_name, resume_token = s.resume_token, state = s.state, created_at = s.created_at
    FROM (SELECT run_id, step_ordinal, max(sequence) AS last FROM run_events WHERE step_ordinal IS NOT NULL
          GROUP BY run_id, step_ordinal) l
    JOIN agent_state_snapshot s ON s.run_id = l.run_id AND s.step_ordinal = l.step_ordinal
    WHERE e.run_id = l.run_id AND e.sequence = l.last;
DELETE FROM agent_state_snapshot s USING run_events e
    WHERE e.run_id = s.run_id AND e.step_ordinal = s.step_ordinal AND e.node_name IS NOT NULL;
COMMENT ON TABLE agent_state_snapshot IS 'snapshots of steps committed without events (the others are on their step''s last run_events row); key agent_state_snapshot_pkey (run_id, step_ordinal)';

-- +goose Down
INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at)
    SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM run_events WHERE node_name IS NOT NULL;
COMMENT ON TABLE agent_state_snapshot IS 'one row per committed step; key agent_state_snapshot_pkey (run_id, step_ordinal)';
ALTER TABLE run_events DROP COLUMN node_name, DROP COLUMN resume_token, DROP COLUMN state, DROP COLUMN created_at,
    ADD COLUMN kind TEXT, ADD COLUMN ts TEXT, ADD COLUMN checksum TEXT;
UPDATE run_events SET kind = j ->> 'kind', ts = j ->> 'ts', checksum = j ->> 'checksum'
    FROM (SELECT run_id AS r, sequence AS q, convert_from(envelope, 'UTF8')::jsonb AS j FROM run_events) x
    WHERE run_id = x.r AND sequence = x.q;
ALTER TABLE run_events ALTER COLUMN kind SET NOT NULL, ALTER COLUMN ts SET NOT NULL, ALTER COLUMN checksum SET NOT NULL,
    ADD CONSTRAINT run_events_event_id_key UNIQUE (event_id);
