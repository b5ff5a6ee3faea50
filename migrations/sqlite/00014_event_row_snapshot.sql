-- A step commit writes the B-trees a query reads, and no others (issue 26
-- part 1, fourth step). After 00012 an embedded step commit (3 events and
-- a snapshot) dirtied 8.27 pages, each a WAL frame of two pwrite64s: the
-- event rows 1.72, run_events_event_id_key 1.46, run_events_run_sequence_key
-- 1.50, run_events_unpublished 1.50, agent_state_snapshot 1.58 and the
-- database header 0.50. This migration removes two of those trees:
--   * the event_id UNIQUE key: no query reads run_events by event_id (an
--     event is read by its run and sequence; event_id is a ULID the engine
--     mints, and NATS's Nats-Msg-Id dedups a re-published event);
--   * agent_state_snapshot as every step's second tree: a step's snapshot is
--     stored on its last event row (node_name, resume_token, state,
--     created_at beside step_ordinal), in the page that row's insert dirties
--     anyway. agent_state_snapshot keeps only the snapshots of steps
--     committed without events (the store allows it; the engine never does).
-- and three columns each event row repeated from its envelope (kind, ts,
-- checksum: the envelope is the event's one copy, and no query read them),
-- and the partial index of unpublished events (run_events_unpublished), a
-- B-tree every event insert wrote: the embedded relay's position is stored
-- instead, as agent_kv 'relay.embedded.cursor' (decimal text), a run_events
-- id at or below which every event is published (or parked). It is moved
-- up in the relay's mark transaction, down by Requeue, and to the table's
-- highest id at most by retention (a new event's rowid is the highest + 1,
-- so it is always above the cursor). The reads of unpublished events read
-- the rowid range above it (snapshots/sqlite). Parked events stay marked
-- on their rows, as before.
--
-- The indexes left, each with the queries it serves:
--   run_events_run_sequence_key UNIQUE (run_id, sequence): the sequence's
--     uniqueness (ErrSequenceTaken), LockRun's last sequence and latest
--     snapshot (read backwards), Events, StepEvents, Snapshot,
--     LatestSnapshot, MarkPublished, Park, Requeue, retention's deletes and
--     its "held" test;
--   the table's rowid above the relay cursor: Unpublished, UnpublishedAfter,
--     the relay's marks, OutboxCounts, the cursor's advance;
--   run_events_parked (parked_at) WHERE parked_at IS NOT NULL: ParkedEvents
--     and OutboxCounts (00012);
--   agent_state_snapshot's key (run_id, step_ordinal): the snapshots of
--     steps without events, by the same reads.
--
-- Carried over: each snapshot goes on the last event (highest sequence) of
-- its run committed with that step ordinal; a snapshot whose step has no
-- event row stays in agent_state_snapshot, where every read still finds it.
-- Events keep their rowids (the relay's cursor and commit order).
-- Keep in step with ../postgres/00014_event_row_snapshot.sql.

-- +goose Up
-- Small columns first, the envelope and state last: a row read for its
-- publish state does not walk its text (nor an overflow page).
CREATE TABLE run_events_v14 (
    id            INTEGER PRIMARY KEY,           -- the rowid: commit order, the embedded relay's cursor
    run_id        TEXT    NOT NULL REFERENCES runs (run_id),
    sequence      INTEGER NOT NULL,
    event_id      TEXT    NOT NULL,              -- ULID; NATS Nats-Msg-Id
    step_ordinal  INTEGER,                       -- the step committed with it, NULL if none
    published_at  TEXT,                          -- NULL: waiting for the relay
    parked_at     TEXT,
    parked_reason TEXT,
    node_name     TEXT,                          -- the step's snapshot, on its last event; NULL on other rows
    resume_token  TEXT,
    created_at    TEXT,                          -- the snapshot's
    envelope      TEXT    NOT NULL,              -- the whole event, JSON: its one copy
    state         TEXT,                          -- the snapshot's state, JSON
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
-- Each step's last event found once per (run, step) in one grouped pass,
-- not by a lookup per event (which would read its run's every row).
INSERT INTO run_events_v14 (id, run_id, sequence, event_id, step_ordinal, published_at, parked_at, parked_reason,
        node_name, resume_token, created_at, envelope, state)
    SELECT e.id, e.run_id, e.sequence, e.event_id, e.step_ordinal, e.published_at, e.parked_at, e.parked_reason,
        s.node_name, s.resume_token, s.created_at, e.envelope, s.state
    FROM run_events e
    LEFT JOIN (SELECT run_id, step_ordinal, max(sequence) AS last FROM run_events WHERE step_ordinal IS NOT NULL
               GROUP BY run_id, step_ordinal) l ON l.run_id = e.run_id AND l.last = e.sequence
    LEFT JOIN agent_state_snapshot s ON s.run_id = l.run_id AND s.step_ordinal = l.step_ordinal
    ORDER BY e.id;
DROP TABLE run_events;
ALTER TABLE run_events_v14 RENAME TO run_events;
DELETE FROM agent_state_snapshot WHERE (run_id, step_ordinal) IN
    (SELECT run_id, step_ordinal FROM run_events WHERE node_name IS NOT NULL);
CREATE INDEX run_events_parked ON run_events (parked_at) WHERE parked_at IS NOT NULL;
-- The cursor: below the first unpublished event, or at the last event.
INSERT INTO agent_kv (key, value, updated_at) VALUES ('relay.embedded.cursor',
    CAST(coalesce((SELECT min(id) - 1 FROM run_events WHERE published_at IS NULL), (SELECT max(id) FROM run_events), 0) AS TEXT),
    strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;

-- +goose Down
DELETE FROM agent_kv WHERE key = 'relay.embedded.cursor';
INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at)
    SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM run_events WHERE node_name IS NOT NULL;
CREATE TABLE run_events_v12 (
    id            INTEGER PRIMARY KEY,
    run_id        TEXT    NOT NULL REFERENCES runs (run_id),
    sequence      INTEGER NOT NULL,
    event_id      TEXT    NOT NULL UNIQUE,
    kind          TEXT    NOT NULL,
    ts            TEXT    NOT NULL,
    checksum      TEXT    NOT NULL,
    envelope      TEXT    NOT NULL,
    step_ordinal  INTEGER,
    published_at  TEXT,
    parked_at     TEXT,
    parked_reason TEXT,
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
INSERT INTO run_events_v12 (id, run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal, published_at, parked_at, parked_reason)
    SELECT id, run_id, sequence, event_id, json_extract(envelope, '$.kind'), json_extract(envelope, '$.ts'), json_extract(envelope, '$.checksum'),
        envelope, step_ordinal, published_at, parked_at, parked_reason
    FROM run_events ORDER BY id;
DROP TABLE run_events;
ALTER TABLE run_events_v12 RENAME TO run_events;
CREATE INDEX run_events_unpublished ON run_events (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_events_parked ON run_events (parked_at) WHERE parked_at IS NOT NULL;
