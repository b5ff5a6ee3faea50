package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/android"
)

// DriverReusePolicy is EnsureDevice's driverReusePolicy.
type DriverReusePolicy string

const (
	// ReuseOrCreate reuses the session remembered for the serial when its
	// probe says HEALTHY or DEGRADED, else creates one (the default).
	ReuseOrCreate DriverReusePolicy = "REUSE_OR_CREATE"
	// CreateNew deletes the remembered session (best effort) and creates one.
	CreateNew DriverReusePolicy = "CREATE_NEW"
	// ReuseOnly reuses the remembered session or fails with
	// invalid_request_error, Code NoReusableSession (not retryable: the
	// request demands a session that does not exist; retrying cannot make
	// one, and creating one would break the caller's stated intent).
	ReuseOnly DriverReusePolicy = "REUSE_ONLY"
)

// NoReusableSession is the agent.Error Code of a REUSE_ONLY EnsureDevice that
// found no live session for the device.
const NoReusableSession = "NO_REUSABLE_SESSION"

// Defaults of EnsureDevice (the schema's "default" values say the same).
const (
	DefaultBootTimeout = 120 * time.Second
	// BootPollInterval spaces the boot readiness probes (Appium polls every
	// 3 s; a probe is one shell round trip, so a shorter step costs little).
	BootPollInterval = 500 * time.Millisecond
	// BootProgressInterval spaces the boot wait's progress lines: with the
	// engine committing a running node's lines every second, a follower
	// sees one at least every 2 s.
	BootProgressInterval = time.Second
	// OfflineGrace bounds how long EnsureDevice waits for a device in a
	// transient adb state (offline, authorizing, connecting) to come online: a
	// fresh adb server reports devices offline for a moment (android-recipes.md).
	OfflineGrace = 5 * time.Second
	// DefaultADBServerPort is the adb server port when neither the input nor
	// the ports name one.
	DefaultADBServerPort = 5037
	// BootDeadlineMargin is how long before the node's own deadline (the
	// policy's EnsureDevice timeout, carried by ctx) the boot wait gives up at
	// most: the wait is cut to deadline - min(BootDeadlineMargin, 10% of the
	// time the node had at its start), so a device that never boots ends as
	// boot_timeout (not retried), not as the node's retryable timeout.
	BootDeadlineMargin = 5 * time.Second
)

// DeviceConfiguration is EnsureDevice's deviceConfiguration.
type DeviceConfiguration struct {
	PlatformName string `json:"platformName,omitempty"`
	// DeviceName is an adb serial, or a name Ports.Resolve maps to one; the
	// daemon's scheduler picks the device for it (service.Candidate.Matches:
	// "<host id>/<serial>", serial, AVD, model, "android-<API level>") and
	// EnsureDevice drives the one leased.
	DeviceName      string `json:"deviceName"`
	PlatformVersion string `json:"platformVersion,omitempty"`
	AppiumServerURL string `json:"appiumServerUrl,omitempty"`
	// ADBServerPort is the port of the adb server shared with Appium
	// (appium:adbPort); 0 = Ports.ADBServerPort, else 5037. Extension.
	ADBServerPort int `json:"adbServerPort,omitempty"`
	// BootTimeoutMillis bounds the boot readiness wait, counted from the
	// node's start and cut to end inside the node's deadline (see
	// BootDeadlineMargin); 0 = 120000. Extension.
	BootTimeoutMillis int64 `json:"bootTimeoutMillis,omitempty"`
}

// EnsureDeviceInput is EnsureDevice's Input (screengraph-nodes.md §1).
type EnsureDeviceInput struct {
	RunID                  string              `json:"runId"`
	TenantID               string              `json:"tenantId,omitempty"`
	ProjectID              string              `json:"projectId,omitempty"`
	IterationOrdinalNumber int                 `json:"iterationOrdinalNumber,omitempty"`
	DeviceConfiguration    DeviceConfiguration `json:"deviceConfiguration"`
	DriverReusePolicy      DriverReusePolicy   `json:"driverReusePolicy,omitempty"`
	// Emulator is the policy's emulator section (not part of the input
	// JSON: the setup graph fills it from the policy in force).
	Emulator EmulatorOptions `json:"-"`
	// Warm, when set, is what earlier runs proved (see Warm); the setup
	// graph shares one across its runs. Not part of the input JSON.
	Warm *Warm `json:"-"`
}

