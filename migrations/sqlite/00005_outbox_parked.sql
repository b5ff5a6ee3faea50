-- Parked outbox rows: an event the relay can never publish (its message is
-- over the NATS server's max_payload, or the stream rejects it for good) is
-- parked instead of blocking the outbox: published_at is set (it leaves the
-- queue, so the runs behind it go on) and parked_at/parked_reason record
-- that it was not published, and why. Admins see them (GET
-- /v1/outbox/parked, /metrics). Keep in step with ../postgres/00005_outbox_parked.sql.

-- +goose Up
ALTER TABLE run_outbox ADD COLUMN parked_at TEXT;
ALTER TABLE run_outbox ADD COLUMN parked_reason TEXT;
CREATE INDEX run_outbox_parked ON run_outbox (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
DROP INDEX run_outbox_parked;
ALTER TABLE run_outbox DROP COLUMN parked_reason;
ALTER TABLE run_outbox DROP COLUMN parked_at;
