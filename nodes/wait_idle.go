package nodes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/android"
	"github.com/screengraph/screengraph-agent/policy"
)

// Defaults of WaitIdle (the schema's "default" values say the same).
const (
	DefaultMinQuiet       = 400 * time.Millisecond
	DefaultMaxWait        = 5 * time.Second
	DefaultSampleInterval = 200 * time.Millisecond
	// ProbeSlack bounds a sample that starts just before maxWaitMillis: it is
	// abandoned this long after the deadline, so a hung probe cannot hold the
	// node.
	ProbeSlack = time.Second
)

// NetworkInFlightStatus is networkInFlightStatus.
type NetworkInFlightStatus string

const (
	NetworkNone    NetworkInFlightStatus = "NONE"
	NetworkActive  NetworkInFlightStatus = "ACTIVE"
	NetworkUnknown NetworkInFlightStatus = "UNKNOWN"
)

// IdleHeuristicsConfiguration is WaitIdle's idleHeuristicsConfiguration. A nil
// field takes its default (400, 5000, 200 ms, true).
type IdleHeuristicsConfiguration struct {
	MinQuietMillis *int64 `json:"minQuietMillis,omitempty"`
	MaxWaitMillis  *int64 `json:"maxWaitMillis,omitempty"`
	// SamplingIntervalMillis spaces the samples. Extension.
	SamplingIntervalMillis *int64 `json:"samplingIntervalMillis,omitempty"`
	// CountQuietFromLastFrame: the quiet window may start at the app's last
	// frame (see WaitIdle); nil means true. Extension.
	CountQuietFromLastFrame *bool `json:"countQuietFromLastFrame,omitempty"`
}

// WaitIdleInput is WaitIdle's Input (screengraph-nodes.md §4). The spec's
// input names only the heuristics; the session (for the UI hierarchy) and the
// package (for frame counters and sockets) come from the earlier nodes'
// deviceRuntimeContext and applicationUnderTestDescriptor. Without a package
// the foreground app's package is used.
type WaitIdleInput struct {
	RunID                          string                          `json:"runId"`
	TenantID                       string                          `json:"tenantId,omitempty"`
	ProjectID                      string                          `json:"projectId,omitempty"`
	IterationOrdinalNumber         int                             `json:"iterationOrdinalNumber,omitempty"`
	DeviceRuntimeContext           *DeviceRuntimeContext           `json:"deviceRuntimeContext,omitempty"`
	ApplicationUnderTestDescriptor *ApplicationUnderTestDescriptor `json:"applicationUnderTestDescriptor,omitempty"`
	IdleHeuristicsConfiguration    IdleHeuristicsConfiguration     `json:"idleHeuristicsConfiguration"`
	// Evidence says what of the idle screen the run's success evidence
	// keeps; the setup graph sets it from the policy's onSuccess. Not
	// part of the JSON input.
	Evidence IdleEvidence `json:"-"`
}

// IdleEvidence is what a successful WaitIdle hands to Ports.IdleScreens:
// the proving sample's page source (Hierarchy) and a screenshot proven to
// show the idle screen (Screenshot), for the evidence of the attempt
// StepOrdinal/Attempt of the run.
type IdleEvidence struct {
	StepOrdinal, Attempt  int
	Screenshot, Hierarchy bool
}

// UIStabilityAssessment is WaitIdle's verdict.
type UIStabilityAssessment struct {
	// QuietWindowObservedMillis is how long all signals had been unchanged
	// at the last sample (>= minQuietMillis on success).
	QuietWindowObservedMillis int64                 `json:"quietWindowObservedMillis"`
	NetworkInFlightStatus     NetworkInFlightStatus `json:"networkInFlightStatus"`
}

