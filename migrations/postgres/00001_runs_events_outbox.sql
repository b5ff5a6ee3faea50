-- ScreenGraph agent store, Postgres dialect (fleet mode).
-- Keep in step with ../sqlite/00001_runs_events_outbox.sql: same tables,
-- same columns, same constraints; only the column types differ.
-- Ids are ULIDs (ASCII): COLLATE "C" makes ORDER BY run_id byte order, the
-- order SQLite uses, whatever the database's locale.

-- +goose Up
CREATE TABLE runs (
    run_id         TEXT        COLLATE "C" PRIMARY KEY,
    tenant_id      TEXT        NOT NULL,
    project_id     TEXT        NOT NULL DEFAULT '',
    status         TEXT        NOT NULL,
    serial         TEXT        NOT NULL DEFAULT '',
    graph          TEXT        NOT NULL DEFAULT '',
    input          JSONB,
    policy_version INTEGER     NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX runs_status_idx ON runs (status);
CREATE INDEX runs_serial_idx ON runs (serial);
CREATE INDEX runs_created_idx ON runs (created_at);

CREATE TABLE run_events (
    run_id       TEXT    COLLATE "C" NOT NULL REFERENCES runs (run_id),
    sequence     BIGINT  NOT NULL,
    event_id     TEXT    NOT NULL UNIQUE,
    kind         TEXT    NOT NULL,
    ts           TEXT    NOT NULL,       -- the envelope's ts string, verbatim (it is checksummed context)
    payload      JSONB   NOT NULL,
    checksum     TEXT    NOT NULL,
    envelope     BYTEA   NOT NULL,       -- exact envelope bytes (JSONB would reorder keys)
    step_ordinal INTEGER,
    CONSTRAINT run_events_run_sequence_key UNIQUE (run_id, sequence)
);
CREATE INDEX run_events_step_idx ON run_events (run_id, step_ordinal);

CREATE TABLE run_outbox (
    id           BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       TEXT        COLLATE "C" NOT NULL REFERENCES runs (run_id),
    sequence     BIGINT      NOT NULL,
    event_id     TEXT        NOT NULL,
    subject      TEXT        NOT NULL,
    body         BYTEA       NOT NULL,
    published_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX run_outbox_unpublished_key ON run_outbox (run_id, sequence) WHERE published_at IS NULL;

CREATE TABLE agent_state_snapshot (
    run_id       TEXT        COLLATE "C" NOT NULL REFERENCES runs (run_id),
    step_ordinal INTEGER     NOT NULL,
    node_name    TEXT        NOT NULL,
    resume_token TEXT        NOT NULL,
    state        JSONB,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, step_ordinal)
);

CREATE TABLE run_control (
    id             TEXT        COLLATE "C" PRIMARY KEY,
    run_id         TEXT        COLLATE "C" NOT NULL REFERENCES runs (run_id),
    kind           TEXT        NOT NULL,
    policy_version INTEGER     NOT NULL DEFAULT 0,
    requested_at   TIMESTAMPTZ NOT NULL,
    taken_at       TIMESTAMPTZ
);
CREATE INDEX run_control_pending_idx ON run_control (run_id, id) WHERE taken_at IS NULL;

CREATE TABLE agent_kv (
    key        TEXT        PRIMARY KEY,
    value      BYTEA       NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE agent_kv;
DROP TABLE run_control;
DROP TABLE agent_state_snapshot;
DROP TABLE run_outbox;
DROP TABLE run_events;
DROP TABLE runs;
