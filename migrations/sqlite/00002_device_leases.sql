-- Device leases (agent.Leases): one row per acquisition, kept after release as
-- the lease history. Keep in step with ../postgres/00002_device_leases.sql.

-- +goose Up
CREATE TABLE device_leases (
    fencing_token  INTEGER PRIMARY KEY AUTOINCREMENT, -- grows with every acquisition
    serial         TEXT    NOT NULL,
    holder         TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    acquired_at    TEXT    NOT NULL,
    renewed_at     TEXT    NOT NULL,
    expires_at     TEXT    NOT NULL,
    released_at    TEXT,
    release_reason TEXT
);
-- At most one active lease per device.
CREATE UNIQUE INDEX device_leases_active_key ON device_leases (serial) WHERE released_at IS NULL;
CREATE INDEX device_leases_run_idx ON device_leases (run_id);

-- +goose Down
DROP TABLE device_leases;