// WaitIdleOutput is WaitIdle's Output. On idle_timeout the assessment is still
// filled (the quiet window reached, the network status last seen); on other
// failures it is null.
type WaitIdleOutput struct {
	RunID                 string                 `json:"runId"`
	UIStabilityAssessment *UIStabilityAssessment `json:"uiStabilityAssessment"`
	// AppFailure describes the crash or ANR of an app_crashed /
	// app_not_responding failure; absent otherwise. Extension.
	AppFailure *AppFailure `json:"appFailure,omitempty"`
	// DismissedSystemDialogs lists the system error dialogs (not the app's)
	// dismissed while waiting. Extension.
	DismissedSystemDialogs []DismissedDialog `json:"dismissedSystemDialogs,omitempty"`
	Common
}

// sampleSplit separates the parts of one sample's combined shell command.
const sampleSplit = android.SampleSplit

// ConfirmGap is the shortest spacing of two samples: one vsync at 60 Hz, so
// a change pending at the first sample has been drawn by the second.
const ConfirmGap = 17 * time.Millisecond

// WaitIdle waits until the UI is quiet: it samples three signals and calls
// the UI idle once all of them stayed unchanged for minQuietMillis:
//   - the UI hierarchy: SHA-256 of Driver.PageSource of the session (skipped
//     when there is no session id);
//   - frames: `dumpsys gfxinfo PKG framestats`: "Total frames rendered"
//     (parse.ParseGfxinfo) and the newest frame's FrameCompleted
//     (parse.ParseFramestats) unchanged (skipped while the package has no
//     process);
//   - focus: the focused window and focused app of `dumpsys window displays`
//     (parse.ParseWindowFocus) unchanged.
//
// The quiet window starts at the first of a run of unchanged samples, or
// earlier, at the app's last frame: framestats timestamps and the dump's
// "Uptime:" share the device's CLOCK_MONOTONIC, so the dump tells how long the
// app has drawn nothing. Every change of the app's hierarchy or focus is
// drawn at the next vsync, so no frame since T means nothing the app shows
// changed since T. That earlier start counts only once a second sample
// (ConfirmGap or more later) found all three signals unchanged, and never
// reaches back before the previous, different sample. On a screen that
// settled before WaitIdle began, the node therefore returns after two
// samples instead of waiting minQuietMillis afresh; quietWindowObservedMillis
// then reports the quiet time since the last frame. Frames an app draws
// through a SurfaceView or TextureView (video, maps, games, Flutter) are not
// in framestats: countQuietFromLastFrame=false turns the earlier start off.
//
// Samples are spaced by samplingIntervalMillis at most, sooner when the
// window would be complete earlier (never closer than ConfirmGap). The page
// source is read while one shell round trip reads gfxinfo, window focus and
// the socket tables (the first sample's also the app's uid; see takeSample).
// A sample whose reads fail with a retryable error counts as a change; a
// non-retryable error ends the node with it.
//
// networkInFlightStatus is measured from the last sample's /proc/net/tcp and
// /proc/net/tcp6 (kernel tcp4_seq_show/tcp6_seq_show format): ACTIVE when a
// row owned by the app's uid (`dumpsys package PKG` userId=/appId=, read by
// the first sample's shell; else `pm list packages -U PKG`) has a non-zero
// tx_queue or rx_queue (bytes not yet acknowledged / not yet read), NONE
// when the app's rows (if any) all have empty queues, UNKNOWN when the uid or
// the tables cannot be read. Idle sockets with empty queues (keep-alive
// connections) do not count as in flight.
//
// idle_timeout (not retryable) when the window is not reached within
// maxWaitMillis; samples are clipped to that deadline, so the node returns at
// most one sample (plus ProbeSlack for a hung one) after it.
//
// Crashes and ANRs while waiting: each sample's shell also reads `pidof PKG`
// (the first one `date +%s.%N` too: crash reports count from then). The
// app's process gone after a sample saw it (or absent from the start with a
// crash report of it in the last CrashLookback), or its "Application Error"
// dialog, ends the node with app_crashed, not retryable (retrying WaitIdle
// does not restart the app); its "Application Not Responding" dialog with
// app_not_responding. Neither ends as idle or idle_timeout. appFailure
// carries the evidence (see LaunchOrAttach). A focused error dialog of
// another process is dismissed and listed in dismissedSystemDialogs; the
// quiet window starts again after it.
func WaitIdle(ctx context.Context, in WaitIdleInput, p Ports) (WaitIdleOutput, error) {
	out := WaitIdleOutput{RunID: in.RunID, Common: Common{NodeName: NodeWaitIdle}}
	w := &appWatch{}
	a, err := waitIdle(ctx, in, p, w)
	out.UIStabilityAssessment = a
	out.DismissedSystemDialogs = w.dismissed
	if f, ok := errors.AsType[*appFailureError](err); ok {
		out.AppFailure = f.f
		err = f.e
	}
	if e := MarkFailure(&out.Common, err); e != nil {
		p.Logf("WaitIdle failed: %s", e.Error())
		if e.ID != agent.ErrIdleTimeout {
			out.UIStabilityAssessment = nil
		}
		return out, e
	}
	return out, nil
}

