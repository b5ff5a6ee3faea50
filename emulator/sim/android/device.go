// Package android is the device model of the simulated emulator: system
// properties that come up in boot phases, an in-memory filesystem, the package
// manager (installs parse real APKs), the activity stack and window focus, and a
// /system/bin/sh-like shell whose commands answer in real Android's output formats
// (API 29-34; each format is based on a real capture under fixtures/captures).
//
// It knows nothing of the ADB transport: emulator/sim carries shell, sync, exec
// and tcp streams to the methods here.
//
// Contract between the files of this package (core: device.go, shell.go, fs.go,
// pm.go, net.go, props.go, utils.go, settings.go; am side: am.go, dumpsys_am.go):
//   - am.go provides newActivityManager(d *Device) *activityManager, called by New
//     after the filesystem and the package manager exist, and the hooks
//     d.onPackageRemoved(id) / d.onPackageReplaced(id), which pm.go calls with d.mu
//     NOT held.
//   - the core provides d.packageInfo, d.appModel, d.instrumentations,
//     d.packageUID (all take d.mu themselves), d.addGeneratedFile and the command
//     registries below.
package android

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Options tune a Device beyond its Profile.
type Options struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnBootCompleted, when set, is called once, the first time anything
	// (getprop, dumpsys, the console) sees sys.boot_completed=1, before it
	// is answered; the emulator logs "Boot completed in N ms" from it, so the
	// log line never trails what a readiness probe sees. It must not call
	// back into the device.
	OnBootCompleted func()
}

// Device is one simulated Android device. All methods are safe for concurrent use.
type Device struct {
	profile Profile
	now     func() time.Time
	started time.Time

	onBoot func() // Options.OnBootCompleted once-wrapped; nil when unset

	mu sync.Mutex // guards the state below and the state of the managers

	props map[string]string // static props; boot-phase props are computed in Prop
	fs    *memFS            // owned by fs.go
	pm    *packageManager   // owned by pm.go (packages, install, uninstall)
	am    *activityManager  // owned by am.go (activity stack, focus, instrumentation)
	net   *inDeviceNet      // owned by net.go (in-device TCP listeners for tcp:PORT)

	settings map[string]map[string]string // namespace -> key -> value (settings get/put/delete)

	actions actionLog // installs and activity starts (History)

	logs   *logStore   // the device log (logcat.go); has its own lock
	faults *faultState // app faults, error dialogs, dropbox (faults.go; guarded by mu)

	png pngCache   // the last screen's PNG (screencap.go; has its own lock)
	rec recordings // running screenrecord processes (screenrecord.go; has its own lock)
}

// Ctx is what a shell command gets: its arguments (argv[0] is the command name),
// its standard streams and the device. A command returns its exit status.
type Ctx struct {
	Context context.Context
	Device  *Device
	Args    []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	// Dir is the shell's working directory ("/" unless `cd` changed it);
	// relative path arguments resolve against it (c.path).
	Dir string
	// shell is the sh running the command (pkill may match and kill it).
	shell *shellState
}

// Command is one shell command. It returns the exit status.
type Command func(c *Ctx) int

// commands is the registry of shell commands by argv[0]; files register theirs
// in init(). Unknown commands answer like Android's mksh: "/system/bin/sh: X: inaccessible or not found", exit 127.
var commands = map[string]Command{}

func registerCommand(name string, fn Command) { commands[name] = fn }

// dumpsysServices is the registry of `dumpsys <service>` handlers.
var dumpsysServices = map[string]Command{}

func registerDumpsys(service string, fn Command) { dumpsysServices[service] = fn }

// cmdServices is the registry of `cmd <service>` handlers (argv[0] is the
// service name, as in `cmd package list packages` -> ["package","list","packages"]).
var cmdServices = map[string]Command{}

func registerCmdService(name string, fn Command) { cmdServices[name] = fn }

// Profile returns the profile the device was made from.
func (d *Device) Profile() Profile { return d.profile }

// Defaults of a Google API 34 "sdk_gphone64_x86_64" emulator system image
// (fingerprint google/sdk_gphone64_x86_64/emu64xa:14/UE1A.230829.036.A2/…; see
// fixtures/captures/SOURCES.md).
const (
	defaultAPILevel      = 34
	defaultModel         = "sdk_gphone64_x86_64"
	defaultProduct       = "sdk_gphone64_x86_64"
	defaultDeviceName    = "emu64xa"
	defaultDisplayWidth  = 1080
	defaultDisplayHeight = 2400
	defaultDensity       = 420
	defaultFreeStorage   = 2 << 30
)

// releaseByAPI maps ro.build.version.sdk to ro.build.version.release.
var releaseByAPI = map[int]string{
	21: "5.0", 22: "5.1", 23: "6.0", 24: "7.0", 25: "7.1.1", 26: "8.0.0", 27: "8.1.0",
	28: "9", 29: "10", 30: "11", 31: "12", 32: "12", 33: "13", 34: "14", 35: "15",
}

