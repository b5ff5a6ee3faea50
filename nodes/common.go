package nodes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// Node names, as the spec writes them (screengraph-nodes.md) and as the schema
// files are named (schemas/<NodeName>.input.json / .output.json).
const (
	NodeEnsureDevice   = "EnsureDevice"
	NodeProvisionApp   = "ProvisionApp"
	NodeLaunchOrAttach = "LaunchOrAttach"
	NodeWaitIdle       = "WaitIdle"
)

// Common is the block of fields every node Output carries (screengraph-nodes.md,
// "Common Node Output fields"): nodeName, stepOrdinal, iterationOrdinalNumber,
// policyVersion, resumeToken, randomSeed, nodeExecutionOutcomeStatus
// ("SUCCESS"/"FAILURE"), errorId, retryable and humanReadableFailureSummary
// (the last three JSON null on success). It is agent.Common itself, so the
// engine fills and reads the same struct the nodes embed.
type Common = agent.Common

// Outcome statuses of nodeExecutionOutcomeStatus.
const (
	OutcomeSuccess = agent.OutcomeSuccess
	OutcomeFailure = agent.OutcomeFailure
)

// MarkSuccess sets c to SUCCESS with errorId, retryable and
// humanReadableFailureSummary null.
func MarkSuccess(c *Common) {
	c.NodeExecutionOutcomeStatus = OutcomeSuccess
	c.ErrorID, c.Retryable, c.HumanReadableFailureSummary = nil, nil, nil
}

// MarkFailure sets c to FAILURE from err (classified with agent.Classify: an
// *agent.Error keeps its id and retryability, a context deadline becomes
// timeout, anything unknown internal_error, not retryable) and returns the
// classified error. A nil err marks success and returns nil.
func MarkFailure(c *Common, err error) *agent.Error {
	e := agent.Classify(err)
	if e == nil {
		MarkSuccess(c)
		return nil
	}
	id, retryable, summary := e.ID, e.Retryable, Summary(e)
	c.NodeExecutionOutcomeStatus = OutcomeFailure
	c.ErrorID, c.Retryable, c.HumanReadableFailureSummary = &id, &retryable, &summary
	return e
}

// Summary is the humanReadableFailureSummary of e: its message and cause,
// with the refining code (INSTALL_FAILED_…) in front when there is one.
func Summary(e *agent.Error) string {
	s := e.Msg
	if e.Err != nil {
		if s != "" {
			s += ": "
		}
		s += e.Err.Error()
	}
	if e.Code != "" {
		s = e.Code + ": " + s
	}
	if s == "" {
		s = string(e.ID)
	}
	return s
}

// Ports are everything a node may touch. Nodes are DB-blind and network-blind:
// they reach the device and the Appium server only through Device and Driver,
// and get time and randomness only from Clock, Sleep and Rand, so tests can
// drive them with scripted fakes and a fake clock.
type Ports struct {
	// Device is the ADB side of the run's device.
	Device device.Device
	// Driver is the Appium side (W3C sessions on the Appium server).
	Driver device.Driver
	// Clock gives the current time; nil means agent.SystemClock.
	Clock agent.Clock
	// Rand is the step's seeded generator (agent.NodeInput.Rand); nil means a
	// generator seeded with 0, so a node's draws stay deterministic.
	Rand *rand.Rand
	// Progress receives one human-readable line per notable step; the engine
	// records each as an agent.node.token_delta. May be nil.
	Progress func(line string)
	// Sleep waits d or until ctx ends (then it returns ctx.Err()); nil means a
	// timer-based wait. Tests pass a fake that advances their clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// Capabilities builds the Appium capabilities of a new session for the
	// device serial on the adb server at adbPort; the daemon wires it to
	// appium.Capabilities. EnsureDevice then enforces appium:udid,
	// appium:suppressKillServer=true and appium:adbPort whatever the builder
	// returned. nil means a minimal set (see SessionCapabilities).
	Capabilities func(serial string, adbPort int) (map[string]any, error)
	// Resolve finds the device a deviceConfiguration.deviceName names (a
	// serial, or an AVD/model name); errors device_not_found. nil means
	// EnsureDevice uses Device as it is.
	Resolve device.Resolver
	// Emulators boots and finds emulators by AVD name (the emulator
	// package over the SDK's emulator binary and console). nil means
	// deviceName never names an AVD.
	Emulators device.Emulators
	// ADBServerPort is the port of the adb server the daemon shares with
	// Appium (appium:adbPort); 0 means 5037 unless the input names one.
	ADBServerPort int
	// IdleScreens receives the screen a successful WaitIdle proved idle
	// (its page source, and a screenshot taken between its last two
	// samples) for the run's success evidence (WaitIdleInput.Evidence).
	// nil keeps nothing and takes no screenshot.
	IdleScreens device.IdleScreens
}

// Now returns the ports' current time in UTC.
func (p Ports) Now() time.Time {
	if p.Clock == nil {
		return time.Now().UTC()
	}
	return p.Clock.Now().UTC()
}

// Wait sleeps d through p.Sleep (or a timer), returning early with ctx.Err().
func (p Ports) Wait(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Logf sends one progress line to p.Progress when set, with credentials
// hidden (agent.RedactString): the line is printed live and recorded as an
// agent.node.token_delta event, and may quote an artifact reference or an
// error text with a signed URL in it.
func (p Ports) Logf(format string, args ...any) {
	if p.Progress != nil {
		p.Progress(agent.RedactString(fmt.Sprintf(format, args...)))
	}
}

// Timestamp formats t as the spec's ISO-8601 UTC string with milliseconds
// ("2025-10-23T12:00:20.123Z").
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// ctxErr turns a context's end into the node's error: deadline -> timeout
// (retryable), cancellation -> interrupted.
func ctxErr(ctx context.Context, what string) *agent.Error {
	if ctx.Err() == context.DeadlineExceeded {
		return agent.Wrap(agent.ErrTimeout, ctx.Err(), "%s", what)
	}
	return agent.Wrap(agent.ErrInterrupted, ctx.Err(), "%s", what)
}

// DeviceRuntimeContext is what EnsureDevice establishes and later nodes receive.
type DeviceRuntimeContext struct {
	DriverSessionID string `json:"driverSessionId"`
	// DeviceID is the device's adb serial.
	DeviceID string `json:"deviceId"`
	// CapabilitiesEcho is what the session runs with: the capabilities the
	// Appium server answered with (new session) or reports (reused session).
	CapabilitiesEcho  map[string]any `json:"capabilitiesEcho"`
	HealthProbeStatus device.Health  `json:"healthProbeStatus"`
}

// sessionID is the Appium session of c, "" when c is nil.
func (c *DeviceRuntimeContext) sessionID() string {
	if c == nil {
		return ""
	}
	return c.DriverSessionID
}

// positiveMillis is ms milliseconds, def when ms is not positive.
func positiveMillis(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// ApplicationUnderTestDescriptor names the app under test
// (applicationUnderTestDescriptor of ProvisionApp, LaunchOrAttach, WaitIdle).
type ApplicationUnderTestDescriptor struct {
	AndroidPackageID string `json:"androidPackageId"`
	// AndroidLaunchActivityName is the activity LaunchOrAttach starts, fully
	// qualified or ".Short"; resolved from the package when empty. Extension.
	AndroidLaunchActivityName    string `json:"androidLaunchActivityName,omitempty"`
	APKStorageObjectReference    string `json:"apkStorageObjectReference,omitempty"`
	ExpectedBuildSignatureSHA256 string `json:"expectedBuildSignatureSha256,omitempty"`
}