func millisOr(v *int64, def time.Duration) time.Duration {
	if v == nil || *v < 0 {
		return def
	}
	return time.Duration(*v) * time.Millisecond
}

type idleSignature struct {
	hierarchy   string
	frames      int64
	newestFrame int64 // FrameCompleted of the newest frame row, device ns
	focus       string
}

// idleSample is one reading of the signals.
type idleSample struct {
	sig *idleSignature
	// sinceFrame is how long before the dump the app last completed a frame
	// (device clock); -1 when framestats did not say.
	sinceFrame time.Duration
	net        NetworkInFlightStatus
	// changedByError: a signal could not be read for a retryable reason.
	changedByError bool
	// uid is the app's uid the sample's network status was measured with:
	// the one takeSample was given, or the one it read (-1: unknown).
	uid int
	// window is the sample's `dumpsys window displays` output (its error
	// dialogs); pids the app's pids (nil: not read); epochMillis the device
	// clock read by the first sample (0: not read).
	window      string
	pids        *[]int
	epochMillis int64
	// source is the page source the hierarchy hash was taken of ("" when
	// not read).
	source string
}

// CrashLookback is how far back WaitIdle looks for a crash report when the
// app has no process at its first sample (it died between LaunchOrAttach
// and WaitIdle).
const CrashLookback = 30 * time.Second

func waitIdle(ctx context.Context, in WaitIdleInput, p Ports, w *appWatch) (*UIStabilityAssessment, error) {
	if p.Device == nil {
		return nil, agent.Errorf(agent.ErrInternal, "WaitIdle needs a Device port")
	}
	sm := newSampler(in, p, w)
	sctx, cancel := context.WithTimeout(ctx, sm.maxWait+ProbeSlack)
	defer cancel()
	if err := sm.target(sctx); err != nil {
		return nil, deadlineAware(ctx, sctx, err)
	}
	for {
		shot := sm.pending
		sm.pending = nil
		sampledAt := p.Now()
		x, ok, err := sm.sample(ctx, sctx)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		now := p.Now()
		sm.compare(x, now, shot)
		if a, done, err := sm.confirm(x, now); done {
			return a, err
		}
		if err := sm.pause(ctx, sctx, x, now, sampledAt); err != nil {
			return nil, err
		}
	}
}

// sampler is WaitIdle's state machine. Each turn: sample (read the signals,
// watch the app), compare (with the previous signature: the quiet window's
// start), confirm (idle, idle_timeout, or not yet) and pause (the wait
// before the next sample, with the evidence's screenshot taken in it when
// the next sample may prove idle).
type sampler struct {
	in WaitIdleInput
	p  Ports
	w  *appWatch

	minQuiet, maxWait, interval time.Duration
	fromLastFrame               bool
	start, deadline             time.Time
	sessionID, pkg              string
	// uid is the app's uid, read within the first sample that completes
	// (see takeSample); uidPending until then.
	uid        int
	uidPending bool
	signals    []string
	n          int // samples begun

	prev *idleSignature
	// quietSince: the first sample of the current unchanged run;
	// lastFrameAt: the app's last frame as the run's first sample dated it
	// (host clock, zero when unknown); prevAt: the previous sample.
	quietSince, lastFrameAt, prevAt time.Time
	confirmed                       bool
	net                             NetworkInFlightStatus

	keep bool
	// pending: the screenshot taken in the wait before this sample (see
	// speculate); held: one that shows the current signature (the sample
	// after it and every one since were unchanged), nil after any change.
	pending, held *idleShot
	shots         int
}