// New makes a device from a profile: empty fields take the defaults of a Google
// API 34 emulator image (display 1080x2400 at 420 dpi, 2 GiB free storage).
// Errors: an API level outside 21..35, negative sizes, an invalid override
// pattern, a preinstalled package without an id, duplicate packages or apps, an
// app whose launcher activity is not among its activities.
func New(p Profile, o Options) (*Device, error) {
	p, err := withDefaults(p)
	if err != nil {
		return nil, err
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	d := &Device{profile: p, now: now, started: now()}
	if o.OnBootCompleted != nil {
		d.onBoot = sync.OnceFunc(o.OnBootCompleted)
	}
	d.props = staticProps(p)
	d.settings = defaultSettings(p)
	d.fs = newMemFS(d.started)
	d.pm, err = newPackageManager(d)
	if err != nil {
		return nil, err
	}
	d.net = newInDeviceNet()
	d.logs = newLogStore()
	d.faults = newFaultState()
	d.am = newActivityManager(d)
	d.bootLog()
	d.scheduleStartupFaultsLocked()
	for _, pk := range p.Preinstalled {
		if len(pk.APKData) == 0 {
			continue
		}
		// The APK describes the package: install it in place of the entry.
		delete(d.pm.pkgs, pk.ID)
		if res := d.install(pk.APKData, installFlags{testOnly: true, image: true, userData: pk.UserData}); res.line != "Success" {
			return nil, fmt.Errorf("preinstalled %s from %s: %s", pk.ID, pk.APK, res.line)
		}
	}
	return d, nil
}

func withDefaults(p Profile) (Profile, error) {
	if p.APILevel == 0 {
		p.APILevel = defaultAPILevel
	}
	if p.APILevel < 21 || p.APILevel > 35 {
		return p, fmt.Errorf("profile %q: apiLevel %d outside 21..35", p.Name, p.APILevel)
	}
	if p.Release == "" {
		p.Release = releaseByAPI[p.APILevel]
	}
	if p.Model == "" {
		p.Model = defaultModel
	}
	if p.Product == "" {
		p.Product = defaultProduct
	}
	if p.DeviceName == "" {
		p.DeviceName = defaultDeviceName
		if p.APILevel < 34 {
			// API 31-33 sdk_gphone64 images report "emu64x"; API 34 "emu64xa".
			p.DeviceName = "emu64x"
		}
	}
	if p.DisplayWidth == 0 {
		p.DisplayWidth = defaultDisplayWidth
	}
	if p.DisplayHeight == 0 {
		p.DisplayHeight = defaultDisplayHeight
	}
	if p.Density == 0 {
		p.Density = defaultDensity
	}
	if p.FreeStorageBytes == 0 {
		p.FreeStorageBytes = defaultFreeStorage
	}
	switch {
	case p.DisplayWidth < 0 || p.DisplayHeight < 0 || p.Density < 0:
		return p, fmt.Errorf("profile %q: negative display size or density", p.Name)
	case p.FreeStorageBytes < 0:
		return p, fmt.Errorf("profile %q: negative freeStorageBytes", p.Name)
	case p.BootDuration < 0:
		return p, fmt.Errorf("profile %q: negative bootDuration", p.Name)
	}
	if err := checkFaults(p.Faults); err != nil {
		return p, fmt.Errorf("profile %q: %w", p.Name, err)
	}
	for i, o := range p.Overrides {
		if _, err := compileOverride(o.Pattern); err != nil {
			return p, fmt.Errorf("profile %q: override %d: %w", p.Name, i, err)
		}
	}
	seen := map[string]bool{}
	for _, pk := range p.Preinstalled {
		if pk.ID == "" {
			return p, fmt.Errorf("profile %q: preinstalled package without id", p.Name)
		}
		if seen[pk.ID] {
			return p, fmt.Errorf("profile %q: package %s preinstalled twice", p.Name, pk.ID)
		}
		seen[pk.ID] = true
	}
	apps := map[string]bool{}
	for _, a := range p.Apps {
		if a.Package == "" {
			return p, fmt.Errorf("profile %q: app without package", p.Name)
		}
		if apps[a.Package] {
			return p, fmt.Errorf("profile %q: app %s described twice", p.Name, a.Package)
		}
		apps[a.Package] = true
		if a.LauncherActivity != "" && !hasActivity(a, a.LauncherActivity) {
			return p, fmt.Errorf("profile %q: app %s: launcherActivity %s is not among its activities", p.Name, a.Package, a.LauncherActivity)
		}
		for _, act := range a.Activities {
			if act.Name == "" {
				return p, fmt.Errorf("profile %q: app %s: activity without name", p.Name, a.Package)
			}
			if err := checkOnClick(a, act.Root); err != nil {
				return p, fmt.Errorf("profile %q: app %s activity %s: %w", p.Name, a.Package, act.Name, err)
			}
		}
	}
	return p, nil
}

func hasActivity(a App, name string) bool {
	for _, act := range a.Activities {
		if act.Name == name {
			return true
		}
	}
	return false
}

func checkOnClick(a App, e *Element) error {
	if e == nil {
		return nil
	}
	if e.OnClick != "" && !hasActivity(a, e.OnClick) {
		return fmt.Errorf("onClick %s is not an activity of the app", e.OnClick)
	}
	for _, c := range e.Children {
		if err := checkOnClick(a, c); err != nil {
			return err
		}
	}
	return nil
}

// LoadProfile reads a profile from a YAML or JSON file (JSON is read as YAML).
// Durations are Go duration strings ("3s", "1m30s"); unknown fields are errors,
// so a typo does not silently fall back to a default. The result is not yet
// defaulted: New applies the defaults and validates.
func LoadProfile(path string) (Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, err
	}
	return ParseProfile(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), b)
}
