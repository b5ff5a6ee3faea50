package adbdevice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// ReconnectGrace bounds how long an ADBDevice operation, and Resolver, wait
// for a serial the adb server does not list (adb's "device 'X' not found") to
// be listed again before answering device_not_found: an adb server restart
// forgets every device until each registers again (emulators re-register,
// USB devices re-enumerate: about a second on a quiet host), and a run must
// ride through that as `adb wait-for-device` would.
const ReconnectGrace = 10 * time.Second

// absentPoll is how often the wait asks host:devices-l again.
const absentPoll = 200 * time.Millisecond

// ADBDevice is device.Device over an adb server (host protocol, package adb) for one
// serial. Every error it returns is an *agent.Error (see AgentError).
type ADBDevice struct {
	client *adb.Client
	serial string
	grace  time.Duration
	// onAbsent, when set (tests), is called once a wait for the serial begins.
	onAbsent func()
}

var _ device.Device = (*ADBDevice)(nil)

// NewADBDevice returns the device serial on the adb server c talks to. Its
// operations wait up to ReconnectGrace for a serial the server does not list.
func NewADBDevice(c *adb.Client, serial string) *ADBDevice {
	return &ADBDevice{client: c, serial: serial, grace: ReconnectGrace}
}

// WithReconnectGrace sets how long operations wait for the serial to be
// listed again (0: answer device_not_found at once) and returns d.
func (d *ADBDevice) WithReconnectGrace(g time.Duration) *ADBDevice {
	d.grace = g
	return d
}

// rideAbsence runs op; when the adb server answered that it does not know the
// serial (nothing reached the device), it waits for the serial to be listed
// again, within the grace and ctx, and runs op once more.
func (d *ADBDevice) rideAbsence(ctx context.Context, op func() error) error {
	err := op()
	if adb.IDOf(err) != adb.IDDeviceNotFound || d.grace <= 0 {
		return err
	}
	if d.onAbsent != nil {
		d.onAbsent()
	}
	if !waitListed(ctx, d.grace, func() bool {
		infos, lerr := d.client.Devices(ctx)
		if lerr != nil {
			return false
		}
		for _, in := range infos {
			if in.Serial == d.serial {
				return true
			}
		}
		return false
	}) {
		return err
	}
	return op()
}

// waitListed polls listed every absentPoll until it says true (true), or
// grace or ctx ends (false).
func waitListed(ctx context.Context, grace time.Duration, listed func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	t := time.NewTicker(absentPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if listed() {
				return true
			}
		}
	}
}

// Serial is the adb serial.
func (d *ADBDevice) Serial() string { return d.serial }

// State returns the adb server's state word for the serial: host-serial:S:get-state
// first ("device", "bootloader", …); when the server refuses it (it answers FAIL
// for offline, unauthorized, authorizing devices) the state comes from
// host:devices-l. A serial in neither is device_not_found.
func (d *ADBDevice) State(ctx context.Context) (string, error) {
	st, err := d.client.GetState(ctx, d.serial)
	if err == nil {
		return string(st), nil
	}
	id := adb.IDOf(err)
	if id != adb.IDDeviceOffline && id != adb.IDDeviceUnauthorized && id != adb.IDDeviceNotFound {
		return "", AgentError(err)
	}
	infos, lerr := d.client.Devices(ctx)
	if lerr != nil {
		return "", AgentError(lerr)
	}
	for _, in := range infos {
		if in.Serial == d.serial {
			return string(in.State), nil
		}
	}
	return "", &agent.Error{ID: agent.ErrDeviceNotFound, Msg: fmt.Sprintf("adb server does not know %s", d.serial), Err: err}
}

// Shell runs cmd through the adb shell v2 protocol (separate stderr, exit code;
// shell: with an exit marker on devices without shell_v2).
func (d *ADBDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	var r adb.ShellResult
	if fn := device.StartedHook(ctx); fn != nil {
		ctx = adb.WithOpened(ctx, fn)
	}
	err := d.rideAbsence(ctx, func() (err error) {
		r, err = d.client.Shell(ctx, d.serial, cmd)
		return err
	})
	if err != nil {
		return device.ShellResult{}, AgentError(err)
	}
	return device.ShellResult{Stdout: string(r.Stdout), Stderr: string(r.Stderr), ExitCode: r.ExitCode, TransportID: r.TransportID}, nil
}