func newSampler(in WaitIdleInput, p Ports, w *appWatch) *sampler {
	h := in.IdleHeuristicsConfiguration
	sm := &sampler{in: in, p: p, w: w, net: NetworkUnknown, uid: -1,
		minQuiet: millisOr(h.MinQuietMillis, DefaultMinQuiet),
		maxWait:  millisOr(h.MaxWaitMillis, DefaultMaxWait),
		interval: millisOr(h.SamplingIntervalMillis, DefaultSampleInterval),
		keep:     p.IdleScreens != nil && in.RunID != "" && (in.Evidence.Screenshot || in.Evidence.Hierarchy),
	}
	if sm.interval <= 0 {
		sm.interval = DefaultSampleInterval
	}
	sm.fromLastFrame = h.CountQuietFromLastFrame == nil || *h.CountQuietFromLastFrame
	sm.start = p.Now()
	sm.deadline = sm.start.Add(sm.maxWait)
	return sm
}

// target names what is sampled: the session's hierarchy (when there is a
// session and a driver), the package's frames (the input's package, else
// the foreground app's) and the focus.
func (sm *sampler) target(sctx context.Context) error {
	if sm.p.Driver != nil {
		sm.sessionID = sm.in.DeviceRuntimeContext.sessionID()
	}
	if a := sm.in.ApplicationUnderTestDescriptor; a != nil {
		sm.pkg = a.AndroidPackageID
	}
	if sm.pkg == "" {
		fg, _, err := android.ForegroundActivity(sctx, sm.p.Device)
		if err != nil {
			return err
		}
		sm.pkg = fg.Package
	}
	sm.w.pkg = sm.pkg
	sm.uidPending = sm.pkg != ""
	if sm.sessionID != "" {
		sm.signals = append(sm.signals, "hierarchy")
	}
	if sm.pkg != "" {
		sm.signals = append(sm.signals, "frames")
	}
	sm.signals = append(sm.signals, "focus")
	if !sm.uidPending {
		sm.logStart()
	}
	return nil
}

func (sm *sampler) logStart() {
	sm.p.Logf("waiting for idle: quiet %v within %v, sampling every %v; signals %s; package %q uid %d",
		sm.minQuiet, sm.maxWait, sm.interval, strings.Join(sm.signals, "+"), sm.pkg, sm.uid)
}

// sample reads the signals once and watches the app in them. ok false:
// sample again at once (the session went away, or a system dialog was
// dismissed: the quiet window starts again). err ends the node (the app's
// crash or ANR, a non-retryable read error).
func (sm *sampler) sample(ctx, sctx context.Context) (idleSample, bool, error) {
	sm.n++
	x, err := takeSample(sctx, sm.p, sm.sessionID, sm.pkg, sm.uid, sm.uidPending)
	if err != nil && sm.sessionID != "" && sessionGone(err) {
		// The session cannot serve the hierarchy any more (its on-device
		// server died); frames and focus still tell whether the UI settles,
		// and the next EnsureDevice replaces the session.
		sm.p.Logf("UI hierarchy unavailable (%v): waiting on frames and focus only", err)
		sm.sessionID, sm.prev, sm.held = "", nil, nil
		sm.signals = slices.DeleteFunc(sm.signals, func(s string) bool { return s == "hierarchy" })
		return x, false, nil
	}
	if err != nil {
		return x, false, deadlineAware(ctx, sctx, err)
	}
	first := sm.uidPending
	if sm.uidPending {
		sm.uid, sm.uidPending = x.uid, false
		sm.logStart()
	}
	if sm.pkg == "" || x.changedByError {
		return x, true, nil
	}
	f, dismissed, err := watchSample(sctx, sm.p, sm.w, sm.sessionID, x, first)
	switch {
	case err != nil:
		return x, false, deadlineAware(ctx, sctx, err)
	case f != nil:
		return x, false, failApp(f, false)
	case dismissed:
		sm.prev, sm.held = nil, nil // the screen changed: the quiet window starts again
		return x, false, nil
	}
	return x, true, nil
}

