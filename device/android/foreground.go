package android

import (
	"context"
	"strings"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// ForegroundWithWindows is ForegroundActivity returning the `dumpsys window
// displays` output as well (for its error dialogs).
func ForegroundWithWindows(ctx context.Context, dev device.Device) (parse.Component, string, error) {
	out, err := ShellOut(ctx, dev, "dumpsys window displays")
	if err != nil {
		return parse.Component{}, "", err
	}
	fg, err := ForegroundFrom(ctx, dev, out)
	return fg, out, err
}

// ForegroundActivity returns the activity in front and which source said so,
// through the fallback chain of android-recipes.md (adbutils' order):
//  1. `dumpsys window displays` (API >= 29; `dumpsys window windows` when it
//     has no focus lines), mCurrentFocus / mFocusedApp, intersected across
//     displays (adb.Foreground);
//  2. `dumpsys activity activities`: mResumedActivity / topResumedActivity;
//  3. `dumpsys activity top`: the last ACTIVITY line.
//
// A zero Component with a nil error means nothing is focused right now
// (transitions): callers poll.
func ForegroundActivity(ctx context.Context, dev device.Device) (parse.Component, string, error) {
	out, err := ShellOut(ctx, dev, "dumpsys window displays")
	if err != nil {
		return parse.Component{}, "", err
	}
	return foregroundChain(ctx, dev, out)
}

// ForegroundFrom is ForegroundActivity given the `dumpsys window displays` output.
func ForegroundFrom(ctx context.Context, dev device.Device, displays string) (parse.Component, error) {
	c, _, err := foregroundChain(ctx, dev, displays)
	return c, err
}

func foregroundChain(ctx context.Context, dev device.Device, out string) (parse.Component, string, error) {
	var err error
	ds := parse.ParseWindowFocus(out)
	if len(ds) == 0 {
		if out, err = ShellOut(ctx, dev, "dumpsys window windows"); err != nil {
			return parse.Component{}, "", err
		}
		ds = parse.ParseWindowFocus(out)
	}
	if c, ok := parse.Foreground(ds); ok {
		return c, "dumpsys window", nil
	}
	if out, err = ShellOut(ctx, dev, "dumpsys activity activities"); err != nil {
		return parse.Component{}, "", err
	}
	if c, ok := parse.ParseResumedActivity(out); ok {
		return c, "dumpsys activity activities", nil
	}
	if out, err = ShellOut(ctx, dev, "dumpsys activity top"); err != nil {
		return parse.Component{}, "", err
	}
	if tops := parse.ParseActivityTop(out); len(tops) > 0 {
		return tops[len(tops)-1].Component, "dumpsys activity top", nil
	}
	return parse.Component{}, "", nil
}

// ShellOut runs cmd on dev and returns its stdout; a non-zero exit is
// process_error naming the command, its exit code and output. Every node's
// shell command goes through it.
func ShellOut(ctx context.Context, dev device.Device, cmd string) (string, error) {
	r, err := dev.Shell(ctx, cmd)
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return r.Stdout, agent.Errorf(agent.ErrProcess, "`%s` exited %d: %s", cmd, r.ExitCode, strings.TrimSpace(r.Stderr+" "+r.Stdout))
	}
	return r.Stdout, nil
}

// ResolveLauncherActivity finds pkg's MAIN/LAUNCHER activity with `cmd package
// resolve-activity --brief -c android.intent.category.LAUNCHER PKG` (API >= 24;
// the last line is the component; "No activity found" when there is none),
// falling back to the Activity Resolver Table of `dumpsys package PKG` when
// the command is missing (capture:
// fixtures/captures/dumpsys-package/api34-emulator-adb-installed.txt).
// Errors: activity_not_found when the package has no launcher activity.
func ResolveLauncherActivity(ctx context.Context, dev device.Device, pkg string) (parse.Component, error) {
	r, err := dev.Shell(ctx, "cmd package resolve-activity --brief -c android.intent.category.LAUNCHER "+pkg)
	if err != nil {
		return parse.Component{}, err
	}
	if r.ExitCode == 0 {
		if c, ok := parse.ParseResolveActivity(r.Stdout); ok && c.Package == pkg {
			return c, nil
		}
		if strings.Contains(r.Stdout, "No activity found") {
			return parse.Component{}, agent.Errorf(agent.ErrActivityNotFound, "%s has no launcher activity (not installed, or no MAIN/LAUNCHER filter)", pkg)
		}
	}
	out, err := ShellOut(ctx, dev, "dumpsys package "+pkg)
	if err != nil {
		return parse.Component{}, err
	}
	if c, ok := parse.ParseLauncherActivity(out, pkg); ok {
		return c, nil
	}
	return parse.Component{}, agent.Errorf(agent.ErrActivityNotFound, "%s has no launcher activity in dumpsys package", pkg)
}
