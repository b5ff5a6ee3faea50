package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/android"
)

// LaunchAttachMode is LaunchOrAttach's launchAttachMode.
type LaunchAttachMode string

const (
	// LaunchOrAttachMode brings the app's task forward when it exists (same
	// process), else launches it; an app already in front is left alone.
	LaunchOrAttachMode LaunchAttachMode = "LAUNCH_OR_ATTACH"
	// ForceRestart force-stops the app and launches it fresh (am start -S).
	ForceRestart LaunchAttachMode = "FORCE_RESTART"
	// AttachOnly only confirms the app is in front; otherwise it fails with
	// activity_not_found, Code NotInForeground, not retryable.
	AttachOnly LaunchAttachMode = "ATTACH_ONLY"
)

// NotInForeground is the agent.Error Code of an ATTACH_ONLY LaunchOrAttach
// whose app is not the foreground one.
const NotInForeground = "APP_NOT_IN_FOREGROUND"

// Defaults of LaunchOrAttach.
const (
	DefaultLaunchTimeout = 20 * time.Second
	// ForegroundPollInterval spaces foreground checks: mCurrentFocus is null
	// for a moment during transitions (android-recipes.md: retry ~250 ms).
	ForegroundPollInterval = 250 * time.Millisecond
	// AttachConfirmWindow is how long ATTACH_ONLY keeps looking for the app in
	// front (a transition in progress) before it gives up.
	AttachConfirmWindow = time.Second
)

// LaunchFlags are the intent flags of the launch: FLAG_ACTIVITY_NEW_TASK |
// FLAG_ACTIVITY_RESET_TASK_IF_NEEDED, what a launcher tap sends, so an
// existing task is brought forward instead of stacking a new activity
// (android-recipes.md; appium-adb's startApp uses the same).
const LaunchFlags = "0x10200000"

// LaunchOrAttachInput is LaunchOrAttach's Input (screengraph-nodes.md §3).
type LaunchOrAttachInput struct {
	RunID                          string                         `json:"runId"`
	TenantID                       string                         `json:"tenantId,omitempty"`
	ProjectID                      string                         `json:"projectId,omitempty"`
	IterationOrdinalNumber         int                            `json:"iterationOrdinalNumber,omitempty"`
	DeviceRuntimeContext           *DeviceRuntimeContext          `json:"deviceRuntimeContext,omitempty"`
	ApplicationUnderTestDescriptor ApplicationUnderTestDescriptor `json:"applicationUnderTestDescriptor"`
	LaunchAttachMode               LaunchAttachMode               `json:"launchAttachMode,omitempty"`
	// LaunchTimeoutMillis bounds am start plus the foreground confirmation;
	// 0 = 20000. Extension.
	LaunchTimeoutMillis int64 `json:"launchTimeoutMillis,omitempty"`
	// Attempt is the engine's 1-based attempt of this node (not part of the
	// input document): a retry (> 1) of LAUNCH_OR_ATTACH starts the app in a
	// fresh process (am start -S), so a crash at launch is retried clean.
	Attempt int `json:"-"`
}

// ApplicationForegroundContext says which activity is in front, and since when.
type ApplicationForegroundContext struct {
	CurrentPackageID    string `json:"currentPackageId"`
	CurrentActivityName string `json:"currentActivityName"`
	// AppBroughtToForegroundTimestamp is when the foreground was confirmed
	// (ISO-8601 UTC, milliseconds).
	AppBroughtToForegroundTimestamp string `json:"appBroughtToForegroundTimestamp"`
}

// LaunchOrAttachOutput is LaunchOrAttach's Output; the context is null on failure.
type LaunchOrAttachOutput struct {
	RunID                        string                        `json:"runId"`
	ApplicationForegroundContext *ApplicationForegroundContext `json:"applicationForegroundContext"`
	// AppFailure describes the crash or ANR of an app_crashed /
	// app_not_responding failure; absent otherwise. Extension.
	AppFailure *AppFailure `json:"appFailure,omitempty"`
	// DismissedSystemDialogs lists the system error dialogs (not the app's)
	// the node dismissed on its way. Extension.
	DismissedSystemDialogs []DismissedDialog `json:"dismissedSystemDialogs,omitempty"`
	Common
}