// EnsureDeviceOutput is EnsureDevice's Output; DeviceRuntimeContext is null on failure.
type EnsureDeviceOutput struct {
	RunID                string                `json:"runId"`
	DeviceRuntimeContext *DeviceRuntimeContext `json:"deviceRuntimeContext"`
	// EmulatorLifecycle is set when deviceName named an AVD: the serial it
	// ended on, whether it was booted, how and how long it took. Extension.
	EmulatorLifecycle *EmulatorLifecycle `json:"emulatorLifecycle,omitempty"`
	Common
}

// SessionMemory remembers the Appium session id last used on each serial, so
// REUSE_OR_CREATE finds it again, also after a daemon restart (the daemon
// backs it with its store). Get returns "" when nothing is remembered.
type SessionMemory interface {
	Get(ctx context.Context, serial string) (string, error)
	Put(ctx context.Context, serial, sessionID string) error
	Forget(ctx context.Context, serial string) error
}

// MemorySessions is an in-process SessionMemory (tests, one-shot CLI runs).
type MemorySessions struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *MemorySessions) Get(_ context.Context, serial string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[serial], nil
}

func (s *MemorySessions) Put(_ context.Context, serial, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	s.m[serial] = id
	return nil
}

func (s *MemorySessions) Forget(_ context.Context, serial string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, serial)
	return nil
}

var _ SessionMemory = (*MemorySessions)(nil)

// EnsureDevice checks that the device is present, online and booted, and that
// an Appium session is ready on it.
//
//  0. AVD: when Ports.Emulators is wired and deviceName is one of its AVDs,
//     see ensureAVD (reuse a running emulator of it, or boot one); the
//     serial it ends on is the device below.
//  1. Device: Ports.Resolve(deviceName) when set (of the serial the run's
//     device lease holds, agent.FenceFrom, when it has one), else
//     Ports.Device. A first boot probe (step 2) that says Ready ends steps 1
//     and 2 at once (only a device in state "device" runs the system
//     services it asks for). Else its adb state must be "device": an unknown serial is
//     device_not_found, an unauthorized one device_unauthorized (not retryable), a transient one
//     (offline, authorizing, connecting) is waited for up to OfflineGrace and
//     then device_offline (retryable); bootloader/recovery/sideload are
//     device_offline, not retryable.
//  2. Boot: one shell running adb.BootCommand and `service list` (android.BootProbe)
//     every BootPollInterval until parse.ParseBootStatus says Ready
//     (sys.boot_completed=1, boot animation stopped, activity/package/window
//     services up), bounded by bootTimeoutMillis from the node's start and,
//     when ctx has a deadline (the policy's node timeout), by that deadline
//     minus a margin (BootDeadlineMargin): boot_timeout, not retryable, with
//     what was still missing. The boot wait thus always ends before the
//     node's deadline.
//  3. Session, per driverReusePolicy (see the constants). The session id is
//     remembered in memory under the serial. A reused session must probe
//     HEALTHY or DEGRADED and, when its capabilities name a udid, name this
//     serial. New sessions get Ports.Capabilities (or android.SessionCapabilities)
//     with appium:udid, appium:suppressKillServer=true and appium:adbPort
//     enforced, so Appium never restarts the adb server the daemon shares.
//
// The output carries the failure in its Common block too; err is the same
// *agent.Error (nil on success).
func EnsureDevice(ctx context.Context, in EnsureDeviceInput, p Ports, memory SessionMemory) (EnsureDeviceOutput, error) {
	out := EnsureDeviceOutput{RunID: in.RunID, Common: Common{NodeName: NodeEnsureDevice}}
	drc, err := ensureDevice(ctx, in, p, memory, &out.EmulatorLifecycle)
	if e := MarkFailure(&out.Common, err); e != nil {
		p.Logf("EnsureDevice failed: %s", e.Error())
		return out, e
	}
	out.DeviceRuntimeContext = drc
	return out, nil
}

