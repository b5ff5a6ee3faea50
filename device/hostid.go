package device

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
)

// machineIDFiles are where systemd and D-Bus keep the machine id (32 hex
// digits, random at install): machine-id(5).
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// ErrNoHostID: the adb server's machine cannot be identified.
var ErrNoHostID = errors.New("no identity for the adb server's machine")

// HostID identifies the machine of the adb server at addr (host:port), for
// agent.DeviceKey: 12 hex digits of a SHA-256 over
//   - for an adb server on a loopback address: this machine's id
//     (machine-id(5)) and the port: the daemons of one machine that talk to one
//     adb server (127.0.0.1:5037, localhost:5037 or [::1]:5037) agree, two
//     machines' local adb servers (each host's emulator-5554) differ, and so
//     do two adb servers of one machine on two ports;
//   - for a remote adb server: its resolved addresses and the port, which
//     every daemon reaching it by that address shares.
//
// The machine id is hashed, never shown: machine-id(5) asks that it not be
// exposed. Stable across restarts of the daemon and of the adb server.
// Errors: addr not host:port, a name that does not resolve, no machine id
// (ErrNoHostID).
func HostID(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("adb server address %q: %w", addr, err)
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", fmt.Errorf("adb server address %q: %w", addr, err)
	}
	local := len(ips) > 0
	var addrs []string
	for _, ip := range ips {
		local = local && ip.IP.IsLoopback()
		addrs = append(addrs, ip.IP.String())
	}
	var seed string
	if local {
		mid, err := machineID()
		if err != nil {
			return "", err
		}
		seed = "local\x00" + mid + "\x00" + port
	} else {
		slices.Sort(addrs)
		seed = "remote\x00" + strings.Join(addrs, ",") + "\x00" + port
	}
	sum := sha256.Sum256([]byte("screengraph adb host\x00" + seed))
	return hex.EncodeToString(sum[:6]), nil
}

// hostname is os.Hostname, a variable so tests can take it away.
var hostname = os.Hostname

// MachineIDEnv names the environment variable that, when set, is this
// machine's id instead of machine-id(5): for containers that share one (an
// image built with it) or have none, and for tests that play several hosts
// on one machine. Any non-empty value; it is hashed, never shown.
const MachineIDEnv = "SCREENGRAPH_MACHINE_ID"

// machineID is $SCREENGRAPH_MACHINE_ID, else the machine-id(5), or, where there is none (a container image
// built without systemd or D-Bus usually has neither file), the kernel's
// hostname, which container runtimes set to the container's own id. A
// hostname that every machine shares ("localhost", empty) is no identity.
func machineID() (string, error) {
	if id := strings.TrimSpace(os.Getenv(MachineIDEnv)); id != "" {
		return "env\x00" + id, nil
	}
	for _, f := range machineIDFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		id := strings.TrimSpace(string(b))
		if len(id) == 32 && strings.Trim(id, "0123456789abcdef") == "" {
			return id, nil
		}
	}
	if h, err := hostname(); err == nil {
		h = strings.ToLower(strings.TrimSpace(h))
		if h != "" && h != "localhost" && h != "localhost.localdomain" {
			return "hostname\x00" + h, nil
		}
	}
	return "", fmt.Errorf("%w: no machine id in %s and no distinctive hostname", ErrNoHostID, strings.Join(machineIDFiles, " or "))
}
