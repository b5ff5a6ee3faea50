package service

import (
	"context"
	"strconv"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// Candidate is a device this daemon can drive, with what a run's device
// name (ensureDevice.deviceConfiguration.deviceName, agent.Run.Serial) may
// select it by. Config.Reachable lists them.
type Candidate struct {
	// Serial is the adb serial of a device in state "device", or the AVD
	// name of an AVD this host can boot that is not running (its lease is
	// then keyed by that name, as EnsureDevice boots it).
	Serial string
	// ID is a connected device's identity (DeviceIdentity.DeviceID): its
	// lease is keyed agent.DeviceKey(ID, Serial). "" for an AVD to boot,
	// keyed by the host id.
	ID string
	// AVD is the AVD name of a running emulator (ro.boot.qemu.avd_name).
	AVD string
	// Model, Product and Device are adb's (`adb devices -l`: model with
	// non-alphanumerics as '_', ro.product.name, ro.product.device).
	Model, Product, Device string
	// APILevel is ro.build.version.sdk (0: unknown).
	APILevel int
}

// Matches reports whether the device name selects c on the daemon whose
// adb server's host id is hostID. A name is, in this order of strictness:
//   - "<id>/<serial>": the device with exactly that serial whose identity
//     is id (c.ID: the id GET /v1/devices shows), or this host's (hostID)
//     device or AVD of that serial;
//   - an adb serial: the device of that serial on any host;
//   - an AVD name, a model, product or device name (case-insensitive,
//     spaces as '_', as adb writes models): any device of that name;
//   - "android-<API level>" (the SDK's platform name, e.g. android-34): any
//     device of that API level.
//
// A name several devices match is served by any free one of them.
func (c Candidate) Matches(name, hostID string) bool {
	if id, serial := agent.SplitDeviceKey(name); id != "" {
		return serial == c.Serial && (id == hostID || (c.ID != "" && id == c.ID))
	}
	if name == "" {
		return false
	}
	if name == c.Serial {
		return true
	}
	want := normName(name)
	for _, v := range []string{c.AVD, c.Model, c.Product, c.Device} {
		if v != "" && normName(v) == want {
			return true
		}
	}
	if lvl, ok := strings.CutPrefix(want, "android-"); ok && c.APILevel > 0 {
		return lvl == strconv.Itoa(c.APILevel)
	}
	return false
}

// normName is the comparison form of a device name: trimmed, lower case,
// spaces as '_' (adb writes "Pixel 7" as Pixel_7).
func normName(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), " ", "_"))
}

// devicesFor lists the devices (lease serials) that may serve a run naming
// name, in the order the scheduler tries them: the reachable devices it
// matches. Without a Reachable port, or with StartUnmatched when no
// reachable device matches, it is the name itself (the serial, for this
// host's or device's "<id>/<serial>"): the run is started here and
// EnsureDevice resolves the name (or boots the AVD), or fails
// device_not_found naming it. Another's "<id>/<serial>" is never served here.
func (s *Service) devicesFor(ctx context.Context, name string, cands []Candidate, reachable bool) []string {
	var out []string
	if reachable {
		for _, c := range cands {
			if c.Matches(name, s.cfg.HostID) {
				out = append(out, c.Serial)
			}
		}
		if len(out) > 0 || !s.cfg.StartUnmatched {
			return out
		}
	}
	if local, err := s.keys().Local(ctx, name); err == nil {
		return []string{local}
	}
	return nil
}

// checkDeviceName refuses, on a daemon that serves every run itself
// (StartUnmatched or no Reachable: one host), a device name of another
// host, which it would never serve.
func (s *Service) checkDeviceName(ctx context.Context, name string) error {
	if s.cfg.Reachable != nil && !s.cfg.StartUnmatched {
		return nil // a fleet: that host's daemon serves it
	}
	_, err := s.keys().Local(ctx, name)
	return err
}

// LocalName is the device name a process on host hostID drives for name:
// name itself, or the serial of "<host id>/<serial>" when the host is
// hostID. Another host's device is an *agent.Error invalid_request_error
// naming the JSON path ($.ensureDevice.deviceConfiguration.deviceName).
func LocalName(name, hostID string) (string, error) {
	host, serial := agent.SplitDeviceKey(name)
	switch {
	case host == "":
		return name, nil
	case host == hostID:
		return serial, nil
	}
	return "", agent.Errorf(agent.ErrInvalidRequest,
		"$.ensureDevice.deviceConfiguration.deviceName: %q names a device of host %s; this adb server is host %q (GET /v1/devices shows its devices' ids)", name, host, hostID)
}
