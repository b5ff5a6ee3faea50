-- Evidence artifacts (issue 14): see ../sqlite/00007_artifacts.sql (same
-- table, Postgres types).

-- +goose Up
CREATE TABLE artifacts (
    artifact_id  TEXT        COLLATE "C" PRIMARY KEY,
    run_id       TEXT        COLLATE "C" NOT NULL REFERENCES runs (run_id),
    tenant_id    TEXT        NOT NULL,
    node         TEXT        NOT NULL,
    step_ordinal INTEGER     NOT NULL,
    kind         TEXT        NOT NULL,
    content_type TEXT        NOT NULL,
    bytes        BIGINT      NOT NULL,
    sha256       TEXT        COLLATE "C" NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX artifacts_run_idx ON artifacts (run_id, step_ordinal);
CREATE INDEX artifacts_sha256_idx ON artifacts (sha256);

-- +goose Down
DROP TABLE artifacts;
