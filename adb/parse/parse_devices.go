package parse

import (
	"sort"
	"strconv"
	"strings"
)

// DeviceState is a device's state as the adb server names it
// (atransport::connection_state_name, adb 1.0.41 / platform-tools 29).
type DeviceState string

// States the server reports. A fresh server briefly shows "offline", "authorizing"
// or "connecting" for a device that is on its way to "device".
const (
	StateDevice        DeviceState = "device"
	StateOffline       DeviceState = "offline"
	StateUnauthorized  DeviceState = "unauthorized"
	StateAuthorizing   DeviceState = "authorizing"
	StateConnecting    DeviceState = "connecting"
	StateBootloader    DeviceState = "bootloader"
	StateRecovery      DeviceState = "recovery"
	StateRescue        DeviceState = "rescue"
	StateSideload      DeviceState = "sideload"
	StateHost          DeviceState = "host"
	StateNoPermissions DeviceState = "no permissions"
	StateUnknown       DeviceState = "unknown"
)

// Online reports whether services (shell, sync, install) can be opened.
func (s DeviceState) Online() bool { return s == StateDevice }

// Transient reports states that become something else by themselves shortly.
func (s DeviceState) Transient() bool {
	return s == StateOffline || s == StateAuthorizing || s == StateConnecting
}

// DeviceInfo is one line of `adb devices -l` / host:devices-l / host:track-devices-l.
type DeviceInfo struct {
	Serial      string
	State       DeviceState
	DevPath     string // "usb:1-1" for USB devices
	Product     string // ro.product.name
	Model       string // ro.product.model, non-alphanumerics replaced by '_'
	Device      string // ro.product.device
	TransportID int64
}

// longKeys are the attribute prefixes append_transport writes after the state.
var longKeys = []string{"usb:", "product:", "model:", "device:", "transport_id:"}

// ParseDevicesLong parses the payload of host:devices-l (one device per line:
// "%-22s %s" serial and state, then " usb:…", " product:…", " model:…",
// " device:…", " transport_id:N"; adb transport.cpp append_transport). The state
// may contain spaces ("no permissions (…); see […]"), so attributes are taken from
// the end of the line. Lines without a state are skipped; the order is kept.
func ParseDevicesLong(s string) []DeviceInfo {
	var out []DeviceInfo
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		d := DeviceInfo{Serial: f[0]}
		end := len(f)
		for end > 2 {
			tok := f[end-1]
			key := ""
			for _, k := range longKeys {
				if strings.HasPrefix(tok, k) {
					key = k
					break
				}
			}
			if key == "" {
				break
			}
			v := tok[len(key):]
			switch key {
			case "usb:":
				d.DevPath = tok
			case "product:":
				d.Product = v
			case "model:":
				d.Model = v
			case "device:":
				d.Device = v
			case "transport_id:":
				d.TransportID, _ = strconv.ParseInt(v, 10, 64)
			}
			end--
		}
		d.State = normalizeState(strings.Join(f[1:end], " "))
		out = append(out, d)
	}
	return out
}

// ParseDevices parses the payload of host:devices / host:track-devices
// ("serial\tstate\n" per device).
func ParseDevices(s string) []DeviceInfo {
	var out []DeviceInfo
	for _, line := range strings.Split(s, "\n") {
		serial, state, ok := strings.Cut(strings.TrimRight(line, "\r"), "\t")
		if !ok || serial == "" {
			continue
		}
		out = append(out, DeviceInfo{Serial: serial, State: normalizeState(state)})
	}
	return out
}

func normalizeState(s string) DeviceState {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, string(StateNoPermissions)) {
		return StateNoPermissions
	}
	if s == "" {
		return StateUnknown
	}
	return DeviceState(s)
}

// Features is a device's adb feature set (host-serial:S:features, comma separated).
type Features map[string]bool

// ParseFeatures parses "shell_v2,cmd,stat_v2".
func ParseFeatures(s string) Features {
	f := Features{}
	for _, x := range strings.Split(strings.TrimSpace(s), ",") {
		if x = strings.TrimSpace(x); x != "" {
			f[x] = true
		}
	}
	return f
}

// Has reports whether the device advertises feature name.
func (f Features) Has(name string) bool { return f[name] }

// String lists the features sorted, comma separated.
func (f Features) String() string {
	names := make([]string, 0, len(f))
	for k := range f {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