// compare sets the quiet window from sample x taken at now: a changed (or
// unreadable) signature starts it again at now, or at the app's last frame
// (never before the previous sample); an unchanged one confirms it, and
// the screenshot taken before x (shot) then shows the idle screen.
func (sm *sampler) compare(x idleSample, now time.Time, shot *idleShot) {
	if x.net != "" {
		sm.net = x.net
	}
	if x.changedByError || sm.prev == nil || *x.sig != *sm.prev {
		sm.held = nil
		sm.prev, sm.quietSince, sm.confirmed, sm.lastFrameAt = x.sig, now, false, time.Time{}
		if sm.fromLastFrame && !x.changedByError && x.sinceFrame >= 0 {
			sm.lastFrameAt = now.Add(-x.sinceFrame)
			if !sm.prevAt.IsZero() && sm.lastFrameAt.Before(sm.prevAt) {
				sm.lastFrameAt = sm.prevAt
			}
		}
	} else {
		sm.confirmed = true
		if shot != nil && shot.err == nil {
			sm.held = shot
		}
	}
	sm.prevAt = now
}

// quietFrom is where the quiet window starts at now: the run's first
// sample, or the app's last frame once a second sample confirmed it.
func (sm *sampler) quietFrom() time.Time {
	if sm.confirmed && !sm.lastFrameAt.IsZero() && sm.lastFrameAt.Before(sm.quietSince) {
		return sm.lastFrameAt
	}
	return sm.quietSince
}

// confirm judges the window at now: idle (the assessment; the evidence is
// handed over), idle_timeout past the deadline, else not done.
func (sm *sampler) confirm(x idleSample, now time.Time) (*UIStabilityAssessment, bool, error) {
	from := sm.quietFrom()
	quiet := now.Sub(from)
	a := &UIStabilityAssessment{QuietWindowObservedMillis: quiet.Milliseconds(), NetworkInFlightStatus: sm.net}
	if quiet >= sm.minQuiet && !x.changedByError {
		how := "unchanged samples"
		if from.Before(sm.quietSince) {
			how = fmt.Sprintf("back to the app's last frame; unchanged over samples %v apart", now.Sub(sm.quietSince).Round(time.Millisecond))
		}
		sm.p.Logf("idle after %v (%d samples), quiet for %v (%s), network %s",
			now.Sub(sm.start).Round(time.Millisecond), sm.n, quiet.Round(time.Millisecond), how, sm.net)
		if sm.keep {
			keepIdleScreen(sm.p, sm.in.RunID, sm.in.Evidence, sm.sessionID, x, sm.held, now)
		}
		return a, true, nil
	}
	if !now.Before(sm.deadline) {
		return a, true, agent.Errorf(agent.ErrIdleTimeout, "UI not idle within %v: quiet for %v at most recently, %v needed (signals %s)",
			sm.maxWait, quiet.Round(time.Millisecond), sm.minQuiet, strings.Join(sm.signals, "+"))
	}
	return a, false, nil
}

// nextWait is the wait before the next sample: until the window would be
// complete (counting back to the last frame once confirmed), at most one
// interval, at least ConfirmGap, never past the deadline. potential is the
// quiet time the window may count at now.
func (sm *sampler) nextWait(now time.Time) (wait, potential time.Duration) {
	potential = now.Sub(sm.quietSince)
	if !sm.lastFrameAt.IsZero() && sm.lastFrameAt.Before(sm.quietSince) {
		potential = now.Sub(sm.lastFrameAt)
	}
	return min(sm.interval, max(sm.minQuiet-potential, ConfirmGap), sm.deadline.Sub(now)), potential
}

