package device

import (
	"context"
	"io"
)

// ShellResult is one shell command's outcome.
type ShellResult struct {
	Stdout   string
	Stderr   string
	ExitCode int
	// TransportID is the adb transport the command ran on (adb's
	// transport_id, new after every reconnect or reboot); 0 when unknown.
	TransportID int64
}

// InstallOptions are `pm install` flags.
type InstallOptions struct {
	Replace, AllowDowngrade, AllowTestOnly, GrantAll bool
	// Progress receives bytes sent of total; may be nil.
	Progress func(done, total int64)
}

// Device is the ADB side of one device, as the nodes consume it. Errors are
// *agent.Error (device_not_found, device_offline, device_unauthorized,
// timeout, install_failed with the INSTALL_FAILED_* code, …).
type Device interface {
	Serial() string
	// State is the adb server's state word ("device", "offline", …);
	// a serial the server does not know gives device_not_found.
	State(ctx context.Context) (string, error)
	Shell(ctx context.Context, cmd string) (ShellResult, error)
	Install(ctx context.Context, localAPK string, opt InstallOptions) error
	Uninstall(ctx context.Context, pkg string) error
	// Pull copies a device file into w and returns the bytes copied.
	Pull(ctx context.Context, remote string, w io.Writer) (int64, error)
}

// Resolver finds the device a run's deviceConfiguration.deviceName names (a
// serial, a model, an AVD name, ...), EnsureDevice's port
// (nodes.Ports.Resolve); adbdevice.Resolver is the adb server's. Errors are
// *agent.Error (device_not_found, ...).
type Resolver interface {
	Resolve(ctx context.Context, name string) (Device, error)
}

// Session is a W3C WebDriver session on the Appium server.
type Session struct {
	ID           string         `json:"sessionId"`
	Capabilities map[string]any `json:"capabilities"`
}

// Health is a session's health probe outcome: HEALTHY (answers quickly),
// DEGRADED (answers, slowly or partly), UNHEALTHY (gone or failing).
type Health string

const (
	Healthy   Health = "HEALTHY"
	Degraded  Health = "DEGRADED"
	Unhealthy Health = "UNHEALTHY"
)

// Driver is the Appium side. Errors are *agent.Error (appium_unreachable,
// session_create_failed, timeout, …).
type Driver interface {
	// CreateSession POSTs /session with {"capabilities":{"alwaysMatch":caps,"firstMatch":[{}]}}.
	CreateSession(ctx context.Context, caps map[string]any) (Session, error)
	// Probe checks an existing session by id (also one created before a daemon restart).
	Probe(ctx context.Context, sessionID string) (Health, map[string]any, error)
	DeleteSession(ctx context.Context, sessionID string) error
	// PageSource is the current screen's UI hierarchy XML.
	PageSource(ctx context.Context, sessionID string) (string, error)
}

// ExecOuter is the optional part of a Device that runs a command with
// binary-clean output (`adb exec-out`); ADBDevice implements it.
type ExecOuter interface {
	// ExecOut returns cmd's stdout, at most max bytes (more is an error).
	ExecOut(ctx context.Context, cmd string, max int64) ([]byte, error)
}

// AliveProber is a Driver that probes a session without reading its
// capabilities (one round trip to the server instead of two): same
// verdicts as Driver.Probe, details without "capabilities". The Appium
// adapter implements it; EnsureDevice uses it for a session whose
// capabilities an earlier probe of this process read.
type AliveProber interface {
	ProbeAlive(ctx context.Context, sessionID string) (Health, map[string]any, error)
}

type startedKey struct{}

// WithStarted returns ctx carrying fn, which a Device's Shell calls once
// the device has accepted the command's stream (adb's OKAY: adbd has
// started the shell running it), before any output is read. A caller that
// starts a long command (a recording) in a goroutine waits on it to know
// the command runs on the device without waiting for the command's end.
// A Device that cannot tell calls it when the command returns.
func WithStarted(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, startedKey{}, fn)
}

// StartedHook is the function WithStarted put in ctx, nil when none.
func StartedHook(ctx context.Context) func() {
	fn, _ := ctx.Value(startedKey{}).(func())
	return fn
}
