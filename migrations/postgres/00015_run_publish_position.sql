-- The fleet relay's marks as one small row per run (issue 26 part 3): a
-- run's events up to run_publish.published_seq are published, so the
-- claim's Finish writes one run_publish row per run per window where it
-- wrote a new version of every event row it published (envelope included,
-- and entries in its unique keys: published_at was in the two partial
-- indexes' predicates, so no mark could be a HOT update; 10 buffer hits
-- per event). An event is unpublished when its sequence is above its
-- run's published_seq AND its own published_at is NULL: published_at
-- stays for what is not a run's prefix (a single MarkPublished out of
-- order, a parked event), which is rare. committed_seq is the run's last
-- sequence, written by each step commit in its event batch (one small row;
-- the two partial indexes of every event it replaces were two index
-- entries per event), so the runs with events to publish are found by
-- run_publish_pending alone (the sweep, Unpublished, OutboxCounts), least
-- recently marked first (marked_at). Relays hold a run by a transaction's
-- advisory lock, not a row lock: a row lock on run_publish would hold the
-- run's step commits (their committed_seq) while a window is published.
-- The embedded store keeps its per-event state and cursor: see
-- ../sqlite/00015_run_publish_position.sql.

-- +goose Up
CREATE TABLE run_publish (
    run_id        TEXT        COLLATE "C" PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    published_seq BIGINT      NOT NULL DEFAULT 0,
    committed_seq BIGINT      NOT NULL DEFAULT 0,
    marked_at     TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
);
CREATE INDEX run_publish_pending ON run_publish (marked_at, run_id) WHERE committed_seq > published_seq;
-- Each run's position: below its first unpublished event (every event
-- below it is published or parked), else its last event; events above it
-- already published keep their published_at.
INSERT INTO run_publish (run_id, published_seq, committed_seq)
    SELECT run_id, coalesce(min(sequence) FILTER (WHERE published_at IS NULL) - 1, max(sequence)), max(sequence)
    FROM run_events GROUP BY run_id;
DROP INDEX run_events_unpublished_order;
DROP INDEX run_events_unpublished;

-- +goose Down
UPDATE run_events e SET published_at = now()
    FROM run_publish p WHERE p.run_id = e.run_id AND e.sequence <= p.published_seq AND e.published_at IS NULL;
DROP TABLE run_publish;
CREATE INDEX run_events_unpublished ON run_events (run_id, sequence) WHERE published_at IS NULL;
CREATE INDEX run_events_unpublished_order ON run_events (id) WHERE published_at IS NULL;
