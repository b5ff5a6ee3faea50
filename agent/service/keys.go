package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
)

// DeviceIdentity reads a connected device's fleet identity from the device
// itself (Config.Identity, OneShot.Identity). adbdevice.Reachable is the
// daemon's.
type DeviceIdentity interface {
	// DeviceID returns the identity of the device with adb serial serial in
	// state "device": 12 hex digits hashing what the device says of itself
	// (ro.serialno, ro.boot.serialno, its android_id, an emulator's AVD
	// name), so every daemon that reaches it, from any host and through
	// any spelling of its adb server's address, computes the same one.
	// Errors: ErrNoDevice when the adb server has no such device in state
	// "device"; the adb server's or the device's (not answering yet), after
	// which the caller tries again later.
	DeviceID(ctx context.Context, serial string) (string, error)
}

// ErrNoDevice: no device of that serial is in state "device" (the name is
// an AVD to boot, or a device gone or offline).
var ErrNoDevice = errors.New("no device of that serial in state device")

// Keys makes the lease keys (agent.DeviceKey) of the device names a process
// drives (an adb serial, or the name of an AVD EnsureDevice boots).
type Keys struct {
	// HostID is the adb server's machine (device.HostID): the first part
	// of the key of a name no connected device has (an AVD this host
	// boots), and of every name when Identity is nil.
	HostID string
	// Identity reads a connected device's identity; nil keys every name
	// by HostID (tests; a process with no adb server to ask).
	Identity DeviceIdentity
}

// Key is the lease key of the local device name: agent.DeviceKey(the
// device's identity, serial) for a connected device, agent.DeviceKey(HostID,
// name) for a name no connected device has. Errors: Identity's other than
// ErrNoDevice (adb down, a device that does not answer yet); the caller
// tries again later rather than key a device another way than the other
// daemons that reach it do.
func (k Keys) Key(ctx context.Context, name string) (string, error) {
	if k.Identity == nil {
		return agent.DeviceKey(k.HostID, name), nil
	}
	id, err := k.Identity.DeviceID(ctx, name)
	switch {
	case errors.Is(err, ErrNoDevice):
		return agent.DeviceKey(k.HostID, name), nil
	case err != nil:
		return "", fmt.Errorf("device %s: identity: %w", name, err)
	}
	return agent.DeviceKey(id, name), nil
}

// Local is the device name this process drives for name: name itself, or
// the serial of "<id>/<serial>" when id is this process's host id or the
// identity of its connected device of that serial (the id GET /v1/devices
// shows). Another's is an *agent.Error invalid_request_error naming the
// JSON path ($.ensureDevice.deviceConfiguration.deviceName).
func (k Keys) Local(ctx context.Context, name string) (string, error) {
	id, serial := agent.SplitDeviceKey(name)
	if id == "" || id == k.HostID {
		return LocalName(name, k.HostID)
	}
	if k.Identity != nil {
		if got, err := k.Identity.DeviceID(ctx, serial); err == nil && got == id {
			return serial, nil
		}
	}
	return "", agent.Errorf(agent.ErrInvalidRequest,
		"$.ensureDevice.deviceConfiguration.deviceName: %q names a device this adb server (host %q) does not have connected (GET /v1/devices shows its devices' ids)", name, k.HostID)
}

// keys is the service's Keys.
func (s *Service) keys() Keys { return Keys{HostID: s.cfg.HostID, Identity: s.cfg.Identity} }

// leaseKey is the lease key of device (a serial or AVD name the scheduler
// chose from cands): a listed connected device's by its identity, an AVD's
// by the host id, anything else through Keys.Key.
func (s *Service) leaseKey(ctx context.Context, device string, cands []Candidate) (string, error) {
	for _, c := range cands {
		if c.Serial != device {
			continue
		}
		if c.ID != "" {
			return agent.DeviceKey(c.ID, device), nil
		}
		if c.AVD == device {
			return agent.DeviceKey(s.cfg.HostID, device), nil // an AVD to boot
		}
	}
	return s.keys().Key(ctx, device)
}
