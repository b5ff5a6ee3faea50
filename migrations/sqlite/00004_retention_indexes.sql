-- Retention (agent.Pruner): the cleaner finds ended runs by status and last
-- change, and deletes a run's outbox and control rows by run id (the older
-- indexes cover only unpublished / untaken rows). Keep in step with
-- ../postgres/00004_retention_indexes.sql.

-- +goose Up
CREATE INDEX runs_status_updated_idx ON runs (status, updated_at);
CREATE INDEX run_outbox_run_idx ON run_outbox (run_id);
CREATE INDEX run_control_run_idx ON run_control (run_id);

-- +goose Down
DROP INDEX run_control_run_idx;
DROP INDEX run_outbox_run_idx;
DROP INDEX runs_status_updated_idx;