// speculates: take the evidence's screenshot in this wait. The next
// sample, or the one after it, completes the window (one interval more
// than this sample's own duration, for a slower next sample under load):
// a shot taken a sample early is held while the signature holds, so it
// costs nothing more on a quiet screen.
func (sm *sampler) speculates(x idleSample, now, sampledAt time.Time, wait, potential time.Duration) bool {
	return sm.keep && sm.in.Evidence.Screenshot && sm.held == nil && sm.shots < MaxIdleShots && wait < sm.deadline.Sub(now) &&
		potential+wait+sm.interval+now.Sub(sampledAt) >= sm.minQuiet && presentedBefore(x, sm.confirmed, now.Sub(sm.quietSince))
}

// pause waits before the next sample, taking the screenshot in the wait
// when speculates says so.
func (sm *sampler) pause(ctx, sctx context.Context, x idleSample, now, sampledAt time.Time) error {
	wait, potential := sm.nextWait(now)
	if sm.speculates(x, now, sampledAt, wait, potential) {
		sm.shots++
		left := sm.deadline.Sub(now)
		if sm.pending = speculate(ctx, sctx, sm.p, wait, wait+min(IdleShotBudget, left-wait)); sm.pending == nil {
			return ctxErr(ctx, "waiting for idle")
		}
		return nil
	}
	if err := sm.p.Wait(ctx, wait); err != nil {
		return ctxErr(ctx, "waiting for idle")
	}
	return nil
}

// MaxIdleShots bounds the screenshots one WaitIdle takes for its success
// evidence: a screen that keeps changing just before the window completes
// costs the device at most this many screencaps.
const MaxIdleShots = 3

// IdleShotBudget is how much longer than its wait the proving sample waits
// for the screenshot taken before it (see speculate): far more than
// `screencap -p` takes on an emulator or a phone, so only a wedged one is
// abandoned.
const IdleShotBudget = 2 * time.Second

// FramePresentMargin is how old the app's newest frame must be before a
// screenshot may stand for the idle screen: a completed frame reaches the
// display at a later vsync (SurfaceFlinger latches and composes it), up to
// about three at 60 Hz with triple buffering.
const FramePresentMargin = 50 * time.Millisecond

// idleShot is a screenshot taken in the wait before a sample.
type idleShot struct {
	png []byte
	err error
}

// presentedBefore: the screen s saw is on the display, so a screenshot
// started after s shows it. framestats date the app's newest frame
// (sinceFrame at s's dump); without them the signature must have held for
// FramePresentMargin already (quietFor, confirmed by a second sample).
func presentedBefore(s idleSample, confirmed bool, quietFor time.Duration) bool {
	if s.changedByError {
		return false
	}
	if s.sinceFrame >= 0 {
		return s.sinceFrame >= FramePresentMargin
	}
	return confirmed && quietFor >= FramePresentMargin
}

// speculate takes a screenshot (device.Screencap, `screencap -p`) during the
// wait before a sample close to completing the quiet window, and returns
// once both the wait and the screenshot are over; nil when ctx ended.
//
// Why that screenshot shows the idle screen when the next sample, and every
// one up to the one proving idle, saw the signature unchanged: the
// screencap starts after the previous sample's reads returned and ends
// before the next sample's reads begin (this function returns first), so it
// lies between the two samples' dumps. All dumps from the previous one to
// the proving one saw the same signature: the same "Total frames rendered" and newest
// FrameCompleted (no frame of the app completed between the dumps; both
// counters are the device's own), the same page source hash and the same
// focused window. An app changes what it shows only by drawing a frame, and
// its newest frame was at least FramePresentMargin old when the screencap
// began (presentedBefore), so it was on the display already; other windows
// taking the focus would change the focus signal. So the display the
// screencap read is the one the proving sample calls idle. A sample that is
// not unchanged (or a dismissed dialog, a lost session) discards the shot.
// Overlapping the screencap with the proving sample would not be proven: a
// frame drawn after that sample's gfxinfo dump but before the screencap
// read the display is in no dump. The cost on the critical path is the
// screencap's time beyond the wait.
//
// The screencap gets budget (the wait plus IdleShotBudget, never past
// maxWaitMillis): a wedged one is abandoned (and its shot discarded) rather
// than let it turn an idle screen into idle_timeout.
func speculate(ctx, sctx context.Context, p Ports, wait, budget time.Duration) *idleShot {
	cctx, cancel := context.WithTimeout(sctx, budget)
	defer cancel() // ends an abandoned screencap
	done := make(chan idleShot, 1)
	go func() {
		b, err := device.Screencap(cctx, p.Device, agent.MaxArtifactBytes)
		done <- idleShot{png: b, err: err}
	}()
	if err := p.Wait(ctx, wait); err != nil {
		return nil
	}
	select {
	case shot := <-done:
		return &shot
	case <-cctx.Done():
		return &idleShot{err: cctx.Err()}
	}
}

