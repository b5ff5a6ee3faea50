-- Snapshots stored in their key's order (issue 26 part 1, second step).
-- agent_state_snapshot was a rowid table plus its primary key's index
-- (run_id, step_ordinal): every step commit wrote the row into the rowid
-- tree and its key again into the index, 2.16 WAL pages per commit where
-- WITHOUT ROWID writes 1.56 (the row once, in its key's B-tree; the rest are
-- splits). Every query of the table reads it by that key (Snapshot,
-- LatestSnapshot, retention's delete by run_id), none by rowid. The key's
-- error text is unchanged ("UNIQUE constraint failed: agent_state_snapshot
-- ...", ErrSnapshotTaken). Rows are carried over as they are.
--
-- run_events stays a rowid table: WITHOUT ROWID on (run_id, sequence) was
-- measured to write MORE (4.07 pages per commit against 1.72 + 1.46 for the
-- rowid tree and its key): its rows (the envelope, about 400 bytes) fill a
-- page in three commits, and an index-ordered tree splits by rebalancing
-- its siblings where a rowid tree appending at its end adds one page
-- (docs/decisions.md, issue 26 part 1, second step).
--
-- Postgres has no clustered tables: ../postgres/00010_snapshot_keyed.sql
-- records the key and changes no storage.

-- +goose Up
CREATE TABLE agent_state_snapshot_keyed (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    step_ordinal INTEGER NOT NULL,
    node_name    TEXT    NOT NULL,
    resume_token TEXT    NOT NULL,
    state        TEXT,                           -- JSON, pointers to artifacts
    created_at   TEXT    NOT NULL,
    PRIMARY KEY (run_id, step_ordinal)
) WITHOUT ROWID;
INSERT INTO agent_state_snapshot_keyed (run_id, step_ordinal, node_name, resume_token, state, created_at)
    SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM agent_state_snapshot;
DROP TABLE agent_state_snapshot;
ALTER TABLE agent_state_snapshot_keyed RENAME TO agent_state_snapshot;

-- +goose Down
CREATE TABLE agent_state_snapshot_rowid (
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    step_ordinal INTEGER NOT NULL,
    node_name    TEXT    NOT NULL,
    resume_token TEXT    NOT NULL,
    state        TEXT,
    created_at   TEXT    NOT NULL,
    PRIMARY KEY (run_id, step_ordinal)
);
INSERT INTO agent_state_snapshot_rowid (run_id, step_ordinal, node_name, resume_token, state, created_at)
    SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM agent_state_snapshot;
DROP TABLE agent_state_snapshot;
ALTER TABLE agent_state_snapshot_rowid RENAME TO agent_state_snapshot;