// LaunchOrAttach puts the app in front according to launchAttachMode (see the
// constants) and confirms it with the foreground chain of ForegroundActivity,
// polled every ForegroundPollInterval up to launchTimeoutMillis.
//
// The launch command is `am start-activity -W [-S] -n PKG/ACT -a
// android.intent.action.MAIN -c android.intent.category.LAUNCHER -f
// 0x10200000`. ACT is androidLaunchActivityName, or the launcher activity from
// ResolveLauncherActivity. Errors: activity_not_found (am's "Error type 3",
// "does not exist", "unable to resolve Intent"; no launcher activity; or
// ATTACH_ONLY with the app not in front), permission_error (a non-exported
// activity), launch_timeout (retryable: not in front within the bound),
// invalid_request_error (no package id, unknown mode), and the device's
// errors (device_offline, timeout, …).
//
// Crashes and ANRs: the command line also runs `date +%s.%N` after am (the
// device clock, from which crash reports count) and every foreground poll
// after the launch reads `pidof PKG` with `dumpsys window displays`. The
// app's process gone (after it was seen, or with a FATAL EXCEPTION of it in
// the crash buffer since the launch), or its "Application Error" dialog,
// fails the node with app_crashed, retryable (the policy retries it once by
// default; the retry runs with a fresh process); its "Application Not
// Responding" dialog fails it with app_not_responding. The output's
// appFailure then names the exception, its message and the top frame of the
// app's package (see AppFailure, appWatch.crashEvidence). A focused error
// dialog of another process (System UI, system) is dismissed (see
// dismissDialog), listed in dismissedSystemDialogs, and the node goes on.
func LaunchOrAttach(ctx context.Context, in LaunchOrAttachInput, p Ports) (LaunchOrAttachOutput, error) {
	out := LaunchOrAttachOutput{RunID: in.RunID, Common: Common{NodeName: NodeLaunchOrAttach}}
	w := &appWatch{pkg: in.ApplicationUnderTestDescriptor.AndroidPackageID}
	fc, err := launchOrAttach(ctx, in, p, w)
	out.DismissedSystemDialogs = w.dismissed
	if f, ok := errors.AsType[*appFailureError](err); ok {
		// The crash / ANR block goes into the output; the failure is its error.
		out.AppFailure = f.f
		err = f.e
	}
	if e := MarkFailure(&out.Common, err); e != nil {
		p.Logf("LaunchOrAttach failed: %s", e.Error())
		return out, e
	}
	out.ApplicationForegroundContext = fc
	return out, nil
}

// appFailureError carries a detected crash / ANR to LaunchOrAttach and
// WaitIdle, which put f in their output and fail with e.
type appFailureError struct {
	f *AppFailure
	e *agent.Error
}

func (x *appFailureError) Error() string { return x.e.Error() }
func (x *appFailureError) Unwrap() error { return x.e }

func failApp(f *AppFailure, retryable bool) error {
	return &appFailureError{f: f, e: f.Error(retryable)}
}

func launchOrAttach(ctx context.Context, in LaunchOrAttachInput, p Ports, w *appWatch) (*ApplicationForegroundContext, error) {
	pkg := in.ApplicationUnderTestDescriptor.AndroidPackageID
	mode, err := launchMode(in, p)
	if err != nil {
		return nil, err
	}
	sessionID := in.DeviceRuntimeContext.sessionID()
	bound := positiveMillis(in.LaunchTimeoutMillis, DefaultLaunchTimeout)
	deadline := p.Now().Add(bound)
	switch {
	case mode == AttachOnly:
		fc, last, err := awaitForeground(ctx, p, pkg, p.Now().Add(min(bound, AttachConfirmWindow)), w, sessionID, false)
		if err != nil || fc != nil {
			return fc, err
		}
		return nil, &agent.Error{ID: agent.ErrActivityNotFound, Code: NotInForeground,
			Msg: fmt.Sprintf("launchAttachMode ATTACH_ONLY: %s is not in the foreground (foreground: %s)", pkg, describe0(last))}
	case mode == LaunchOrAttachMode && in.Attempt > 1:
		p.Logf("attempt %d: starting %s in a fresh process (am start -S)", in.Attempt, pkg)
		mode = ForceRestart
	case mode == LaunchOrAttachMode:
		if fc, err := attachInFront(ctx, p, pkg, w, sessionID); err != nil || fc != nil {
			return fc, err
		}
	}
	act, err := launchActivity(ctx, p.Device, pkg, in.ApplicationUnderTestDescriptor.AndroidLaunchActivityName)
	if err != nil {
		return nil, err
	}
	if err := launch(ctx, p, w, LaunchCommand(act, mode == ForceRestart), act, deadline, bound); err != nil {
		return nil, err
	}
	fc, last, err := awaitForeground(ctx, p, pkg, deadline, w, sessionID, true)
	if err != nil || fc != nil {
		return fc, err
	}
	return nil, agent.Errorf(agent.ErrLaunchTimeout, "%s not in the foreground within %v after launch (foreground: %s)", pkg, bound, describe0(last))
}