// keepIdleScreen hands the proving sample's page source and the screenshot
// held (one that shows the idle screen, see speculate; nil: none) to
// p.IdleScreens for the run's success evidence.
func keepIdleScreen(p Ports, runID string, ev IdleEvidence, sessionID string, s idleSample, held *idleShot, now time.Time) {
	scr := device.IdleScreen{RunID: runID, StepOrdinal: ev.StepOrdinal, Attempt: ev.Attempt,
		Serial: p.Device.Serial(), SessionID: sessionID, At: now}
	if ev.Hierarchy && sessionID != "" {
		scr.PageSource = s.source
	}
	if ev.Screenshot && held != nil {
		scr.Screenshot = held.png
	}
	if scr.PageSource != "" || scr.Screenshot != nil {
		p.IdleScreens.Keep(scr)
	}
}

// CodeSessionGone is the agent.Error Code of a driver call on a session that
// can no longer serve (W3C "invalid session id"; the Appium adapter also gives
// it to a session whose instrumentation died).
const CodeSessionGone = "invalid session id"

func sessionGone(err error) bool {
	var e *agent.Error
	return errors.As(err, &e) && e.Code == CodeSessionGone
}

// deadlineAware reports a probe cut by the node's own sampling bound as
// idle_timeout, not as the caller's timeout.
func deadlineAware(ctx, sctx context.Context, err error) error {
	if ctx.Err() == nil && sctx.Err() != nil {
		return agent.Wrap(agent.ErrIdleTimeout, err, "probe did not answer before maxWaitMillis")
	}
	return err
}

// takeSample reads all signals once: the page source through the driver
// while one shell round trip reads the device's signals
// (android.ReadSignals; with readUID, the first sample, also the app's uid
// and the device clock). The sample's network status is measured with that
// uid, returned in s.uid. With readUID, a nil error means the uid lookup is
// done (s.uid may be -1); when the shell failed, `pm list packages -U PKG`
// is asked for it.
func takeSample(ctx context.Context, p Ports, sessionID, pkg string, uid int, readUID bool) (idleSample, error) {
	s := idleSample{sig: &idleSignature{frames: -1}, sinceFrame: -1, uid: uid}
	var src string
	var srcErr error
	var wg sync.WaitGroup
	if sessionID != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, srcErr = p.Driver.PageSource(ctx, sessionID)
		}()
	}
	readUID = readUID && pkg != ""
	sig, err := android.ReadSignals(ctx, p.Device, pkg, uid, readUID)
	wg.Wait()
	if sessionID != "" {
		if srcErr != nil {
			if e := agent.Classify(srcErr); !e.Retryable {
				return s, e
			}
			s.changedByError = true
		} else {
			sum := sha256.Sum256([]byte(src))
			s.sig.hierarchy = fmt.Sprintf("%x", sum)
			s.source = src
		}
	}
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return s, e
		}
		s.changedByError = true
		if readUID {
			s.uid = android.PmListUID(ctx, p.Device, pkg)
		}
		return s, nil
	}
	s.uid, s.epochMillis = sig.UID, sig.EpochMillis
	if sig.Unread {
		s.changedByError = true
		return s, nil
	}
	s.sig.frames, s.sig.newestFrame, s.sig.focus, s.sinceFrame = sig.Frames, sig.NewestFrame, sig.Focus, sig.SinceFrame
	s.window, s.pids = sig.Window, sig.PIDs
	s.net = NetworkStatus(sig.Tables, s.uid)
	return s, nil
}

