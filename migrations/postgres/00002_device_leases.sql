-- Device leases (agent.Leases): one row per acquisition, kept after release as
-- the lease history. Keep in step with ../sqlite/00002_device_leases.sql.

-- +goose Up
CREATE TABLE device_leases (
    fencing_token  BIGSERIAL   PRIMARY KEY, -- grows with every acquisition
    serial         TEXT        NOT NULL,
    holder         TEXT        NOT NULL,
    run_id         TEXT        NOT NULL,
    acquired_at    TIMESTAMPTZ NOT NULL,
    renewed_at     TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    released_at    TIMESTAMPTZ,
    release_reason TEXT
);
CREATE UNIQUE INDEX device_leases_active_key ON device_leases (serial) WHERE released_at IS NULL;
CREATE INDEX device_leases_run_idx ON device_leases (run_id);

-- +goose Down
DROP TABLE device_leases;