// launchMode checks the input and returns its mode (LAUNCH_OR_ATTACH when
// it names none).
func launchMode(in LaunchOrAttachInput, p Ports) (LaunchAttachMode, error) {
	if in.ApplicationUnderTestDescriptor.AndroidPackageID == "" {
		return "", agent.Errorf(agent.ErrInvalidRequest, "applicationUnderTestDescriptor.androidPackageId is empty")
	}
	mode := cmp.Or(in.LaunchAttachMode, LaunchOrAttachMode)
	if mode != LaunchOrAttachMode && mode != ForceRestart && mode != AttachOnly {
		return "", agent.Errorf(agent.ErrInvalidRequest, "launchAttachMode %q: expected LAUNCH_OR_ATTACH, FORCE_RESTART or ATTACH_ONLY", mode)
	}
	if p.Device == nil {
		return "", agent.Errorf(agent.ErrInternal, "LaunchOrAttach needs a Device port")
	}
	return mode, nil
}

// attachInFront attaches to pkg when it is in front already, without
// touching its task (after answering a system dialog over it, failing on
// the app's own); nil when it is not in front.
func attachInFront(ctx context.Context, p Ports, pkg string, w *appWatch, sessionID string) (*ApplicationForegroundContext, error) {
	for {
		fg, win, err := android.ForegroundWithWindows(ctx, p.Device)
		if err != nil || fg.Package != pkg {
			return nil, err
		}
		f, dismissed, err := w.dialogs(ctx, p, sessionID, win)
		if err != nil {
			return nil, err
		}
		if f != nil {
			return nil, failApp(f, true)
		}
		if !dismissed {
			p.Logf("%s already in front (%s): attaching", pkg, fg.Activity)
			return &ApplicationForegroundContext{CurrentPackageID: fg.Package, CurrentActivityName: fg.Activity,
				AppBroughtToForegroundTimestamp: Timestamp(p.Now())}, nil
		}
	}
}

// launch runs cmd (am start) bounded by deadline, with its exit status and
// the device clock on the same shell: crash reports count from the launch
// (w.sinceMillis: the device time after am, less the round trip).
func launch(ctx context.Context, p Ports, w *appWatch, cmd string, act parse.Component, deadline time.Time, bound time.Duration) error {
	p.Logf("%s", cmd)
	lctx, cancel := context.WithTimeout(ctx, max(deadline.Sub(p.Now()), time.Millisecond))
	started := p.Now()
	res, err := p.Device.Shell(lctx, cmd+"; echo "+sampleSplit+" $?; date +%s.%N")
	cancel()
	if err != nil {
		if e := agent.Classify(err); e.ID == agent.ErrTimeout && ctx.Err() == nil {
			return agent.Wrap(agent.ErrLaunchTimeout, err, "%s did not return within %v", cmd, bound)
		}
		return err
	}
	stdout, code := res.Stdout, res.ExitCode
	if head, tail, ok := strings.Cut(res.Stdout, sampleSplit); ok {
		stdout = head
		if f := strings.Fields(tail); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				code = n
			}
			if e := parse.ParseEpochMillis(f[1]); e > 0 {
				w.sinceMillis = e - p.Now().Sub(started).Milliseconds() - 1
			}
		}
	}
	am, err := parse.ParseAmStart(stdout + "\n" + res.Stderr)
	if err != nil {
		return amError(err, act)
	}
	if code != 0 {
		return agent.Errorf(agent.ErrProcess, "%s exited %d: %s", cmd, code, strings.TrimSpace(stdout+" "+res.Stderr))
	}
	if am.Warning != "" {
		p.Logf("am: %s", am.Warning)
	}
	return nil
}

