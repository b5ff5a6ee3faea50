-- Snapshots stored in their key's order (issue 26 part 1, second step): on
-- SQLite (../sqlite/00010_snapshot_keyed.sql) agent_state_snapshot becomes
-- a WITHOUT ROWID table, each row stored once in its key's B-tree instead
-- of a rowid tree plus the key's index. Postgres has no clustered tables (a
-- heap and its indexes; CLUSTER is a one-off rewrite that inserts do not
-- keep up), so its storage is unchanged; this migration records the key
-- and keeps the two dialects' migration lists in step.

-- +goose Up
COMMENT ON TABLE agent_state_snapshot IS 'one row per committed step; key agent_state_snapshot_pkey (run_id, step_ordinal)';

-- +goose Down
COMMENT ON TABLE agent_state_snapshot IS NULL;
