-- The relay reads the outbox's unpublished rows in id order (the fleet's
-- claim of run heads, snapshots/postgres/outbox_claim.go; the embedded
-- relay's pages, snapshots/sqlite): WHERE published_at IS NULL ORDER BY
-- id. Without an index of those rows alone that read walks the primary key
-- through every published row kept until retention, O(outbox) per claim:
-- BenchmarkFleetControlPlane measured 30 ms per claim after 17,000 events
-- (issue 26 part 4). Keep in step with ../postgres/00010_outbox_unpublished_order.sql.

-- +goose Up
CREATE INDEX run_outbox_unpublished_order ON run_outbox (id) WHERE published_at IS NULL;

-- +goose Down
DROP INDEX run_outbox_unpublished_order;