func describe0(c parse.Component) string {
	if c.IsZero() {
		return "none"
	}
	return c.String()
}

// LaunchCommand is the am command line that starts component act (forceStop: -S).
func LaunchCommand(act parse.Component, forceStop bool) string {
	s := "am start-activity -W"
	if forceStop {
		s += " -S"
	}
	return s + " -n " + act.String() + " -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f " + LaunchFlags
}

// amError maps ParseAmStart's *adb.Error to the node's error ids.
func amError(err error, act parse.Component) error {
	var ae *parse.Error
	if !errors.As(err, &ae) {
		return agent.Wrap(agent.ErrProcess, err, "am start %s", act)
	}
	switch ae.ID {
	case parse.IDActivityNotFound:
		return &agent.Error{ID: agent.ErrActivityNotFound, Msg: fmt.Sprintf("%s: %s", act, ae.Msg)}
	case parse.IDPermissionError:
		return &agent.Error{ID: agent.ErrPermission, Msg: fmt.Sprintf("%s: %s", act, ae.Msg)}
	}
	return &agent.Error{ID: agent.ErrProcess, Msg: fmt.Sprintf("%s: %s", act, ae.Msg)}
}

// awaitForeground polls ForegroundActivity until pkg is in front or until.
// It returns the context (nil when not in front in time) and the last
// foreground seen. Every poll also looks at the error dialogs (w.dialogs:
// the app's fail, a system one is dismissed) and, with launched, at the
// app's pids (`pidof PKG` on the same shell): the process gone after it was
// seen, or with a crash report of it since the launch, is app_crashed.
func awaitForeground(ctx context.Context, p Ports, pkg string, until time.Time, w *appWatch, sessionID string, launched bool) (*ApplicationForegroundContext, parse.Component, error) {
	var last parse.Component
	for {
		fg, again, err := foregroundPoll(ctx, p, pkg, w, sessionID, launched)
		switch {
		case err != nil:
			return nil, last, err
		case again:
			continue
		case fg != nil:
			last = *fg
			if fg.Package == pkg {
				return &ApplicationForegroundContext{CurrentPackageID: fg.Package, CurrentActivityName: fg.Activity,
					AppBroughtToForegroundTimestamp: Timestamp(p.Now())}, last, nil
			}
		}
		left := until.Sub(p.Now())
		if left <= 0 {
			return nil, last, nil
		}
		if err := p.Wait(ctx, min(ForegroundPollInterval, left)); err != nil {
			return nil, last, ctxErr(ctx, "waiting for "+pkg+" in the foreground")
		}
	}
}

// foregroundPoll is one poll of awaitForeground: the foreground seen (nil
// when a retryable error hid it), again when a system dialog was dismissed
// (poll at once), or the app's crash / ANR as the error.
func foregroundPoll(ctx context.Context, p Ports, pkg string, w *appWatch, sessionID string, launched bool) (*parse.Component, bool, error) {
	fg, win, pids, err := launchProbe(ctx, p.Device, pkg, launched)
	if err != nil {
		if e := agent.Classify(err); !e.Retryable {
			return nil, false, e
		}
		return nil, false, nil
	}
	f, dismissed, err := w.dialogs(ctx, p, sessionID, win)
	if err != nil || dismissed {
		return nil, dismissed, err
	}
	if f != nil {
		return nil, false, failApp(f, true)
	}
	if launched && pids != nil {
		if len(*pids) > 0 {
			w.notePIDs(*pids)
		} else if f, err := w.processGone(ctx, p); err != nil {
			return nil, false, err
		} else if f != nil {
			return nil, false, failApp(f, true)
		}
	}
	return &fg, false, nil
}

