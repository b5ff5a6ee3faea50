package android

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// InstalledApp is what the device says about the package.
type InstalledApp struct {
	Present        bool
	VersionCode    int64
	VersionName    string
	LastUpdateTime time.Time
	CodePath       string
}

// APILevel reads ro.build.version.sdk.
func APILevel(ctx context.Context, dev device.Device) (int, error) {
	out, err := ShellOut(ctx, dev, "getprop ro.build.version.sdk")
	if err != nil {
		return 0, err
	}
	return apiLevelOf(out)
}

// apiLevelOf reads `getprop ro.build.version.sdk` output.
func apiLevelOf(out string) (int, error) {
	v := parse.ParseGetpropValue(out)
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, agent.Errorf(agent.ErrProcess, "ro.build.version.sdk is %q", v)
	}
	return n, nil
}

// ProvisionSplit separates the parts of ReadDeviceApp's one shell command;
// each is followed by the exit status of the command before it.
const ProvisionSplit = "--SCREENGRAPH-PROVISION-SPLIT--"

// ReadDeviceApp is APILevel then ReadInstalledApp in one adb shell service
// (one connection through the adb server instead of three): `getprop
// ro.build.version.sdk; echo SPLIT $?; cmd package list packages
// --show-versioncode PKG; echo SPLIT $?; dumpsys package PKG`, each part
// read with the parser of its own command and its exit status checked as
// shellOut would (non-zero: process_error naming that command). `dumpsys
// package` runs also when the package is absent; its output is then not
// read. Below API 28 (no --show-versioncode), or when the output is not
// the shape asked for, the installed state is read again as
// ReadInstalledApp does. Errors: the shell's transport error, process_error.
func ReadDeviceApp(ctx context.Context, dev device.Device, pkg string) (int, InstalledApp, error) {
	list := "cmd package list packages --show-versioncode " + pkg
	dump := "dumpsys package " + pkg
	r, err := dev.Shell(ctx, "getprop ro.build.version.sdk; echo "+ProvisionSplit+" $?; "+list+"; echo "+ProvisionSplit+" $?; "+dump)
	if err != nil {
		return 0, InstalledApp{}, err
	}
	parts := strings.Split(r.Stdout, ProvisionSplit)
	if len(parts) != 3 {
		// Not the shape asked for: each command on its own, as before.
		lvl, err := APILevel(ctx, dev)
		if err != nil {
			return 0, InstalledApp{}, err
		}
		a, err := ReadInstalledApp(ctx, dev, pkg, lvl)
		return lvl, a, err
	}
	// parts[1] and [2] start with " <status>\n": the exit status of the
	// command before the marker.
	status := func(part string) (int, string, bool) {
		head, rest, _ := strings.Cut(part, "\n")
		n, err := strconv.Atoi(strings.TrimSpace(head))
		return n, rest, err == nil
	}
	sdkCode, listOut, ok1 := status(parts[1])
	listCode, dumpOut, ok2 := status(parts[2])
	if !ok1 || !ok2 {
		lvl, err := APILevel(ctx, dev)
		if err != nil {
			return 0, InstalledApp{}, err
		}
		a, err := ReadInstalledApp(ctx, dev, pkg, lvl)
		return lvl, a, err
	}
	failed := func(cmd string, code int, out string) error {
		return agent.Errorf(agent.ErrProcess, "`%s` exited %d: %s", cmd, code, strings.TrimSpace(r.Stderr+" "+out))
	}
	if sdkCode != 0 {
		return 0, InstalledApp{}, failed("getprop ro.build.version.sdk", sdkCode, parts[0])
	}
	lvl, err := apiLevelOf(parts[0])
	if err != nil {
		return 0, InstalledApp{}, err
	}
	if lvl < 28 {
		a, err := ReadInstalledApp(ctx, dev, pkg, lvl)
		return lvl, a, err
	}
	if listCode != 0 {
		return lvl, InstalledApp{}, failed(list, listCode, listOut)
	}
	var a InstalledApp
	for _, e := range parse.ParsePackageList(listOut) {
		if e.Package == pkg {
			a.Present, a.VersionCode = true, e.VersionCode
		}
	}
	if !a.Present {
		return lvl, a, nil
	}
	if r.ExitCode != 0 {
		return lvl, InstalledApp{}, failed(dump, r.ExitCode, dumpOut)
	}
	return lvl, installedFrom(a, dumpOut, pkg), nil
}

// installedFrom completes a (listed as present) from `dumpsys package PKG`;
// a package the dump does not show was removed meanwhile (absent).
func installedFrom(a InstalledApp, dumpsys, pkg string) InstalledApp {
	info, ok := parse.ParseDumpsysPackage(dumpsys, pkg)
	if !ok {
		return InstalledApp{}
	}
	a.VersionCode, a.VersionName, a.LastUpdateTime, a.CodePath = info.VersionCode, info.VersionName, info.LastUpdateTime, info.CodePath
	return a
}

// ReadInstalledApp reads whether pkg is installed and its versions:
// `cmd package list packages --show-versioncode PKG` on API >= 28 (older:
// `pm path PKG`), then `dumpsys package PKG` (versionCode, versionName,
// lastUpdateTime, codePath; formats: parse.ParsePackageList, parse.ParsePmPath,
// parse.ParseDumpsysPackage).
func ReadInstalledApp(ctx context.Context, dev device.Device, pkg string, apiLevel int) (InstalledApp, error) {
	var a InstalledApp
	if apiLevel >= 28 {
		out, err := ShellOut(ctx, dev, "cmd package list packages --show-versioncode "+pkg)
		if err != nil {
			return a, err
		}
		for _, e := range parse.ParsePackageList(out) {
			if e.Package == pkg {
				a.Present, a.VersionCode = true, e.VersionCode
			}
		}
	} else {
		// pm path prints nothing and exits 1 for a package that is not installed.
		res, err := dev.Shell(ctx, "pm path "+pkg)
		if err != nil {
			return a, err
		}
		a.Present = len(parse.ParsePmPath(res.Stdout)) > 0
	}
	if !a.Present {
		return a, nil
	}
	out, err := ShellOut(ctx, dev, "dumpsys package "+pkg)
	if err != nil {
		return a, err
	}
	// Not in the dump: removed between the two commands.
	return installedFrom(a, out, pkg), nil
}

// DumpsysUID returns pkg's uid from `dumpsys package PKG` output (userId=,
// or appId= on older releases; parse.ParseDumpsysPackage), -1 when it names none.
func DumpsysUID(out, pkg string) int {
	if info, ok := parse.ParseDumpsysPackage(out, pkg); ok && info.UserID > 0 {
		return int(info.UserID)
	}
	return -1
}

// PmListUID returns pkg's uid from `pm list packages -U PKG` ("package:PKG
// uid:N"), -1 when the shell fails or the line is not there.
func PmListUID(ctx context.Context, dev device.Device, pkg string) int {
	r, err := dev.Shell(ctx, "pm list packages -U "+pkg)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(r.Stdout, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "package:"+pkg && strings.HasPrefix(f[1], "uid:") {
			if n, err := strconv.Atoi(strings.TrimPrefix(f[1], "uid:")); err == nil {
				return n
			}
		}
	}
	return -1
}
