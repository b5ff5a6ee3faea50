// Package policy holds the versioned policy documents of the device agent:
// per-node timeouts, retry rules, the driver reuse / installation /
// launch-attach modes and the idle heuristics. A document is immutable once
// stored under its version; switching means pointing at another version.
// Decide is pure. *Policy implements agent.RetryPolicy and *Store
// agent.PolicySource, so package agent stays import-free.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/screengraph/screengraph-agent/agent"
)

// Node names of the setup chain (screengraph-nodes.md).
const (
	NodeEnsureDevice   = "EnsureDevice"
	NodeProvisionApp   = "ProvisionApp"
	NodeLaunchOrAttach = "LaunchOrAttach"
	NodeWaitIdle       = "WaitIdle"
)

// driverReusePolicy values (issue 3).
const (
	DriverReuseOrCreate = "REUSE_OR_CREATE" // reuse a healthy Appium session of the device, else create one
	DriverCreateNew     = "CREATE_NEW"      // a new session every run
	DriverReuseOnly     = "REUSE_ONLY"      // fail when no session can be reused
)

// installationPolicy values (issue 3).
const (
	InstallIfMissing            = "INSTALL_IF_MISSING"     // install only when the package is absent
	InstallReinstallIfDifferent = "REINSTALL_IF_DIFFERENT" // install when version or signer differs
	InstallAlwaysReinstall      = "ALWAYS_REINSTALL"       // reinstall every run
	InstallNever                = "NEVER_INSTALL"          // never install; report what is there
)

// launchAttachMode values (issue 3).
const (
	LaunchOrAttach = "LAUNCH_OR_ATTACH" // bring the existing task forward, else launch (am start without -S)
	ForceRestart   = "FORCE_RESTART"    // force-stop and launch (am start -S)
	AttachOnly     = "ATTACH_ONLY"      // fail unless the app is already in front
)

var (
	driverModes  = []string{DriverReuseOrCreate, DriverCreateNew, DriverReuseOnly}
	installModes = []string{InstallIfMissing, InstallReinstallIfDifferent, InstallAlwaysReinstall, InstallNever}
	launchModes  = []string{LaunchOrAttach, ForceRestart, AttachOnly}
)

// Duration is a time.Duration written as a Go duration string ("30s",
// "1m30s") or as an integer number of milliseconds in YAML/JSON.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	return Duration(v), err
}