func ensureDevice(ctx context.Context, in EnsureDeviceInput, p Ports, memory SessionMemory, life **EmulatorLifecycle) (*DeviceRuntimeContext, error) {
	policy := in.DriverReusePolicy
	if policy == "" {
		policy = ReuseOrCreate
	}
	switch policy {
	case ReuseOrCreate, CreateNew, ReuseOnly:
	default:
		return nil, agent.Errorf(agent.ErrInvalidRequest, "driverReusePolicy %q: expected REUSE_OR_CREATE, CREATE_NEW or REUSE_ONLY", policy)
	}
	if p.Driver == nil || memory == nil {
		return nil, agent.Errorf(agent.ErrInternal, "EnsureDevice needs a Driver and a SessionMemory port")
	}
	deadline, bound := bootDeadline(ctx, p.Now(), positiveMillis(in.DeviceConfiguration.BootTimeoutMillis, DefaultBootTimeout))
	name, err := deviceName(ctx, in, p, policy, deadline, life)
	if err != nil {
		return nil, err
	}
	dev, err := resolveDevice(ctx, name, p)
	if err != nil {
		return nil, err
	}
	warm := cmp.Or(in.Warm, &Warm{}) // none kept: this run proves for itself
	sess := sessionSetup{p: p, memory: memory, policy: policy, serial: dev.Serial(), warm: warm}
	sess.probeAhead(ctx)
	defer sess.ahead.Discard()
	if rechecked, err := ensureBooted(ctx, dev, p, deadline, bound, &warm.Boot); err != nil {
		return nil, err
	} else if !rechecked { // the device changed: its session is probed after the boot check
		sess.ahead.Discard()
		sess.ahead = nil
	}
	adbPort := cmp.Or(in.DeviceConfiguration.ADBServerPort, p.ADBServerPort, DefaultADBServerPort)
	return sess.ensure(ctx, adbPort, in.DeviceConfiguration.PlatformVersion)
}

// probeAhead starts the remembered session's probe when the device has a
// boot proof to recheck and the policy may reuse it: the recheck (adbd) and
// the probe (Appium) overlap. Nothing starts when memory cannot be read
// (ensure reports that).
func (s *sessionSetup) probeAhead(ctx context.Context) {
	if s.policy == CreateNew || !s.warm.Boot.Holds(s.serial) {
		return
	}
	if id, err := s.memory.Get(ctx, s.serial); err == nil && id != "" {
		s.ahead = s.warm.Sessions.StartReusable(ctx, s.p.Driver, s.serial, id)
	}
}

// deviceName is the name of the device to drive: the leased serial when
// the run's device lease holds one other than deviceName (the scheduler
// chose it for the name: a model, an AVD, "android-34", "<host id>/<serial>"
// may name several, and never another the name matches is driven), or the
// serial of the AVD ensureAVD reused or booted.
func deviceName(ctx context.Context, in EnsureDeviceInput, p Ports, policy DriverReusePolicy, deadline time.Time, life **EmulatorLifecycle) (string, error) {
	name := in.DeviceConfiguration.DeviceName
	leased := ""
	if f := agent.FenceFrom(ctx); f != nil && f.Serial != name {
		leased = f.Serial
	}
	if p.Emulators != nil {
		lc, err := ensureAVD(ctx, in, p, policy, deadline)
		if lc != nil {
			*life = lc
			if lc.Serial != "" {
				name = lc.Serial
			}
			// An AVD booted now is a device of its own (the lease is keyed by
			// the AVD name); a running one is the leased serial.
			if strings.EqualFold(leased, lc.AVDName) || lc.Booted {
				leased = ""
			} else if leased != "" && lc.Serial != "" {
				lc.Serial = leased
			}
		}
		if err != nil {
			return "", err
		}
	}
	if leased != "" {
		p.Logf("deviceName %q runs on leased device %s", in.DeviceConfiguration.DeviceName, leased)
		name = leased
	}
	return name, nil
}

