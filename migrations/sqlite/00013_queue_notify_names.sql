-- Keep in step with ../postgres/00013_queue_notify_names.sql: there the
-- queue's NOTIFYs name the device that changed. The embedded store wakes its
-- scheduler in-process and has no NOTIFY triggers: nothing to change here.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