// UnmarshalYAML accepts "30s" or 30000 (milliseconds).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a scalar", n.Line)
	}
	var ms int64
	if err := n.Decode(&ms); err == nil {
		*d = Duration(time.Duration(ms) * time.Millisecond)
		return nil
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalJSON accepts "30s" or 30000 (milliseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var ms int64
	if err := json.Unmarshal(b, &ms); err == nil {
		*d = Duration(time.Duration(ms) * time.Millisecond)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %s", b)
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Retry is a retry rule. Attempt n (1-based) that fails with an id in
// RetryOn is followed by attempt n+1 when n < MaxAttempts, after
// min(InitialBackoff * Multiplier^(n-1), MaxBackoff).
type Retry struct {
	MaxAttempts    int             `yaml:"maxAttempts" json:"maxAttempts"`
	InitialBackoff Duration        `yaml:"initialBackoff" json:"initialBackoff"`
	MaxBackoff     Duration        `yaml:"maxBackoff" json:"maxBackoff"`
	Multiplier     float64         `yaml:"multiplier" json:"multiplier"`
	RetryOn        []agent.ErrorID `yaml:"retryOn" json:"retryOn"`
	// MaxAttemptsByError lowers MaxAttempts for the ids it names (a value
	// above MaxAttempts has no effect): the default {app_crashed: 2} retries
	// a crash at launch once, with a fresh process. Set 1 to never retry it
	// (or leave app_crashed out of RetryOn); keys are errorIds, values >= 1.
	MaxAttemptsByError map[agent.ErrorID]int `yaml:"maxAttemptsByError,omitempty" json:"maxAttemptsByError,omitempty"`
}

// IdleHeuristics configure WaitIdle (idleHeuristicsConfiguration).
type IdleHeuristics struct {
	MinQuietMillis       int `yaml:"minQuietMillis" json:"minQuietMillis"`
	MaxWaitMillis        int `yaml:"maxWaitMillis" json:"maxWaitMillis"`
	SampleIntervalMillis int `yaml:"sampleIntervalMillis" json:"sampleIntervalMillis"`
	// CountQuietFromLastFrame lets WaitIdle start the quiet window at the
	// app's last frame in `dumpsys gfxinfo PKG framestats` (see nodes.WaitIdle).
	// Turn it off for apps that draw through a SurfaceView or TextureView
	// (video, maps, games, Flutter): those frames are not in framestats.
	CountQuietFromLastFrame bool `yaml:"countQuietFromLastFrame" json:"countQuietFromLastFrame"`
}

// Emulator says what happens to the emulators the host boots for runs
// (EnsureDevice naming an AVD that is not running, or CREATE_NEW).
type Emulator struct {
	// IdleKillMinutes: a booted emulator stays running after its run (warm
	// for the next run naming its AVD) and is killed once no run used it for
	// this many minutes; 0 keeps it for ever. Default 30: a cold boot costs
	// 15-30 s and a quick boot a few seconds, while an idle emulator holds
	// 2-4 GB of RAM.
	IdleKillMinutes int `yaml:"idleKillMinutes" json:"idleKillMinutes"`
	// QuickBoot boots from the AVD's default_boot snapshot when it loads
	// (cold boot otherwise, and when false: -no-snapshot-load). Default true.
	QuickBoot bool `yaml:"quickBoot" json:"quickBoot"`
	// SaveSnapshot lets the emulator save default_boot when it exits; false
	// (default, as CI runners do) passes -no-snapshot-save so the cached
	// snapshot stays the same for every run. -read-only instances never save.
	SaveSnapshot bool `yaml:"saveSnapshot" json:"saveSnapshot"`
}

// Policy is one policy document, e.g. in YAML:
//
//	version: 2
//	defaultTimeout: 60s
//	timeouts: {EnsureDevice: 2m, WaitIdle: 30s}
//	retries: {maxAttempts: 3, initialBackoff: 1s, maxBackoff: 10s, multiplier: 2,
//	          retryOn: [timeout, network_error, device_offline]}
//	nodeRetries: {ProvisionApp: {maxAttempts: 2, …}}
//	driverReusePolicy: REUSE_OR_CREATE
//	installationPolicy: INSTALL_IF_MISSING
//	launchAttachMode: LAUNCH_OR_ATTACH
//	idleHeuristics: {minQuietMillis: 500, maxWaitMillis: 10000, sampleIntervalMillis: 200}
//	emulator: {idleKillMinutes: 30, quickBoot: true, saveSnapshot: false}
type Policy struct {
	PolicyVersion int `yaml:"version" json:"version"`
	// DefaultTimeout applies to nodes without an entry in Timeouts; 0 = none.
	DefaultTimeout Duration            `yaml:"defaultTimeout" json:"defaultTimeout"`
	Timeouts       map[string]Duration `yaml:"timeouts" json:"timeouts"`
	// Retries is the rule for nodes without an entry in NodeRetries.
	Retries            Retry            `yaml:"retries" json:"retries"`
	NodeRetries        map[string]Retry `yaml:"nodeRetries,omitempty" json:"nodeRetries,omitempty"`
	DriverReusePolicy  string           `yaml:"driverReusePolicy" json:"driverReusePolicy"`
	InstallationPolicy string           `yaml:"installationPolicy" json:"installationPolicy"`
	LaunchAttachMode   string           `yaml:"launchAttachMode" json:"launchAttachMode"`
	Idle               IdleHeuristics   `yaml:"idleHeuristics" json:"idleHeuristics"`
	Emulator           Emulator         `yaml:"emulator" json:"emulator"`
	Evidence           Evidence         `yaml:"evidence" json:"evidence"`
}

var _ agent.RetryPolicy = (*Policy)(nil)

// Default returns version 1 with these values and reasons:
//   - EnsureDevice 3m: a cold emulator boot takes 15-28 s and a first
//     UiAutomator2 session ~20 s on real devices (appium#11527), plus the
//     server APK installs on a fresh device. It exceeds the node's default
//     boot wait (bootTimeoutMillis 120 s) by a minute, so a device that
//     never boots ends as boot_timeout (not retried) inside the node's
//     deadline, and a device that boots late still has time for its session.
//     EnsureDevice also cuts its boot wait to end before a shorter timeout.
//   - ProvisionApp 5m: artifact download + `pm install` of large APKs.
//   - LaunchOrAttach 1m: `am start -W` returns in seconds; heavy cold starts
//     take 10-20 s.
//   - WaitIdle 30s: maxWaitMillis (10 s) plus the sampling and adb round trips.
//   - default 1m for nodes added later.
//   - retries: 3 attempts, 1 s doubling to at most 10 s: transient adb /
//     Appium hiccups (a brief `device offline` right after an install) pass
//     within seconds; three attempts bound a run to about 3x a node's timeout.
//   - retryOn: exactly the ids agent.DefaultRetryable marks transient;
//     boot_timeout and idle_timeout are not retried (a boot that did not
//     finish in 2 minutes, or a never-idle screen, stays so). retryOn only
//     narrows: the engine retries a failure only when the adapter classified
//     it retryable too, so an artifact_unavailable from an HTTP 404 or an
//     APK that does not verify runs once and reports retryable false.
//   - app_crashed: retried once (maxAttemptsByError 2). LaunchOrAttach
//     starts a retry with a fresh process (am start -S), so a crash that
//     depends on leftover state or timing gets one more chance; a crash
//     that repeats is the app's bug, and more attempts only repeat it.
//     app_not_responding is not retried.
//   - resource_exhausted (the host out of file descriptors or disk): retried
//     like a transient failure, after the back-off; it is the daemon's host
//     that is short, so it is not reported as a network failure.
//   - modes: the spec's examples; REUSE_OR_CREATE saves the ~20 s session
//     creation per run.
//   - idle: 500 ms quiet within 10 s, as UiAutomation.waitForIdle(500, 10000);
//     sampled every 200 ms as Maestro compares hierarchies.
func Default() *Policy {
	return &Policy{
		PolicyVersion:  1,
		DefaultTimeout: Duration(time.Minute),
		Timeouts: map[string]Duration{
			NodeEnsureDevice:   Duration(3 * time.Minute),
			NodeProvisionApp:   Duration(5 * time.Minute),
			NodeLaunchOrAttach: Duration(time.Minute),
			NodeWaitIdle:       Duration(30 * time.Second),
		},
		Retries: Retry{
			MaxAttempts: 3, InitialBackoff: Duration(time.Second), MaxBackoff: Duration(10 * time.Second), Multiplier: 2,
			RetryOn: []agent.ErrorID{agent.ErrTimeout, agent.ErrNetwork, agent.ErrDeviceOffline, agent.ErrAppiumUnreachable,
				agent.ErrSessionCreateFailed, agent.ErrArtifactUnavailable, agent.ErrLaunchTimeout, agent.ErrAppCrashed,
				agent.ErrStoreUnavailable, agent.ErrResourceExhausted},
			MaxAttemptsByError: map[agent.ErrorID]int{agent.ErrAppCrashed: 2},
		},
		DriverReusePolicy:  DriverReuseOrCreate,
		InstallationPolicy: InstallIfMissing,
		LaunchAttachMode:   LaunchOrAttach,
		Idle: IdleHeuristics{MinQuietMillis: 500, MaxWaitMillis: 10000, SampleIntervalMillis: 200,
			CountQuietFromLastFrame: true},
		Emulator: Emulator{IdleKillMinutes: 30, QuickBoot: true},
		Evidence: defaultEvidence(),
	}
}

// Parse reads a YAML (or JSON) document over Default(): keys the document
// omits keep their default, maps merge key by key. The document must set
// version. Unknown keys are errors. The result is validated.
func Parse(data []byte) (*Policy, error) {
	var probe struct {
		Version *int `yaml:"version"`
	}
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if probe.Version == nil {
		return nil, errors.New("policy: version is required")
	}
	p := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Load reads and parses the policy file at path (see Parse).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Validate reports every problem of p at once (errors.Join).
func (p *Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("policy: "+format, args...)) }
	if p.PolicyVersion < 1 {
		bad("version %d: must be >= 1", p.PolicyVersion)
	}
	p.validateTimeouts(bad)
	p.Retries.validate("retries", bad)
	for n, r := range p.NodeRetries {
		r.validate("nodeRetries."+n, bad)
	}
	p.validateModes(bad)
	if p.Emulator.IdleKillMinutes < 0 {
		bad("emulator.idleKillMinutes %d: must be >= 0 (0 keeps booted emulators warm for ever)", p.Emulator.IdleKillMinutes)
	}
	p.Evidence.validate(bad)
	p.Idle.validate(bad)
	return errors.Join(errs...)
}

// validateTimeouts: durations are >= 0, and each per-node one names a node.
func (p *Policy) validateTimeouts(bad func(format string, args ...any)) {
	if p.DefaultTimeout < 0 {
		bad("defaultTimeout %s is negative", p.DefaultTimeout.D())
	}
	for n, d := range p.Timeouts {
		if n == "" || d < 0 {
			bad("timeouts[%q] = %s: need a node name and a duration >= 0", n, d.D())
		}
	}
}

// validate reports r's problems, naming it where ("retries",
// "nodeRetries.<node>").
func (r Retry) validate(where string, bad func(format string, args ...any)) {
	if r.MaxAttempts < 1 {
		bad("%s.maxAttempts %d: must be >= 1", where, r.MaxAttempts)
	}
	if r.InitialBackoff < 0 || r.MaxBackoff < r.InitialBackoff {
		bad("%s: need 0 <= initialBackoff (%s) <= maxBackoff (%s)", where, r.InitialBackoff.D(), r.MaxBackoff.D())
	}
	if r.Multiplier < 1 || math.IsInf(r.Multiplier, 0) || math.IsNaN(r.Multiplier) {
		bad("%s.multiplier %v: must be a finite number >= 1", where, r.Multiplier)
	}
	for _, id := range r.RetryOn {
		if !slices.Contains(agent.ErrorIDs, id) {
			bad("%s.retryOn: unknown errorId %q", where, id)
		}
	}
	for id, n := range r.MaxAttemptsByError {
		if !slices.Contains(agent.ErrorIDs, id) || n < 1 {
			bad("%s.maxAttemptsByError[%q] = %d: need a known errorId and a count >= 1", where, id, n)
		}
	}
}

// validateModes: each mode field holds one of its known values.
func (p *Policy) validateModes(bad func(format string, args ...any)) {
	for _, m := range []struct {
		field, v string
		ok       []string
	}{
		{"driverReusePolicy", p.DriverReusePolicy, driverModes},
		{"installationPolicy", p.InstallationPolicy, installModes},
		{"launchAttachMode", p.LaunchAttachMode, launchModes},
	} {
		if !slices.Contains(m.ok, m.v) {
			bad("%s %q: want one of %v", m.field, m.v, m.ok)
		}
	}
}

// validate: 0 < sampleIntervalMillis <= minQuietMillis <= maxWaitMillis.
func (i IdleHeuristics) validate(bad func(format string, args ...any)) {
	if i.MinQuietMillis <= 0 || i.SampleIntervalMillis <= 0 || i.SampleIntervalMillis > i.MinQuietMillis || i.MaxWaitMillis < i.MinQuietMillis {
		bad("idleHeuristics %+v: need 0 < sampleIntervalMillis <= minQuietMillis <= maxWaitMillis", i)
	}
}

// Version is the document's version.
func (p *Policy) Version() int { return p.PolicyVersion }

// Timeout is node's attempt deadline: Timeouts[node], else DefaultTimeout.
func (p *Policy) Timeout(node string) time.Duration {
	if d, ok := p.Timeouts[node]; ok {
		return d.D()
	}
	return p.DefaultTimeout.D()
}

// RetryFor is the rule for node: NodeRetries[node], else Retries.
func (p *Policy) RetryFor(node string) Retry {
	if r, ok := p.NodeRetries[node]; ok {
		return r
	}
	return p.Retries
}

// Retryable says whether node's rule lists id.
func (p *Policy) Retryable(node string, id agent.ErrorID) bool {
	return slices.Contains(p.RetryFor(node).RetryOn, id)
}

// Decide is the method form of Decide.
func (p *Policy) Decide(node string, id agent.ErrorID, attempt int) (bool, time.Duration) {
	return Decide(p, node, id, attempt)
}

// Decide says whether attempt (1-based) of node, failed with id, gets
// another attempt and after which backoff. Pure: same inputs, same answer.
// It knows only the id: the engine asks it only for failures classified
// retryable at the adapter boundary (agent.Error.Retryable).
func Decide(p *Policy, node string, id agent.ErrorID, attempt int) (retry bool, backoff time.Duration) {
	r := p.RetryFor(node)
	limit := r.MaxAttempts
	if n, ok := r.MaxAttemptsByError[id]; ok && n < limit {
		limit = n
	}
	if attempt < 1 || attempt >= limit || !slices.Contains(r.RetryOn, id) {
		return false, 0
	}
	b := float64(r.InitialBackoff) * math.Pow(r.Multiplier, float64(attempt-1))
	if b > float64(r.MaxBackoff) || math.IsInf(b, 0) {
		return true, r.MaxBackoff.D()
	}
	return true, time.Duration(b)
}