// ensureBooted: a device proven Ready on the same adb transport before
// (proofs, see android.BootProofs) is rechecked in one small shell. Else a
// device whose first boot probe says Ready is online (a shell reaches only
// a device in adb state "device" or "recovery", and recovery runs no
// activity/package/window services), so the adb state is asked (one more
// connection through the adb server) only when it is not; then the boot is
// waited for. A Ready answer is recorded in proofs. rechecked: the proof
// held (the device did not change since).
func ensureBooted(ctx context.Context, dev device.Device, p Ports, deadline time.Time, bound time.Duration, proofs *android.BootProofs) (rechecked bool, _ error) {
	if ok, why := proofs.Recheck(ctx, dev); ok {
		return true, nil
	} else if why != "" {
		p.Logf("%s changed since it was found boot-ready (%s): checking it fully", dev.Serial(), why)
	}
	st, err := android.BootStatus(ctx, dev)
	if err == nil && st.Ready {
		proofs.Proven(dev.Serial(), st.TransportID)
		return false, nil
	}
	if err := waitOnline(ctx, dev, p, min(bound, OfflineGrace)); err != nil {
		return false, err
	}
	var first *android.Boot
	if err == nil {
		first = &st // the wait's first probe: it answered, not ready yet
	}
	ready, err := waitBooted(ctx, dev, p, deadline, bound, first)
	if err == nil {
		proofs.Proven(dev.Serial(), ready.TransportID)
	}
	return false, err
}

// sessionSetup finds or creates the Appium session of one serial under a
// driverReusePolicy (see EnsureDevice, step 3).
type sessionSetup struct {
	p      Ports
	memory SessionMemory
	policy DriverReusePolicy
	serial string
	warm   *Warm
	ahead  *android.ReuseProbe // probeAhead's, nil when none
}

func (s sessionSetup) memoryErr(err error) error {
	return agent.Wrap(agent.ErrInternal, err, "session memory for %s", s.serial)
}

// ensure reuses the remembered session when the policy lets it and it
// probes live, else creates one (REUSE_ONLY fails instead).
func (s sessionSetup) ensure(ctx context.Context, adbPort int, platformVersion string) (*DeviceRuntimeContext, error) {
	remembered, err := s.memory.Get(ctx, s.serial)
	if s.ahead != nil {
		remembered, err = s.ahead.ID, nil // read a moment ago by probeAhead
	}
	if err != nil {
		return nil, s.memoryErr(err)
	}
	if s.policy == CreateNew && remembered != "" {
		s.p.Logf("driverReusePolicy CREATE_NEW: deleting remembered session %s", remembered)
		if derr := s.p.Driver.DeleteSession(ctx, remembered); derr != nil {
			// A new UiAutomator2 session on this udid ends the old one anyway.
			s.p.Logf("delete session %s: %v (continuing)", remembered, derr)
		}
		if err := s.memory.Forget(ctx, s.serial); err != nil {
			return nil, s.memoryErr(err)
		}
		remembered = ""
	}
	if remembered != "" {
		drc, err := s.reuse(ctx, remembered)
		if err != nil || drc != nil {
			return drc, err
		}
	} else if s.policy == ReuseOnly {
		return nil, &agent.Error{ID: agent.ErrInvalidRequest, Code: NoReusableSession,
			Msg: fmt.Sprintf("driverReusePolicy REUSE_ONLY: no Appium session remembered for %s", s.serial)}
	}
	return s.create(ctx, adbPort, platformVersion)
}

// reuse returns the remembered session's context when it probes live; nil
// (forgotten) when not, an error when REUSE_ONLY then has nothing to use.
func (s sessionSetup) reuse(ctx context.Context, remembered string) (*DeviceRuntimeContext, error) {
	drc, why, err := tryReuse(ctx, s.p, s.serial, remembered, s.warm, s.ahead)
	if err != nil {
		return nil, err
	}
	if drc != nil {
		s.p.Logf("reusing Appium session %s on %s (%s)", remembered, s.serial, drc.HealthProbeStatus)
		return drc, nil
	}
	s.p.Logf("remembered session %s not reusable: %s", remembered, why)
	if err := s.memory.Forget(ctx, s.serial); err != nil {
		return nil, s.memoryErr(err)
	}
	if s.policy == ReuseOnly {
		return nil, &agent.Error{ID: agent.ErrInvalidRequest, Code: NoReusableSession,
			Msg: fmt.Sprintf("driverReusePolicy REUSE_ONLY: session %s remembered for %s is not live: %s", remembered, s.serial, why)}
	}
	return nil, nil
}

