-- The scheduler's queue (agent.RunQueue): PENDING runs are read per device
-- name in its normal form (trimmed, spaces as '_', lower case), per tenant,
-- oldest first, through a partial index of the PENDING rows alone; the
-- oldest PENDING runs of any name through another, and the started,
-- unfinished runs through a third (a queue of any length reads none of them). device_sightings keeps,
-- per device name, when a daemon of the fleet last reached a device of that
-- name (a run whose name none reached for --pending-timeout fails
-- device_not_found). New runs and released leases NOTIFY the queue channel,
-- so every daemon's scheduler wakes at once instead of polling.
-- Keep in step with ../sqlite/00008_run_queue.sql.

-- +goose Up
CREATE INDEX runs_queue_idx ON runs ((lower(replace(trim(serial), ' ', '_'))), tenant_id, created_at, run_id) WHERE status = 'PENDING';
CREATE INDEX runs_queue_age_idx ON runs ((lower(replace(trim(serial), ' ', '_'))), created_at) WHERE status = 'PENDING';
CREATE INDEX runs_pending_idx ON runs (created_at, run_id) WHERE status = 'PENDING';
CREATE INDEX runs_started_idx ON runs (created_at, run_id) WHERE status IN ('RUNNING', 'PAUSED', 'CANCELED_REQUESTED');
CREATE INDEX runs_tenant_pending_idx ON runs (tenant_id) WHERE status = 'PENDING';
CREATE TABLE device_sightings (
    name    TEXT        COLLATE "C" PRIMARY KEY,
    seen_at TIMESTAMPTZ NOT NULL
);
-- +goose StatementBegin
CREATE FUNCTION screengraph_queue_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('screengraph_queue', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER runs_queue_notify AFTER INSERT ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION screengraph_queue_notify();
CREATE TRIGGER device_leases_queue_notify AFTER UPDATE OF released_at ON device_leases
    FOR EACH STATEMENT EXECUTE FUNCTION screengraph_queue_notify();

-- +goose Down
DROP TRIGGER device_leases_queue_notify ON device_leases;
DROP TRIGGER runs_queue_notify ON runs;
DROP FUNCTION screengraph_queue_notify();
DROP TABLE device_sightings;
DROP INDEX runs_tenant_pending_idx;
DROP INDEX runs_started_idx;
DROP INDEX runs_pending_idx;
DROP INDEX runs_queue_age_idx;
DROP INDEX runs_queue_idx;
