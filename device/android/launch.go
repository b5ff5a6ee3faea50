package android

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// SampleSplit separates the parts of one combined shell command's output
// (`a; echo SPLIT; b`), so several reads cost one shell round trip.
const SampleSplit = "--SCREENGRAPH-SAMPLE-SPLIT--"

// LaunchFlags are the intent flags of the launch: FLAG_ACTIVITY_NEW_TASK |
// FLAG_ACTIVITY_RESET_TASK_IF_NEEDED, what a launcher tap sends, so an
// existing task is brought forward instead of stacking a new activity
// (android-recipes.md; appium-adb's startApp uses the same).
const LaunchFlags = "0x10200000"

// LaunchCommand is the am command line that starts component act (forceStop: -S).
func LaunchCommand(act parse.Component, forceStop bool) string {
	s := "am start-activity -W"
	if forceStop {
		s += " -S"
	}
	return s + " -n " + act.String() + " -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f " + LaunchFlags
}

// Started is what StartActivity read of an am start.
type Started struct {
	// EpochMillis is the device clock (Unix ms) read right after am
	// returned, on the same shell; 0 when not read.
	EpochMillis int64
	// Warning is am's "Warning:" line ("" when none).
	Warning string
}

// StartActivity runs cmd (LaunchCommand's am start of act) with its exit
// status and the device clock on the same shell
// (`CMD; echo SPLIT $?; date +%s.%N`). Errors: the shell's (as the device
// port gives them), else am's failure mapped to an *agent.Error:
// activity_not_found, permission_error, or process_error (also for a
// non-zero exit). Started.EpochMillis is set whenever the clock was read,
// error or not.
func StartActivity(ctx context.Context, dev device.Device, cmd string, act parse.Component) (Started, error) {
	var st Started
	res, err := dev.Shell(ctx, cmd+"; echo "+SampleSplit+" $?; date +%s.%N")
	if err != nil {
		return st, err
	}
	stdout, code := res.Stdout, res.ExitCode
	if head, tail, ok := strings.Cut(res.Stdout, SampleSplit); ok {
		stdout = head
		if f := strings.Fields(tail); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				code = n
			}
			st.EpochMillis = parse.ParseEpochMillis(f[1])
		}
	}
	am, err := parse.ParseAmStart(stdout + "\n" + res.Stderr)
	if err != nil {
		return st, amError(err, act)
	}
	if code != 0 {
		return st, agent.Errorf(agent.ErrProcess, "%s exited %d: %s", cmd, code, strings.TrimSpace(stdout+" "+res.Stderr))
	}
	st.Warning = am.Warning
	return st, nil
}

// amError maps ParseAmStart's *parse.Error to the nodes' error ids.
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

// ForegroundWithPIDs reads the foreground (ForegroundActivity's chain) and
// returns the raw `dumpsys window displays` output too; withPID adds
// `pidof PKG` to the same shell (pids nil when pidof is missing or its
// output unreadable).
func ForegroundWithPIDs(ctx context.Context, dev device.Device, pkg string, withPID bool) (parse.Component, string, *[]int, error) {
	if !withPID {
		fg, win, err := ForegroundWithWindows(ctx, dev)
		return fg, win, nil, err
	}
	r, err := dev.Shell(ctx, "dumpsys window displays; echo "+SampleSplit+"; pidof "+pkg+"; echo "+SampleSplit)
	if err != nil {
		return parse.Component{}, "", nil, err
	}
	if r.ExitCode != 0 {
		return parse.Component{}, "", nil, agent.Errorf(agent.ErrProcess, "`dumpsys window displays; pidof %s` exited %d: %s", pkg, r.ExitCode, strings.TrimSpace(r.Stderr))
	}
	parts := strings.Split(r.Stdout, SampleSplit)
	if len(parts) != 3 {
		// Not the shape asked for: read it as the window dump alone, pids unknown.
		parts = []string{r.Stdout}
	}
	var pids *[]int
	if len(parts) == 3 && !strings.Contains(r.Stderr, "pidof") {
		ps := parse.ParsePIDs(parts[1])
		pids = &ps
	}
	fg, err := ForegroundFrom(ctx, dev, parts[0])
	return fg, parts[0], pids, err
}

// LaunchActivity returns the component to start: the named activity (".X"
// and "pkg/act" forms accepted) or the resolved launcher activity
// (ResolveLauncherActivity). A "pkg/act" name that is no component is
// invalid_request_error.
func LaunchActivity(ctx context.Context, dev device.Device, pkg, name string) (parse.Component, error) {
	if name == "" {
		return ResolveLauncherActivity(ctx, dev, pkg)
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
