-- Each event carries its own publish state (issue 26 part 1, third step):
-- run_outbox is gone; see ../sqlite/00012_event_publish_state.sql. On
-- Postgres the event gets an id (an identity, commit order within a
-- writer) that orders the fleet claim's heads, oldest first, through
-- run_events_unpublished_order (what 00011's index did for run_outbox). A
-- step commit's event insert writes the heap and four index entries
-- (run_events_run_sequence_key, run_events_event_id_key and the two partial
-- indexes of unpublished events) where it wrote two heaps and six entries.
-- The relay's mark updates the event row (a new row version, the envelope
-- with it) where it updated the outbox row.

-- +goose Up
ALTER TABLE run_events ADD COLUMN id BIGINT GENERATED ALWAYS AS IDENTITY,
    ADD COLUMN published_at TIMESTAMPTZ,
    ADD COLUMN parked_at TIMESTAMPTZ,
    ADD COLUMN parked_reason TEXT;
UPDATE run_events e SET
    published_at = CASE
        WHEN EXISTS (SELECT 1 FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence AND o.published_at IS NULL) THEN NULL
        ELSE coalesce((SELECT max(o.published_at) FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence), now())
    END,
    parked_at = (SELECT o.parked_at FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence ORDER BY o.id DESC LIMIT 1),
    parked_reason = (SELECT o.parked_reason FROM run_outbox o WHERE o.run_id = e.run_id AND o.sequence = e.sequence ORDER BY o.id DESC LIMIT 1);
DROP TABLE run_outbox;
CREATE INDEX run_events_unpublished ON run_events (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_events_unpublished_order ON run_events (id) WHERE published_at IS NULL;
CREATE INDEX run_events_parked ON run_events (parked_at) WHERE parked_at IS NOT NULL;

-- +goose Down
CREATE TABLE run_outbox (
    id            BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        TEXT        COLLATE "C" NOT NULL REFERENCES runs (run_id),
    sequence      BIGINT      NOT NULL,
    event_id      TEXT        NOT NULL,
    subject       TEXT        NOT NULL,
    published_at  TIMESTAMPTZ,
    parked_at     TIMESTAMPTZ,
    parked_reason TEXT
);
INSERT INTO run_outbox (run_id, sequence, event_id, subject, published_at, parked_at, parked_reason)
    SELECT e.run_id, e.sequence, e.event_id, 'agent.events.' || r.tenant_id || '.' || e.run_id, e.published_at, e.parked_at, e.parked_reason
    FROM run_events e JOIN runs r ON r.run_id = e.run_id ORDER BY e.id;
CREATE UNIQUE INDEX run_outbox_unpublished_key ON run_outbox (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_outbox_run_idx ON run_outbox (run_id);
CREATE INDEX run_outbox_parked ON run_outbox (parked_at) WHERE parked_at IS NOT NULL;
CREATE INDEX run_outbox_unpublished_order ON run_outbox (id) WHERE published_at IS NULL;
DROP INDEX run_events_parked;
DROP INDEX run_events_unpublished_order;
DROP INDEX run_events_unpublished;
ALTER TABLE run_events DROP COLUMN parked_reason, DROP COLUMN parked_at, DROP COLUMN published_at, DROP COLUMN id;
