package android

import "time"

// Profile describes one simulated device: what it reports about itself, what is
// installed, which screens its apps show and which faults it injects. Profiles are
// YAML or JSON files (JSON is read as YAML); see fixtures/profiles for examples.
type Profile struct {
	// Name is a label for logs ("pixel7-api34").
	Name string `yaml:"name"`
	// APILevel is ro.build.version.sdk (29..34 are modelled on real captures).
	APILevel int `yaml:"apiLevel"`
	// Release is ro.build.version.release ("14"). Derived from APILevel when empty.
	Release string `yaml:"release"`
	// Model, Product and DeviceName fill ro.product.model / .name / .device and the
	// CNXN banner. Empty values take the sdk_gphone64 defaults of a Google emulator image.
	Model      string `yaml:"model"`
	Product    string `yaml:"product"`
	DeviceName string `yaml:"device"`
	// Props are extra or overriding system properties (getprop).
	Props map[string]string `yaml:"props"`
	// BootDuration is how long after start-up sys.boot_completed becomes 1.
	// Zero means booted at once. Phases follow a real boot: init.svc.bootanim=running
	// first, dev.bootcomplete and sys.boot_completed at the end, bootanim stopped last.
	BootDuration time.Duration `yaml:"bootDuration"`
	// ColdBootDuration and QuickBootDuration replace BootDuration when the
	// simulator runs as the `emulator` binary (emulator/sim.RunEmulator): a
	// quick boot (from the AVD's default_boot snapshot) takes QuickBootDuration,
	// a cold boot ColdBootDuration. Zero ColdBootDuration means BootDuration;
	// zero QuickBootDuration means a tenth of the cold boot (Quick Boot is "up
	// to 10x faster", developer.android.com).
	ColdBootDuration  time.Duration `yaml:"coldBootDuration"`
	QuickBootDuration time.Duration `yaml:"quickBootDuration"`
	// DisplayWidth/Height in pixels and Density in dpi (wm size / wm density).
	DisplayWidth  int `yaml:"displayWidth"`
	DisplayHeight int `yaml:"displayHeight"`
	Density       int `yaml:"density"`
	// FreeStorageBytes bounds /data; an install larger than what is left fails
	// with INSTALL_FAILED_INSUFFICIENT_STORAGE. Zero means 2 GiB.
	FreeStorageBytes int64 `yaml:"freeStorageBytes"`
	// Preinstalled are packages present at start-up without an APK.
	Preinstalled []Package `yaml:"preinstalled"`
	// Apps describe the activities and screens of packages by package id; they
	// apply whether the package is preinstalled or installed later from an APK.
	Apps []App `yaml:"apps"`
	// Overrides answer a shell command with a fixed result (e.g. a captured OEM
	// `dumpsys window`); the first whose Pattern matches the whole command line wins.
	Overrides []Override `yaml:"overrides"`
	// Faults to inject.
	Faults Faults `yaml:"faults"`
}

// Package is an installed package as the package manager knows it.
type Package struct {
	ID          string `yaml:"id"`
	VersionCode int64  `yaml:"versionCode"`
	VersionName string `yaml:"versionName"`
	// System marks a system package (not listed by `pm list packages -3`).
	System bool `yaml:"system"`
	// SignerSHA256 are the lowercase hex SHA-256 digests of the signer certificates.
	SignerSHA256 []string `yaml:"signerSha256"`
	// TestOnly mirrors android:testOnly in the manifest.
	TestOnly bool `yaml:"testOnly"`
	// APK names the package's real APK (a path, or a file of fixtures/apks);
	// when set, the package is installed from it at start-up, so its base.apk
	// exists and the fields above come from the APK itself. The loader
	// (emulator/sim) fills APKData from it.
	APK     string `yaml:"apk"`
	APKData []byte `yaml:"-"`
	// UserData marks a package restored from an AVD's saved user data (the
	// simulated emulator binary): installed at start-up, yet user-installed.
	UserData bool `yaml:"-"`
}

// App is the UI model of one package.
type App struct {
	Package string `yaml:"package"`
	// LauncherActivity is the MAIN/LAUNCHER activity (fully qualified class name).
	LauncherActivity string     `yaml:"launcherActivity"`
	Activities       []Activity `yaml:"activities"`
	// PID is assigned at launch when zero.
}

