package nodes

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// AVDNotRunning is the agent.Error Code of a REUSE_ONLY EnsureDevice whose
// deviceName is an AVD no running emulator runs (errorId device_not_found,
// not retryable: nothing will start it).
const AVDNotRunning = "AVD_NOT_RUNNING"

// EmulatorOptions is the policy's emulator section as EnsureDevice uses it
// (policy.Emulator).
type EmulatorOptions struct {
	// IdleKill: emulators the host booted that no run used for this long are
	// killed when the next run names an AVD; 0 keeps them warm for ever.
	IdleKill time.Duration
	// ColdBoot skips the quick boot (-no-snapshot-load).
	ColdBoot bool
	// SaveSnapshot lets the emulator save default_boot on exit; false passes
	// -no-snapshot-save.
	SaveSnapshot bool
}

// EmulatorLifecycle is EnsureDevice's emulatorLifecycle output: what became
// of the AVD deviceName named.
type EmulatorLifecycle struct {
	AVDName string `json:"avdName"`
	// Serial is the emulator the run ended on (emulator-P); "" when none.
	Serial string `json:"serial"`
	// Booted is false when a running emulator of the AVD was reused.
	Booted bool `json:"booted"`
	// BootMode is QUICK (from the default_boot snapshot) or COLD; null when
	// nothing was booted.
	BootMode *device.BootMode `json:"bootMode"`
	// BootMillis is the time from starting the emulator to boot-ready; null
	// when nothing was booted.
	BootMillis *int64 `json:"bootMillis"`
	// ColdBootReason says why a boot was cold (the snapshot that did not
	// load, no snapshot, or policy).
	ColdBootReason string `json:"coldBootReason,omitempty"`
	// ReadOnly: booted with -read-only, beside other instances of the AVD.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// ensureAVD handles a deviceName that names an AVD of Ports.Emulators. It
// returns nil, nil when deviceName is no AVD (it is then a serial or a model
// name for Ports.Resolve). Per driverReusePolicy:
//   - REUSE_OR_CREATE: a running emulator of the AVD (the console's `avd
//     name`; online ones first) is used, else the AVD is booted;
//   - REUSE_ONLY: a running one is used, else device_not_found, Code
//     AVD_NOT_RUNNING, not retryable; it never boots;
//   - CREATE_NEW: a fresh instance is booted with -read-only, so it runs
//     beside any instance of the same AVD.
//
// Boots get the time left until deadline; emulators the host booted and no
// run used for EmulatorOptions.IdleKill are killed first.
func ensureAVD(ctx context.Context, in EnsureDeviceInput, p Ports, policy DriverReusePolicy, deadline time.Time) (*EmulatorLifecycle, error) {
	name := in.DeviceConfiguration.DeviceName
	isAVD, err := p.Emulators.HasAVD(ctx, name)
	if err != nil {
		p.Logf("no AVD lookup for %q (%s): resolving it as a device", name, agent.Classify(err).Error())
		return nil, nil
	}
	if !isAVD {
		return nil, nil
	}
	lc := &EmulatorLifecycle{AVDName: name}
	if opt := in.Emulator; opt.IdleKill > 0 {
		killed, err := p.Emulators.Reap(ctx, opt.IdleKill)
		if len(killed) > 0 {
			p.Logf("killed emulators idle for %v or more: %s", opt.IdleKill, strings.Join(killed, ", "))
		}
		if err != nil {
			p.Logf("killing idle emulators: %v (continuing)", err)
		}
	}
	if policy != CreateNew {
		running, err := p.Emulators.Running(ctx, name)
		if err != nil {
			return lc, err
		}
		if len(running) > 0 {
			lc.Serial = running[0]
			p.Logf("AVD %s runs as %s: reusing it", name, lc.Serial)
			if err := p.Emulators.Touch(ctx, lc.Serial); err != nil {
				p.Logf("emulator state: %v", err)
			}
			return lc, nil
		}
		if policy == ReuseOnly {
			return lc, &agent.Error{ID: agent.ErrDeviceNotFound, Code: AVDNotRunning,
				Msg: fmt.Sprintf("driverReusePolicy REUSE_ONLY: AVD %q is not running (no emulator console answers `avd name` with it) and REUSE_ONLY never boots; start it (screengraph-agent emulator start %s) or use REUSE_OR_CREATE", name, name)}
		}
	}
	lc.ReadOnly = policy == CreateNew
	left := deadline.Sub(p.Now())
	if left <= 0 {
		return lc, agent.Errorf(agent.ErrBootTimeout, "no time left to boot AVD %s", name)
	}
	res, err := p.Emulators.Boot(ctx, device.BootRequest{
		AVD: name, ReadOnly: lc.ReadOnly, SaveSnapshot: in.Emulator.SaveSnapshot, ColdBoot: in.Emulator.ColdBoot,
		Timeout: left, Progress: func(line string) { p.Logf("%s", line) },
	})
	if err != nil {
		return lc, err
	}
	ms := res.Took.Milliseconds()
	mode := res.Mode
	lc.Serial, lc.Booted, lc.BootMode, lc.BootMillis, lc.ColdBootReason = res.Serial, true, &mode, &ms, res.ColdBootReason
	lc.ReadOnly = lc.ReadOnly || res.ReadOnly
	if res.ColdBootReason != "" {
		p.Logf("AVD %s booted cold as %s in %d ms: %s", name, res.Serial, ms, res.ColdBootReason)
	} else {
		p.Logf("AVD %s booted (%s) as %s in %d ms", name, strings.ToLower(string(mode)), res.Serial, ms)
	}
	return lc, nil
}
