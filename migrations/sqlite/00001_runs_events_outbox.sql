-- ScreenGraph agent store, SQLite dialect (the embedded default).
-- Keep in step with ../postgres/00001_runs_events_outbox.sql: same tables,
-- same columns, same constraints; only the column types differ
-- (TEXT holding RFC 3339 UTC / JSON here, TIMESTAMPTZ / JSONB there).
-- Times are stored as fixed-width RFC 3339 with microseconds
-- ("2006-01-02T15:04:05.000000Z") so text order is time order.

-- +goose Up
CREATE TABLE runs (
    run_id         TEXT    PRIMARY KEY,          -- ULID, 26 chars
    tenant_id      TEXT    NOT NULL,
    project_id     TEXT    NOT NULL DEFAULT '',
    status         TEXT    NOT NULL,             -- agent.RunStatus
    serial         TEXT    NOT NULL DEFAULT '',  -- adb serial the run holds
    graph          TEXT    NOT NULL DEFAULT '',
    input          TEXT,                         -- JSON, the run request
    policy_version INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL
);
CREATE INDEX runs_status_idx ON runs (status);
CREATE INDEX runs_serial_idx ON runs (serial);
CREATE INDEX runs_created_idx ON runs (created_at);

CREATE TABLE run_events (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    sequence     INTEGER NOT NULL,
    event_id     TEXT    NOT NULL UNIQUE,        -- ULID; NATS Nats-Msg-Id
    kind         TEXT    NOT NULL,
    ts           TEXT    NOT NULL,
    payload      TEXT    NOT NULL,               -- JSON
    checksum     TEXT    NOT NULL,
    envelope     TEXT    NOT NULL,               -- the whole event, JSON
    step_ordinal INTEGER,                        -- the snapshot committed with it, NULL if none
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
CREATE INDEX run_events_step_idx ON run_events (run_id, step_ordinal);

-- One row per event to publish. A surrogate id lets a published row be
-- enqueued again; while unpublished, (run_id, sequence) is unique.
CREATE TABLE run_outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    sequence     INTEGER NOT NULL,
    event_id     TEXT    NOT NULL,
    subject      TEXT    NOT NULL,
    body         BLOB    NOT NULL,
    published_at TEXT
);
CREATE UNIQUE INDEX run_outbox_unpublished_key ON run_outbox (run_id, sequence) WHERE published_at IS NULL;

CREATE TABLE agent_state_snapshot (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    step_ordinal INTEGER NOT NULL,
    node_name    TEXT    NOT NULL,
    resume_token TEXT    NOT NULL,
    state        TEXT,                           -- JSON, pointers to artifacts
    created_at   TEXT    NOT NULL,
    PRIMARY KEY (run_id, step_ordinal)
);

CREATE TABLE run_control (
    id             TEXT    PRIMARY KEY,          -- ULID, monotonic per writer: request order
    run_id         TEXT    NOT NULL REFERENCES runs (run_id),
    kind           TEXT    NOT NULL,
    policy_version INTEGER NOT NULL DEFAULT 0,
    requested_at   TEXT    NOT NULL,
    taken_at       TEXT
);
CREATE INDEX run_control_pending_idx ON run_control (run_id, id) WHERE taken_at IS NULL;

CREATE TABLE agent_kv (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    updated_at TEXT NOT NULL
);

-- +goose Down
DROP TABLE agent_kv;
DROP TABLE run_control;
DROP TABLE agent_state_snapshot;
DROP TABLE run_outbox;
DROP TABLE run_events;
DROP TABLE runs;