// launchProbe reads the foreground (ForegroundActivity's chain) and returns
// the raw `dumpsys window displays` output too; withPID adds `pidof PKG` to
// the same shell (pids nil when pidof is missing or its output unreadable).
func launchProbe(ctx context.Context, dev device.Device, pkg string, withPID bool) (parse.Component, string, *[]int, error) {
	if !withPID {
		fg, win, err := android.ForegroundWithWindows(ctx, dev)
		return fg, win, nil, err
	}
	r, err := dev.Shell(ctx, "dumpsys window displays; echo "+sampleSplit+"; pidof "+pkg+"; echo "+sampleSplit)
	if err != nil {
		return parse.Component{}, "", nil, err
	}
	if r.ExitCode != 0 {
		return parse.Component{}, "", nil, agent.Errorf(agent.ErrProcess, "`dumpsys window displays; pidof %s` exited %d: %s", pkg, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	parts := strings.Split(r.Stdout, sampleSplit)
	if len(parts) != 3 {
		// Not the shape asked for: read it as the window dump alone, pids unknown.
		parts = []string{r.Stdout}
	}
	var pids *[]int
	if len(parts) == 3 && !strings.Contains(r.Stderr, "pidof") {
		ps := parse.ParsePIDs(parts[1])
		pids = &ps
	}
	fg, err := android.ForegroundFrom(ctx, dev, parts[0])
	return fg, parts[0], pids, err
}

// processGone decides what the app's missing process means after a launch:
// a crash report of it since the launch, or a pid seen before, is a crash
// (returned); otherwise it is not started yet (nil).
func (w *appWatch) processGone(ctx context.Context, p Ports) (*AppFailure, error) {
	f, err := w.crashEvidence(ctx, p)
	if err != nil || f.Source != SourceProcessGone || len(w.pids) > 0 {
		return f, err
	}
	return nil, nil
}

// launchActivity returns the component to start: the named activity (".X"
// and "pkg/act" forms accepted) or the resolved launcher activity.
func launchActivity(ctx context.Context, dev device.Device, pkg, name string) (parse.Component, error) {
	if name == "" {
		return android.ResolveLauncherActivity(ctx, dev, pkg)
	}
	if strings.Contains(name, "/") {
		c, ok := parse.ParseComponent(name)
		if !ok {
			return parse.Component{}, agent.Errorf(agent.ErrInvalidRequest, "androidLaunchActivityName %q is not a component", name)
		}
		return c, nil
	}
	if strings.HasPrefix(name, ".") {
		name = pkg + name
	}
	return parse.Component{Package: pkg, Activity: name}, nil
}

// launchOrAttachNode is LaunchOrAttach as a setup node: ProvisionApp's
// application descriptor unless the input names one, the policy's launch
// mode, and the engine's attempt (a retry starts a fresh process).
type launchOrAttachNode struct{}

func (launchOrAttachNode) Name() string { return NodeLaunchOrAttach }

func (launchOrAttachNode) Prepare(in *LaunchOrAttachInput, s StepContext) {
	in.IterationOrdinalNumber = s.Step.IterationOrdinalNumber
	in.DeviceRuntimeContext = mergeContext(in.DeviceRuntimeContext, s.Context)
	if in.ApplicationUnderTestDescriptor.AndroidPackageID == "" {
		in.ApplicationUnderTestDescriptor = s.Inputs.ProvisionApp.ApplicationUnderTestDescriptor
	}
	if in.LaunchAttachMode == "" {
		in.LaunchAttachMode = LaunchAttachMode(s.Policy.LaunchAttachMode)
	}
	in.Attempt = s.Step.Attempt
}

// Run launches; a crash at launch is retryable while the policy grants
// another attempt (retries.maxAttemptsByError, default one retry), and the
// last attempt's error says it is not.
func (launchOrAttachNode) Run(ctx context.Context, in LaunchOrAttachInput, s StepContext, p Ports) (LaunchOrAttachOutput, error) {
	out, err := LaunchOrAttach(ctx, in, p)
	if e := agent.Classify(err); e != nil && e.ID == agent.ErrAppCrashed && e.Retryable {
		if again, _ := s.Policy.Decide(NodeLaunchOrAttach, e.ID, s.Step.Attempt); !again {
			e.Retryable = false
		}
	}
	return out, err
}
