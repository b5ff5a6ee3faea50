-- Each event carries its own publish state (issue 26 part 1, third step):
-- run_outbox is gone. Its row pointed at its event (00009) and held only
-- the publish state (published_at, parked_at, parked_reason), the subject
-- (a function of the run's tenant and id: snapshots.Subject) and an
-- AUTOINCREMENT id in commit order; a step commit wrote it into five
-- B-trees (the table, sqlite_sequence, run_outbox_unpublished_key,
-- run_outbox_run_idx, run_outbox_unpublished_order). Now the event row
-- holds the state and one partial index holds the unpublished events:
--   run_events_unpublished (run_id, sequence) WHERE published_at IS NULL:
--     Unpublished (ORDER BY run_id, sequence), the relay's marks
--     (run_id = ? AND sequence <= ? AND published_at IS NULL), the embedded
--     cursor's first read (then the rowid range), OutboxCounts, retention's
--     "held" test;
--   run_events_parked (parked_at) WHERE parked_at IS NOT NULL: ParkedEvents
--     (written only when an event is parked).
-- The embedded relay's cursor is run_events.id, the table's rowid (commit
-- order: one writer, each new rowid above every row's; the same column as
-- Postgres's identity). The subject is derived on read from runs.tenant_id.
--
-- Carried over: an event is unpublished when it had an unpublished outbox
-- row (a requeued sequence had a published row and a new unpublished one);
-- else published at its last outbox row's published_at (an event without
-- any outbox row is taken as published at the migration, never sent
-- again); parked_at/parked_reason come from its last outbox row.
-- Keep in step with ../postgres/00012_event_publish_state.sql.

-- +goose Up
-- run_events rebuilt with its id (the rowid, named: the cursor) and the
-- publish state; rows keep their rowids, so commit order is kept.
CREATE TABLE run_events_v12 (
    id            INTEGER PRIMARY KEY,           -- the rowid: commit order (no AUTOINCREMENT: no sqlite_sequence page per commit)
    run_id        TEXT    NOT NULL REFERENCES runs (run_id),
    sequence      INTEGER NOT NULL,
    event_id      TEXT    NOT NULL UNIQUE,       -- ULID; NATS Nats-Msg-Id
    kind          TEXT    NOT NULL,
    ts            TEXT    NOT NULL,
    checksum      TEXT    NOT NULL,
    envelope      TEXT    NOT NULL,              -- the whole event, JSON: its one copy
    step_ordinal  INTEGER,                       -- the snapshot committed with it, NULL if none
    published_at  TEXT,                          -- NULL: waiting for the relay
    parked_at     TEXT,
    parked_reason TEXT,
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
INSERT INTO run_events_v12 (id, run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal, published_at, parked_at, parked_reason)
    SELECT e.rowid, e.run_id, e.sequence, e.event_id, e.kind, e.ts, e.checksum, e.envelope, e.step_ordinal,
        CASE
            WHEN EXISTS (SELECT 1 FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence AND o.published_at IS NULL) THEN NULL
            ELSE coalesce((SELECT max(o.published_at) FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence),
                          strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')
        END,
        (SELECT o.parked_at FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence ORDER BY o.id DESC LIMIT 1),
        (SELECT o.parked_reason FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence ORDER BY o.id DESC LIMIT 1)
    FROM run_events e ORDER BY e.rowid;
DROP TABLE run_outbox;
DROP TABLE run_events;
ALTER TABLE run_events_v12 RENAME TO run_events;
CREATE INDEX run_events_unpublished ON run_events (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_events_parked ON run_events (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
CREATE TABLE run_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT    NOT NULL REFERENCES runs (run_id),
    sequence      INTEGER NOT NULL,
    event_id      TEXT    NOT NULL,
    subject       TEXT    NOT NULL,
    published_at  TEXT,
    parked_at     TEXT,
    parked_reason TEXT
);
INSERT INTO run_outbox (run_id, sequence, event_id, subject, published_at, parked_at, parked_reason)
    SELECT e.run_id, e.sequence, e.event_id, 'agent.events.' || r.tenant_id || '.' || e.run_id, e.published_at, e.parked_at, e.parked_reason
    FROM run_events e JOIN runs r ON r.run_id = e.run_id ORDER BY e.id;
CREATE UNIQUE INDEX run_outbox_unpublished_key ON run_outbox (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_outbox_run_idx ON run_outbox (run_id);
CREATE INDEX run_outbox_parked ON run_outbox (parked_at) WHERE parked_at IS NOT NULL;
CREATE INDEX run_outbox_unpublished_order ON run_outbox (id) WHERE published_at IS NULL;
CREATE TABLE run_events_v11 (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    sequence     INTEGER NOT NULL,
    event_id     TEXT    NOT NULL UNIQUE,
    kind         TEXT    NOT NULL,
    ts           TEXT    NOT NULL,
    checksum     TEXT    NOT NULL,
    envelope     TEXT    NOT NULL,
    step_ordinal INTEGER,
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
INSERT INTO run_events_v11 (rowid, run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal)
    SELECT id, run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal FROM run_events ORDER BY id;
DROP TABLE run_events;
ALTER TABLE run_events_v11 RENAME TO run_events;
