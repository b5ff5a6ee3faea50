-- Keep in step with ../postgres/00015_run_publish_position.sql: there a
-- run's published events are a position per run (run_publish), so that the
-- fleet relays' marks write one small row per run, not a new version of
-- every event row. The embedded store has one relay, which reads by the
-- event's rowid cursor and marks its rows in the writer's own
-- transaction; its publish state stays on the event row: nothing to
-- change here.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