// create opens a new session (SessionCapabilities), remembers it and
// probes it: UNHEALTHY is session_create_failed.
func (s sessionSetup) create(ctx context.Context, adbPort int, platformVersion string) (*DeviceRuntimeContext, error) {
	caps, err := android.SessionCapabilities(s.p.Capabilities, s.serial, adbPort, platformVersion)
	if err != nil {
		return nil, err
	}
	s.p.Logf("creating Appium session on %s", s.serial)
	sess, err := s.p.Driver.CreateSession(ctx, caps)
	if err != nil {
		return nil, err
	}
	if sess.ID == "" {
		return nil, agent.Errorf(agent.ErrSessionCreateFailed, "Appium answered without a session id")
	}
	if err := s.memory.Put(ctx, s.serial, sess.ID); err != nil {
		return nil, s.memoryErr(err)
	}
	health, _, perr := s.p.Driver.Probe(ctx, sess.ID)
	if perr != nil {
		return nil, perr
	}
	if health == device.Unhealthy {
		_ = s.memory.Forget(ctx, s.serial)
		return nil, agent.Errorf(agent.ErrSessionCreateFailed, "new session %s probes UNHEALTHY", sess.ID)
	}
	echo := sess.Capabilities
	if len(echo) == 0 {
		echo = caps
	}
	s.p.Logf("Appium session %s ready on %s (%s)", sess.ID, s.serial, health)
	return &DeviceRuntimeContext{DriverSessionID: sess.ID, DeviceID: s.serial, CapabilitiesEcho: echo, HealthProbeStatus: health}, nil
}

// tryReuse probes a remembered session (android.SessionCaps.Reusable). It
// returns the context to use, or a reason it cannot be used; err only when
// the Appium server cannot be asked.
// A session whose capabilities warm knows is probed in one call
// (device.AliveProber) when the driver can.
// A probe started ahead (probeAhead) for id is waited for instead.
func tryReuse(ctx context.Context, p Ports, serial, id string, warm *Warm, ahead *android.ReuseProbe) (*DeviceRuntimeContext, string, error) {
	health, caps, why, err := ahead.Wait()
	if ahead == nil || ahead.ID != id {
		health, caps, why, err = warm.Sessions.Reusable(ctx, p.Driver, serial, id)
	}
	if err != nil || why != "" {
		return nil, why, err
	}
	return &DeviceRuntimeContext{DriverSessionID: id, DeviceID: serial, CapabilitiesEcho: caps, HealthProbeStatus: health}, "", nil
}

// Warm is what earlier runs of this process proved, so a warm device
// costs one round trip per check: the adb transport each device was found
// boot-ready on (android.BootProofs) and the capabilities each reused
// Appium session reported (android.SessionCaps). The zero value is empty;
// the setup graph shares one across its runs.
type Warm struct {
	Boot     android.BootProofs
	Sessions android.SessionCaps
}

func resolveDevice(ctx context.Context, name string, p Ports) (device.Device, error) {
	if p.Resolve != nil {
		if name == "" {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "deviceConfiguration.deviceName is empty")
		}
		return p.Resolve.Resolve(ctx, name)
	}
	if p.Device == nil {
		return nil, agent.Errorf(agent.ErrInternal, "EnsureDevice needs a Device or a Resolve port")
	}
	if name != "" && name != p.Device.Serial() {
		p.Logf("deviceName %q runs on leased device %s", name, p.Device.Serial())
	}
	return p.Device, nil
}

