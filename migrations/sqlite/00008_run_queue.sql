-- The scheduler's queue (agent.RunQueue). Keep in step with
-- ../postgres/00008_run_queue.sql (the embedded store wakes its scheduler
-- in-process, so it has no NOTIFY triggers).

-- +goose Up
CREATE INDEX runs_queue_idx ON runs (lower(replace(trim(serial), ' ', '_')), tenant_id, created_at, run_id) WHERE status = 'PENDING';
CREATE INDEX runs_queue_age_idx ON runs (lower(replace(trim(serial), ' ', '_')), created_at) WHERE status = 'PENDING';
CREATE INDEX runs_pending_idx ON runs (created_at, run_id) WHERE status = 'PENDING';
CREATE INDEX runs_started_idx ON runs (created_at, run_id) WHERE status IN ('RUNNING', 'PAUSED', 'CANCELED_REQUESTED');
CREATE INDEX runs_tenant_pending_idx ON runs (tenant_id) WHERE status = 'PENDING';
CREATE TABLE device_sightings (
    name    TEXT PRIMARY KEY,
    seen_at TEXT NOT NULL
);

-- +goose Down
DROP TABLE device_sightings;
DROP INDEX runs_tenant_pending_idx;
DROP INDEX runs_started_idx;
DROP INDEX runs_pending_idx;
DROP INDEX runs_queue_age_idx;
DROP INDEX runs_queue_idx;
