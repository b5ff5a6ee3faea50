-- The queue's NOTIFYs (00008) name what changed, so a daemon wakes only for
-- the device names it reaches (issue 26 part 4: with an empty payload every
-- new run and every released lease woke every daemon's scheduler, and each
-- woken daemon read the queue for all its devices' names; at 1,000 daemons
-- that herd, not the work, was the control plane's cost). The payload is a
-- device name in the queue's normal form (agent.RunQueue: trimmed, spaces as
-- '_', lower case): a new run's name (runs.serial), or a released lease's
-- device key (device_leases.device, its serial before 00006's key). An empty
-- payload still wakes every daemon. One NOTIFY per row; Postgres sends one
-- of equal payloads per transaction. Keep in step with
-- ../sqlite/00013_queue_notify_names.sql (no triggers there).

-- +goose Up
DROP TRIGGER runs_queue_notify ON runs;
DROP TRIGGER device_leases_queue_notify ON device_leases;
DROP FUNCTION screengraph_queue_notify();
-- +goose StatementBegin
CREATE FUNCTION screengraph_queue_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('screengraph_queue', lower(replace(trim(NEW.serial), ' ', '_')));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION screengraph_queue_notify_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('screengraph_queue', lower(replace(trim(coalesce(nullif(NEW.device, ''), NEW.serial)), ' ', '_')));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER runs_queue_notify AFTER INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION screengraph_queue_notify_run();
CREATE TRIGGER device_leases_queue_notify AFTER UPDATE OF released_at ON device_leases
    FOR EACH ROW WHEN (OLD.released_at IS NULL AND NEW.released_at IS NOT NULL)
    EXECUTE FUNCTION screengraph_queue_notify_release();

-- +goose Down
DROP TRIGGER device_leases_queue_notify ON device_leases;
DROP TRIGGER runs_queue_notify ON runs;
DROP FUNCTION screengraph_queue_notify_release();
DROP FUNCTION screengraph_queue_notify_run();
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