// bootDeadline is when the boot wait of a node started at start (on the
// ports' clock) gives up: start + bootTimeout, cut to the node's deadline
// (ctx's) minus min(BootDeadlineMargin, a tenth of the node's time). It also
// returns the resulting bound (deadline - start) for messages.
func bootDeadline(ctx context.Context, start time.Time, bootTimeout time.Duration) (time.Time, time.Duration) {
	bound := bootTimeout
	if d, ok := ctx.Deadline(); ok {
		// ctx's deadline is on the wall clock; what is left of it is moved
		// onto the ports' clock (a fake one in tests).
		left := time.Until(d)
		cut := left - min(BootDeadlineMargin, left/10)
		bound = max(min(bound, cut), 0)
	}
	return start.Add(bound), bound
}

// waitOnline waits for adb state "device" (android.Online), retrying
// transient states for grace.
func waitOnline(ctx context.Context, dev device.Device, p Ports, grace time.Duration) error {
	until := p.Now().Add(grace)
	for {
		st, ok, err := android.Online(ctx, dev)
		if ok || err != nil {
			return err
		}
		if !p.Now().Before(until) {
			return &agent.Error{ID: agent.ErrDeviceOffline, Retryable: true,
				Msg: fmt.Sprintf("%s still %s after %v", dev.Serial(), st, grace)}
		}
		if err := p.Wait(ctx, BootPollInterval); err != nil {
			return ctxErr(ctx, "waiting for "+dev.Serial()+" to come online")
		}
	}
}

// waitBooted polls boot readiness until deadline; first, when set, is the
// first probe's answer (taken already). It returns the Ready answer.
func waitBooted(ctx context.Context, dev device.Device, p Ports, deadline time.Time, bound time.Duration, first *android.Boot) (android.Boot, error) {
	last := "no answer yet"
	var lastLine time.Time
	for attempt := 0; ; attempt++ {
		var st android.Boot
		var err error
		if attempt == 0 && first != nil {
			st = *first
		} else {
			st, err = android.BootStatus(ctx, dev)
		}
		if err == nil && st.Ready {
			if attempt > 0 {
				p.Logf("%s boot-ready", dev.Serial())
			}
			return st, nil
		}
		if err != nil {
			e := agent.Classify(err)
			if !e.Retryable || errors.Is(err, context.Canceled) {
				return st, e
			}
			last = e.Error()
		} else {
			last = st.Reason
		}
		// A line at the first probe, then one at least every
		// BootProgressInterval: with the engine's live progress a follower
		// sees the wait advance (a cold boot takes minutes).
		if now := p.Now(); attempt == 0 || now.Sub(lastLine) >= BootProgressInterval {
			waited := bound - deadline.Sub(now)
			p.Logf("waiting for %s to boot: %s (%s of %s)", dev.Serial(), last, waited.Round(time.Second), bound.Round(time.Second))
			lastLine = now
		}
		if !p.Now().Before(deadline) {
			return st, agent.Errorf(agent.ErrBootTimeout, "%s not boot-ready after %v: %s", dev.Serial(), bound.Round(time.Millisecond), last)
		}
		if err := p.Wait(ctx, min(BootPollInterval, max(deadline.Sub(p.Now()), time.Millisecond))); err != nil {
			return st, ctxErr(ctx, "waiting for "+dev.Serial()+" to boot")
		}
	}
}

// ensureDeviceNode is EnsureDevice as a setup node: the policy's driver
// reuse mode unless the input names one, and its emulator section.
type ensureDeviceNode struct {
	sessions SessionMemory
	warm     *Warm
}

func (ensureDeviceNode) Name() string { return NodeEnsureDevice }

func (n ensureDeviceNode) Prepare(in *EnsureDeviceInput, s StepContext) {
	in.IterationOrdinalNumber = s.Step.IterationOrdinalNumber
	if in.DriverReusePolicy == "" {
		in.DriverReusePolicy = DriverReusePolicy(s.Policy.DriverReusePolicy)
	}
	e := s.Policy.Emulator
	in.Warm = n.warm
	in.Emulator = EmulatorOptions{IdleKill: time.Duration(e.IdleKillMinutes) * time.Minute, ColdBoot: !e.QuickBoot, SaveSnapshot: e.SaveSnapshot}
}

func (n ensureDeviceNode) Run(ctx context.Context, in EnsureDeviceInput, _ StepContext, p Ports) (EnsureDeviceOutput, error) {
	return EnsureDevice(ctx, in, p, n.sessions)
}