// Install installs the local APK (streamed install with feature cmd, else push
// + pm install), reporting bytes sent through opt.Progress. Errors:
// install_failed with Code INSTALL_FAILED_*/INSTALL_PARSE_FAILED_*,
// version_downgrade for INSTALL_FAILED_VERSION_DOWNGRADE, and the transport ids.
func (d *ADBDevice) Install(ctx context.Context, localAPK string, opt device.InstallOptions) error {
	o := adb.InstallOptions{Replace: opt.Replace, AllowDowngrade: opt.AllowDowngrade,
		AllowTestOnly: opt.AllowTestOnly, GrantAll: opt.GrantAll}
	if opt.Progress != nil {
		o.Progress = adb.Progress(opt.Progress)
	}
	return AgentError(d.rideAbsence(ctx, func() error { return d.client.Install(ctx, d.serial, localAPK, o) }))
}

// Uninstall removes pkg and its data.
func (d *ADBDevice) Uninstall(ctx context.Context, pkg string) error {
	return AgentError(d.rideAbsence(ctx, func() error { return d.client.Uninstall(ctx, d.serial, pkg, false) }))
}

// Pull copies the device file remote into w over the sync protocol.
func (d *ADBDevice) Pull(ctx context.Context, remote string, w io.Writer) (int64, error) {
	var n int64
	// Only "not found" is run again, and the server says it before any
	// byte of the file reaches w.
	err := d.rideAbsence(ctx, func() (err error) {
		n, err = d.client.Pull(ctx, d.serial, remote, w, nil)
		return err
	})
	return n, AgentError(err)
}

// AgentError classifies an error of package adb into the agent's ids, once, at
// this boundary: device_not_found, device_offline (retryable),
// device_unauthorized, timeout (retryable), interrupted (canceled),
// network_error (retryable), install_failed with Code, version_downgrade
// (Code INSTALL_FAILED_VERSION_DOWNGRADE), activity_not_found,
// permission_error, process_error; anything else internal_error. Retryability
// is the agent's default for the id (unknown = not retryable). nil stays nil;
// an *agent.Error passes through.
func AgentError(err error) error {
	if err == nil {
		return nil
	}
	var ae *agent.Error
	if errors.As(err, &ae) {
		return ae
	}
	var e *adb.Error
	if !errors.As(err, &e) {
		return agent.Classify(err)
	}
	id, ok := adbErrorIDs[e.ID]
	if !ok {
		id = agent.ErrInternal
	}
	if e.ID == adb.IDInstallFailed && e.Code == "INSTALL_FAILED_VERSION_DOWNGRADE" {
		id = agent.ErrVersionDowngrade
	}
	return &agent.Error{ID: id, Code: e.Code, Retryable: agent.DefaultRetryable(id), Msg: e.Msg, Err: e.Err}
}

// adbErrorIDs maps adb's error ids to the agent's; any other is internal.
var adbErrorIDs = map[string]agent.ErrorID{
	adb.IDDeviceNotFound:     agent.ErrDeviceNotFound,
	adb.IDDeviceOffline:      agent.ErrDeviceOffline,
	adb.IDDeviceUnauthorized: agent.ErrDeviceUnauthorized,
	adb.IDTimeout:            agent.ErrTimeout,
	adb.IDCanceled:           agent.ErrInterrupted,
	adb.IDNetworkError:       agent.ErrNetwork,
	adb.IDInstallFailed:      agent.ErrInstallFailed,
	adb.IDActivityNotFound:   agent.ErrActivityNotFound,
	adb.IDPermissionError:    agent.ErrPermission,
	adb.IDProcessError:       agent.ErrProcess,
	adb.IDResourceExhausted:  agent.ErrResourceExhausted,
}

