-- Device leases keyed by the device's fleet-wide identity (agent.DeviceKey:
-- the adb server's machine identity + "/" + the serial), not the bare serial,
-- so every host's emulator-5554 is a device of its own. serial keeps the adb
-- serial (fences and renewals name it with the token). Rows of before are
-- keyed by their serial (a key without a host). Keep in step with
-- ../sqlite/00006_device_lease_key.sql.

-- +goose Up
ALTER TABLE device_leases ADD COLUMN device TEXT NOT NULL DEFAULT '';
UPDATE device_leases SET device = serial;
DROP INDEX device_leases_active_key;
-- At most one active lease per device, and per run: a run named by a bare
-- serial may go to any host's device of that serial, to one at a time.
CREATE UNIQUE INDEX device_leases_active_key ON device_leases (device) WHERE released_at IS NULL;
CREATE UNIQUE INDEX device_leases_active_run_key ON device_leases (run_id) WHERE released_at IS NULL;

-- +goose Down
DROP INDEX device_leases_active_run_key;
DROP INDEX device_leases_active_key;
CREATE UNIQUE INDEX device_leases_active_key ON device_leases (serial) WHERE released_at IS NULL;
ALTER TABLE device_leases DROP COLUMN device;
