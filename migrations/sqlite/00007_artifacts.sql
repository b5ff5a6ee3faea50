-- Evidence artifacts (issue 14): one row per screenshot, UI hierarchy,
-- logcat or ANR traces a run's step kept. The bytes are a blob named by
-- sha256 in the blob store (the data dir, or a bucket in a fleet), written
-- before the row commits with its step, so a row never names a missing
-- blob. Rows go with their run (PruneRuns); blobs no row names go with the
-- retention cleaner. Keep in step with ../postgres/00007_artifacts.sql.

-- +goose Up
CREATE TABLE artifacts (
    artifact_id  TEXT    PRIMARY KEY,               -- ULID
    run_id       TEXT    NOT NULL REFERENCES runs (run_id),
    tenant_id    TEXT    NOT NULL,
    node         TEXT    NOT NULL,
    step_ordinal INTEGER NOT NULL,
    kind         TEXT    NOT NULL,                  -- screenshot, ui_hierarchy, logcat, anr_traces
    content_type TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    sha256       TEXT    NOT NULL,                  -- lowercase hex, the blob's name
    created_at   TEXT    NOT NULL
);
CREATE INDEX artifacts_run_idx ON artifacts (run_id, step_ordinal);
CREATE INDEX artifacts_sha256_idx ON artifacts (sha256);

-- +goose Down
DROP TABLE artifacts;
