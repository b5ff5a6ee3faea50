package device

import (
	"context"
	"time"
)

// Emulators is the AVD side of a device host, as EnsureDevice consumes it: which
// Android Virtual Devices exist, which running emulator-P is which AVD, and
// booting one. The emulator package implements it over the SDK's `emulator`
// binary and the emulator console. Errors are *agent.Error (boot_timeout,
// process_error with Code EMULATOR_CRASHED, device_not_found, ...).
type Emulators interface {
	// HasAVD reports whether name is an AVD of this host (`emulator -list-avds`).
	HasAVD(ctx context.Context, name string) (bool, error)
	// Running returns the serials of the running emulators of avd, found
	// through each emulator console's `avd name`; online ones first, then by serial.
	Running(ctx context.Context, avd string) ([]string, error)
	// Boot starts a new instance of req.AVD and returns once the adb server
	// lists it boot-ready (the readiness EnsureDevice judges).
	Boot(ctx context.Context, req BootRequest) (BootResult, error)
	// Touch records that a run now uses serial, restarting its idle clock
	// (emulators the host booted are killed after policy's idle minutes).
	Touch(ctx context.Context, serial string) error
	// Reap kills the emulators the host booted that no run used for idle
	// (nothing when idle is 0) and returns their serials.
	Reap(ctx context.Context, idle time.Duration) ([]string, error)
}

// BootMode is how an emulator booted: QUICK (from the AVD's default_boot
// snapshot) or COLD (a full Android boot).
type BootMode string

const (
	BootQuick BootMode = "QUICK"
	BootCold  BootMode = "COLD"
)

// BootRequest is one emulator boot.
type BootRequest struct {
	AVD string
	// ReadOnly boots with -read-only: another instance of an AVD that is
	// already running (no snapshot saved, no AVD lock taken).
	ReadOnly bool
	// SaveSnapshot lets the emulator save default_boot on exit; false passes
	// -no-snapshot-save (CI: the cached snapshot stays clean).
	SaveSnapshot bool
	// ColdBoot skips the quick boot (-no-snapshot-load).
	ColdBoot bool
	// Timeout bounds the whole boot; 0 means 120 s.
	Timeout time.Duration
	// Progress receives progress lines; may be nil.
	Progress func(line string)
}

// BootResult says how a boot went.
type BootResult struct {
	Serial string
	Mode   BootMode
	// ColdBootReason is why a quick boot became a cold one (the emulator's log
	// line), or "" when it did not.
	ColdBootReason string
	// ReadOnly: the instance runs with -read-only (asked for, or because a
	// writable instance of the AVD held its lock).
	ReadOnly bool
	// Took is the time from starting the emulator process to boot-ready.
	Took time.Duration
	// ReadyLag is the time from sys.boot_completed=1 (the emulator's "Boot
	// completed in N ms" log line, N counted from the process start) to the
	// readiness probe seeing the device ready; 0 when the log said nothing.
	ReadyLag time.Duration
}