// Resolver finds the device a name designates on the adb server it talks to
// (device.Resolver, for nodes.Ports.Resolve): the device whose serial is
// name; else the one whose model, product or device (host:devices-l) equals
// name ignoring case and with blanks as '_'; else the emulator whose AVD name
// (getprop ro.boot.qemu.avd_name, ro.kernel.qemu.avd_name on older images)
// is name. A name that designates no device is waited for up to its grace
// (the device's ReconnectGrace too), as after an adb server restart. Errors:
// device_not_found with Code CodeNotAttached (none) or CodeAmbiguous (more
// than one: name a serial).
type Resolver struct {
	c     *adb.Client
	grace time.Duration
}

var _ device.Resolver = (*Resolver)(nil)

// NewResolver resolves names on the adb server c, waiting up to grace.
func NewResolver(c *adb.Client, grace time.Duration) *Resolver {
	return &Resolver{c: c, grace: grace}
}

// Resolve returns the device name designates; see Resolver.
func (r *Resolver) Resolve(ctx context.Context, name string) (device.Device, error) {
	serial, err := ResolveSerial(ctx, r.c, name)
	var e *agent.Error
	if errors.As(err, &e) && e.Code == CodeNotAttached && r.grace > 0 {
		waitListed(ctx, r.grace, func() bool {
			serial, err = ResolveSerial(ctx, r.c, name)
			return err == nil || !errors.As(err, &e) || e.Code != CodeNotAttached
		})
	}
	if err != nil {
		return nil, err
	}
	return NewADBDevice(r.c, serial).WithReconnectGrace(r.grace), nil
}

// Codes of ResolveSerial's device_not_found.
const (
	CodeNotAttached = "DEVICE_NOT_ATTACHED" // no device of the adb server has the name
	CodeAmbiguous   = "DEVICE_NAME_AMBIGUOUS"
)

// ResolveSerial is Resolver's lookup.
func ResolveSerial(ctx context.Context, c *adb.Client, name string) (string, error) {
	infos, err := c.Devices(ctx)
	if err != nil {
		return "", AgentError(err)
	}
	for _, in := range infos {
		if in.Serial == name {
			return in.Serial, nil
		}
	}
	want := normName(name)
	var hits []string
	for _, in := range infos {
		if want != "" && (normName(in.Model) == want || normName(in.Product) == want || normName(in.Device) == want) {
			hits = append(hits, in.Serial)
		}
	}
	if len(hits) == 0 {
		hits = avdHits(ctx, c, infos, want)
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		known := make([]string, len(infos))
		for i, in := range infos {
			known[i] = in.Serial + " (" + string(in.State) + ")"
		}
		if len(known) == 0 {
			known = []string{"no device"}
		}
		return "", &agent.Error{ID: agent.ErrDeviceNotFound, Code: CodeNotAttached,
			Msg: fmt.Sprintf("no device named %q (serial, model, product, device or AVD name); adb knows: %s", name, strings.Join(known, ", "))}
	}
	return "", &agent.Error{ID: agent.ErrDeviceNotFound, Code: CodeAmbiguous,
		Msg: fmt.Sprintf("%q names %d devices (%s): use a serial", name, len(hits), strings.Join(hits, ", "))}
}

// normName folds a device name for comparison: trimmed, lower case,
// spaces as underscores.
func normName(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), " ", "_"))
}

// avdHits are the online emulators whose AVD name (ro.boot.qemu.avd_name,
// or ro.kernel.qemu.avd_name on older images) folds to want.
func avdHits(ctx context.Context, c *adb.Client, infos []parse.DeviceInfo, want string) []string {
	var hits []string
	for _, in := range infos {
		if !in.State.Online() || !strings.HasPrefix(in.Serial, "emulator-") {
			continue
		}
		out, err := c.ShellOutput(ctx, in.Serial, "getprop ro.boot.qemu.avd_name; getprop ro.kernel.qemu.avd_name")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" && normName(l) == want {
				hits = append(hits, in.Serial)
				break
			}
		}
	}
	return hits
}

var _ device.ExecOuter = (*ADBDevice)(nil)

// ExecOut runs cmd through the exec: service (see adb.Client.ExecOut).
func (d *ADBDevice) ExecOut(ctx context.Context, cmd string, max int64) ([]byte, error) {
	b, err := d.client.ExecOut(ctx, d.serial, cmd, max)
	return b, AgentError(err)
}
