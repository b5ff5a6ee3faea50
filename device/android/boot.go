package android

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// BootSplit is the marker line between the two parts of BootProbe's output.
const BootSplit = "--SCREENGRAPH-BOOT-SPLIT--"

// BootProbe is EnsureDevice's boot readiness probe, one shell round trip:
// adb.BootCommand's three lines, the BootSplit line, then `service list`
// ("Found N services:" and "N\tname: [interface]" lines). A plain `;` list,
// which Android's mksh runs under adbd's `sh -c`.
const BootProbe = parse.BootCommand + "; echo " + BootSplit + "; service list"

// Boot is one answer of BootProbe: parse.ParseBootStatus's verdict and the
// adb transport it came over (0: unknown).
type Boot struct {
	parse.BootStatus
	TransportID int64
}

// BootStatus runs BootProbe and judges it with parse.ParseBootStatus: Ready only
// when the getprop part says booted and `service list` names BootServices.
// The exit status (`service list`'s) is not looked at; output without the
// marker counts as an empty service list. err is the shell's transport error.
func BootStatus(ctx context.Context, dev device.Device) (Boot, error) {
	r, err := dev.Shell(ctx, BootProbe)
	if err != nil {
		return Boot{}, err
	}
	bootOut, services, _ := strings.Cut(r.Stdout, BootSplit)
	b := Boot{BootStatus: parse.ParseBootStatus(bootOut, ""), TransportID: r.TransportID}
	switch {
	case !b.Ready:
	case strings.TrimSpace(services) == "":
		b.BootStatus = parse.BootStatus{Reason: "service list is empty"}
	default:
		b.BootStatus = parse.ParseBootStatus(bootOut, services)
	}
	return b, nil
}

// BootProofs remembers, per serial, the adb transport on which BootStatus
// last found the device Ready. A device that reboots, or whose connection
// to the adb server drops, comes back on a new transport (the server
// numbers each connection anew; adb devices -l transport_id), so while the
// transport is the same the services BootStatus saw are still up: Recheck
// asks the transport and sys.boot_completed in one small shell instead of
// BootProbe's getprops and `service list`. Safe for concurrent use; the
// zero value is empty.
type BootProofs struct {
	mu sync.Mutex
	m  map[string]int64
}

// Proven records that serial was found Ready on transport id (0, unknown,
// records nothing).
func (b *BootProofs) Proven(serial string, id int64) {
	if b == nil || id == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]int64{}
	}
	b.m[serial] = id
}

// Holds reports whether a proof is recorded for serial (Recheck will ask
// one small shell rather than nothing).
func (b *BootProofs) Holds(serial string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[serial] != 0
}

// Recheck reports whether dev is still Ready by the proof recorded for it:
// one shell `getprop sys.boot_completed` that answers "1" on the recorded
// transport. Otherwise the proof is dropped and why says what changed ("" when
// there was no proof).
func (b *BootProofs) Recheck(ctx context.Context, dev device.Device) (ok bool, why string) {
	if b == nil {
		return false, ""
	}
	serial := dev.Serial()
	b.mu.Lock()
	id := b.m[serial]
	b.mu.Unlock()
	if id == 0 {
		return false, ""
	}
	r, err := dev.Shell(ctx, "getprop sys.boot_completed")
	switch {
	case err != nil:
		why = "boot check: " + err.Error()
	case r.TransportID != id:
		why = fmt.Sprintf("adb transport %d, not %d: reconnected or rebooted", r.TransportID, id)
	case strings.TrimSpace(r.Stdout) != "1":
		why = fmt.Sprintf("sys.boot_completed is %q", strings.TrimSpace(r.Stdout))
	default:
		return true, ""
	}
	b.mu.Lock()
	delete(b.m, serial)
	b.mu.Unlock()
	return false, why
}

// Online reads dev's adb state (Device.State): usable when it is "device".
// Not usable with a nil error means a transient state (offline,
// authorizing, connecting, or device_offline from the port): ask again.
// Errors (*agent.Error): device_unauthorized for unauthorized / no
// permissions, device_offline (not retryable) for a state adb services
// cannot use, else the port's error classified. st is the state read.
func Online(ctx context.Context, dev device.Device) (st string, usable bool, err error) {
	st, err = dev.State(ctx)
	if err != nil {
		e := agent.Classify(err)
		if e.ID != agent.ErrDeviceOffline {
			return st, false, e
		}
		st = string(parse.StateOffline)
	}
	switch parse.DeviceState(st) {
	case parse.StateDevice:
		return st, true, nil
	case parse.StateUnauthorized, parse.StateNoPermissions:
		return st, false, &agent.Error{ID: agent.ErrDeviceUnauthorized, Msg: fmt.Sprintf("%s is %s: accept the RSA key prompt on the device (or fix udev permissions)", dev.Serial(), st)}
	case parse.StateOffline, parse.StateAuthorizing, parse.StateConnecting:
		return st, false, nil
	}
	return st, false, &agent.Error{ID: agent.ErrDeviceOffline, Msg: fmt.Sprintf("%s is in state %q, not usable by adb services", dev.Serial(), st)}
}