// Activity is one screen of an app.
type Activity struct {
	// Name is the fully qualified class name ("com.example.app.HomeActivity").
	Name string `yaml:"name"`
	// Exported activities can be started by `am start` from the shell.
	Exported *bool `yaml:"exported"`
	// Busy describes what happens right after the activity comes to the front.
	Busy Busy `yaml:"busy"`
	// Root is the view hierarchy shown by the activity. Without one the
	// activity shows what a plain Activity shows on a real device: the
	// DecorView with an action bar titled with Label and an empty
	// android:id/content (see plainActivityRoot).
	Root *Element `yaml:"root"`
	// Label is the activity's title; empty means the manifest's (the
	// activity's android:label, else the application's, else the class name).
	Label string `yaml:"label"`
}

// Busy is the activity's unsettled period after it comes to the front.
type Busy struct {
	// AnimateFor: frames keep being drawn and the hierarchy keeps changing (a
	// progress text updates) for this long.
	AnimateFor time.Duration `yaml:"animateFor"`
	// NetworkFor: sockets with queued bytes exist for this long.
	NetworkFor time.Duration `yaml:"networkFor"`
	// NeverIdle: the screen animates forever (a spinner, a video).
	NeverIdle bool `yaml:"neverIdle"`
}

// Element is one node of a view hierarchy, as uiautomator dumps it.
type Element struct {
	Class       string `yaml:"class"`
	ResourceID  string `yaml:"resourceId"`
	Text        string `yaml:"text"`
	ContentDesc string `yaml:"contentDesc"`
	// Bounds are [left, top, right, bottom] in pixels.
	Bounds    [4]int `yaml:"bounds"`
	Clickable bool   `yaml:"clickable"`
	Enabled   *bool  `yaml:"enabled"`
	Focusable bool   `yaml:"focusable"`
	// OnClick names an activity of the same app to start when clicked.
	OnClick  string     `yaml:"onClick"`
	Children []*Element `yaml:"children"`
	// action is what a system dialog's button does (faults.go); not in profiles.
	action string
}

// Override answers a command line with a fixed result.
type Override struct {
	// Pattern is a Go regular expression matched against the whole command line.
	Pattern  string `yaml:"pattern"`
	Stdout   string `yaml:"stdout"`
	Stderr   string `yaml:"stderr"`
	ExitCode int    `yaml:"exitCode"`
}

// Faults are failures the simulator injects.
type Faults struct {
	// OfflineAfter/OfflineFor: after OfflineAfter from start, the device goes
	// offline (adb lists it as `offline`) for OfflineFor, then comes back.
	// OfflineFor < 0 means it stays offline.
	OfflineAfter time.Duration `yaml:"offlineAfter"`
	OfflineFor   time.Duration `yaml:"offlineFor"`
	// DropConnectionAfter closes the transport connection to the adb server after
	// this long (once); the device then re-registers like a restarted emulator.
	DropConnectionAfter time.Duration `yaml:"dropConnectionAfter"`
	// SlowReplies delays every service's first reply by this much.
	SlowReplies time.Duration `yaml:"slowReplies"`
	// InstallFailure makes every install fail with this code
	// (e.g. "INSTALL_FAILED_INSUFFICIENT_STORAGE"); empty means none.
	InstallFailure string `yaml:"installFailure"`
	// BootNeverCompletes keeps sys.boot_completed unset forever.
	BootNeverCompletes bool `yaml:"bootNeverCompletes"`
	// UnauthorizedFor: the device starts unauthorized (adbd with
	// ro.adb.secure=1 answers the host's CNXN with AUTH TOKEN, and `adb
	// devices` lists it "unauthorized") and accepts the host's key after this
	// long; < 0 means never. Zero means authorized from the start.
	UnauthorizedFor time.Duration `yaml:"unauthorizedFor"`
	// SnapshotLoadFails makes a quick boot fail: the emulator logs the reason
	// and cold boots instead, deleting the default_boot snapshot.
	SnapshotLoadFails bool `yaml:"snapshotLoadFails"`
	// CrashAfter ends the emulator process abruptly this long after start
	// (no snapshot saved, the AVD lock left behind). Zero means never.
	CrashAfter time.Duration `yaml:"crashAfter"`
	// AppCrash makes an app's process die of an uncaught exception after
	// each launch (see AppCrashFault); nil means none.
	AppCrash *AppCrashFault `yaml:"appCrash"`
	// AppNotResponding makes an app stop responding after each launch.
	AppNotResponding *AppANRFault `yaml:"appNotResponding"`
	// SystemUINotResponding shows "System UI isn't responding" after start-up.
	SystemUINotResponding *SystemUIANRFault `yaml:"systemUINotResponding"`
}