// watchSample looks at one sample for the app's crash or ANR (see WaitIdle):
// its error dialogs, then its pids against the ones seen before.
func watchSample(ctx context.Context, p Ports, w *appWatch, sessionID string, s idleSample, first bool) (*AppFailure, bool, error) {
	if first && s.epochMillis > 0 {
		w.sinceMillis = s.epochMillis
	}
	f, dismissed, err := w.dialogs(ctx, p, sessionID, s.window)
	if err != nil || f != nil || dismissed {
		return f, dismissed, err
	}
	if s.pids == nil {
		return nil, false, nil
	}
	if len(*s.pids) > 0 {
		w.notePIDs(*s.pids)
		return nil, false, nil
	}
	if len(w.pids) > 0 {
		f, err := w.crashEvidence(ctx, p)
		return f, false, err
	}
	if first && w.sinceMillis > 0 {
		// No process from the start: a crash just before WaitIdle began?
		// (Without the device clock a stale report could be blamed: skipped.)
		since := w.sinceMillis
		w.sinceMillis = since - CrashLookback.Milliseconds()
		f, err := w.crashEvidence(ctx, p)
		w.sinceMillis = since
		if err != nil || (f != nil && f.Source != SourceProcessGone) {
			return f, false, err
		}
	}
	return nil, false, nil
}

// NetworkStatus classifies the socket tables for uid (see WaitIdle).
func NetworkStatus(tables string, uid int) NetworkInFlightStatus {
	if known, busy := android.SocketsInFlight(tables, uid); !known {
		return NetworkUnknown
	} else if busy {
		return NetworkActive
	}
	return NetworkNone
}

// waitIdleNode is WaitIdle as a setup node: the application descriptor of
// LaunchOrAttach (else ProvisionApp) unless the input names one, the
// policy's idle heuristics for what the input leaves out, and, with an
// IdleScreens port, what the policy's onSuccess evidence keeps of the idle
// screen (WaitIdle ends the graph, so its last sample may serve it).
type waitIdleNode struct{}

func (waitIdleNode) Name() string { return NodeWaitIdle }

func (waitIdleNode) Prepare(in *WaitIdleInput, s StepContext) {
	in.IterationOrdinalNumber = s.Step.IterationOrdinalNumber
	in.DeviceRuntimeContext = mergeContext(in.DeviceRuntimeContext, s.Context)
	if in.ApplicationUnderTestDescriptor == nil {
		a := s.Inputs.LaunchOrAttach.ApplicationUnderTestDescriptor
		if a.AndroidPackageID == "" {
			a = s.Inputs.ProvisionApp.ApplicationUnderTestDescriptor
		}
		in.ApplicationUnderTestDescriptor = &a
	}
	h, idle := &in.IdleHeuristicsConfiguration, s.Policy.Idle
	setDefault(&h.MinQuietMillis, idle.MinQuietMillis)
	setDefault(&h.MaxWaitMillis, idle.MaxWaitMillis)
	setDefault(&h.SamplingIntervalMillis, idle.SampleIntervalMillis)
	if h.CountQuietFromLastFrame == nil {
		b := idle.CountQuietFromLastFrame
		h.CountQuietFromLastFrame = &b
	}
	kinds, _ := policy.EvidenceKinds(s.Policy, false)
	in.Evidence = IdleEvidence{StepOrdinal: s.Step.StepOrdinal, Attempt: s.Step.Attempt,
		Screenshot: slices.Contains(kinds, agent.ArtifactScreenshot), Hierarchy: slices.Contains(kinds, agent.ArtifactUIHierarchy)}
}

func (waitIdleNode) Run(ctx context.Context, in WaitIdleInput, _ StepContext, p Ports) (WaitIdleOutput, error) {
	if p.IdleScreens == nil {
		in.Evidence = IdleEvidence{} // nothing keeps the idle screen
	}
	return WaitIdle(ctx, in, p)
}

func setDefault(p **int64, v int) {
	if *p == nil && v > 0 {
		x := int64(v)
		*p = &x
	}
}
