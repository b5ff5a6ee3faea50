package parse

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// capture reads a real captured output from fixtures/captures (see SOURCES.md
// there for where each file comes from).
func capture(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", rel))
	if err != nil {
		t.Fatalf("capture %s: %v", rel, err)
	}
	return string(b)
}

// captures lists the files of one capture directory (new captures join the
// generic property checks automatically).
func captures(t testing.TB, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join("..", "..", "fixtures", "captures", dir, "*.txt"))
	if len(m) == 0 {
		// A wrong path must fail, not make every property check pass on nothing.
		t.Fatalf("no captures in fixtures/captures/%s", dir)
	}
	var rel []string
	for _, p := range m {
		rel = append(rel, filepath.Join(dir, filepath.Base(p)))
	}
	return rel
}

func TestParseInstallOutputCapture(t *testing.T) {
	err := ParseInstallOutput(capture(t, "adb-install/failure-version-downgrade.txt"))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := &Error{ID: IDInstallFailed, Code: "INSTALL_FAILED_VERSION_DOWNGRADE",
		Msg: "Downgrade detected: Update version code 1784086171 is older than current 1784097066"}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Fatal(diff)
	}
}

func TestParseInstallOutputForms(t *testing.T) {
	// Forms of PackageManagerShellCommand output: "Success"; "Failure [CODE]";
	// "Failure [CODE: msg]" (capture above); host-prefixed lines; no code at all.
	cases := []struct {
		in, code string
		ok       bool
	}{
		{"Success\n", "", true},
		{"Performing Streamed Install\nSuccess\n", "", true},
		{"Failure [INSTALL_FAILED_TEST_ONLY]\n", "INSTALL_FAILED_TEST_ONLY", false},
		{"Failure [INSTALL_PARSE_FAILED_NO_CERTIFICATES: Failed to collect certificates]\n", "INSTALL_PARSE_FAILED_NO_CERTIFICATES", false},
		{"Failure [DELETE_FAILED_INTERNAL_ERROR]\n", "DELETE_FAILED_INTERNAL_ERROR", false},
		{"", "", false},
	}
	for _, c := range cases {
		err := ParseInstallOutput(c.in)
		if c.ok != (err == nil) {
			t.Errorf("%q: err = %v", c.in, err)
			continue
		}
		if err != nil {
			e := err.(*Error)
			if e.ID != IDInstallFailed || e.Code != c.code || e.Retryable {
				t.Errorf("%q: got %+v, want code %q", c.in, e, c.code)
			}
		}
	}
}

func TestParseAmStartCapture(t *testing.T) {
	r, err := ParseAmStart(capture(t, "am-start-W/api29plus-cold-encapp.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := AmStart{Status: "ok", LaunchState: "COLD",
		Activity:  Component{"com.facebook.alohaapps.launcher", "com.facebook.aloha.app.home.touch.HomeActivity"},
		TotalTime: 1479 * time.Millisecond, WaitTime: 1482 * time.Millisecond, Complete: true}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Fatal(diff)
	}
}

func TestParseAmStartErrors(t *testing.T) {
	// Wording recorded in fixtures/captures/SOURCES.md ("am start of a missing
	// activity"): Starting / Error type 3 / Error: Activity class {…} does not exist.
	out := "Starting: Intent { cmp=com.example/.Missing }\nError type 3\nError: Activity class {com.example/com.example.Missing} does not exist.\n"
	_, err := ParseAmStart(out)
	e := wantID(t, err, IDActivityNotFound)
	if !strings.Contains(e.Msg, "does not exist") {
		t.Errorf("msg = %q", e.Msg)
	}
}

func TestParseDumpsysPackageCaptures(t *testing.T) {
	cases := []struct {
		file, pkg string
		want      PackageInfo
	}{
		{"dumpsys-package/api30plus-wearos-updated-system-app.txt", "com.tekartik.package1", PackageInfo{
			UserID: 10057, VersionCode: 20, VersionName: "1.0.16", MinSDK: 27, TargetSDK: 36,
			FirstInstallTime: time.Date(2009, 1, 1, 1, 0, 0, 0, time.UTC),
			LastUpdateTime:   time.Date(2025, 7, 4, 1, 16, 34, 0, time.UTC),
			Signatures:       []string{"b76298ca"}, UpdatedSystemApp: true}},
		{"dumpsys-package/api30plus-wearos-user-app.txt", "com.tekartik.package2", PackageInfo{
			UserID: 10090, VersionCode: 248, VersionName: "1.4.73", MinSDK: 26, TargetSDK: 36,
			FirstInstallTime: time.Date(2025, 6, 18, 8, 27, 4, 0, time.UTC),
			LastUpdateTime:   time.Date(2025, 7, 3, 23, 31, 21, 0, time.UTC),
			Signatures:       []string{"2cac3db6"}}},
		{"dumpsys-package/api34-emulator-adb-installed.txt", "com.example.foodies", PackageInfo{
			UserID: 10197, VersionCode: 1, VersionName: "1.0", MinSDK: 31, TargetSDK: 34,
			FirstInstallTime: time.Date(2025, 5, 22, 4, 17, 19, 0, time.UTC),
			LastUpdateTime:   time.Date(2025, 5, 22, 4, 17, 19, 0, time.UTC),
			Signatures:       []string{"522e4361"}}},
	}
	for _, c := range cases {
		got, ok := ParseDumpsysPackage(capture(t, c.file), c.pkg)
		if !ok {
			t.Errorf("%s: package not found", c.file)
			continue
		}
		c.want.Package = c.pkg
		if diff := cmp.Diff(c.want, got, cmp.FilterPath(func(p cmp.Path) bool {
			n := p.Last().String()
			return n == ".Flags" || n == ".CodePath"
		}, cmp.Ignore())); diff != "" {
			t.Errorf("%s: %s", c.file, diff)
		}
		if got.CodePath == "" || len(got.Flags) == 0 {
			t.Errorf("%s: codePath %q flags %v", c.file, got.CodePath, got.Flags)
		}
		if _, ok := ParseDumpsysPackage(capture(t, c.file), "com.not.installed"); ok {
			t.Errorf("%s: found a package that is not there", c.file)
		}
	}
}

func TestParsePackageListCapture(t *testing.T) {
	got := ParsePackageList(capture(t, "pm-list-packages/api34-f-grep-filtered.txt"))
	if len(got) != 4 {
		t.Fatalf("got %d entries: %+v", len(got), got)
	}
	want0 := PackageEntry{Package: "com.example.foodies",
		APKPath: "/data/app/~~oZ0lNhDdkIp2NaWMhGczgw==/com.example.foodies-ttByxQb49HI7GiOb62XhPQ==/base.apk"}
	if diff := cmp.Diff(want0, got[0]); diff != "" {
		t.Fatal(diff)
	}
	if got[3].Package != "com.google.mainline.adservices" {
		t.Fatalf("last = %+v", got[3])
	}
	// --show-versioncode form (appium-adb app-commands.js regex and test mocks).
	v := ParsePackageList("package:io.appium.settings versionCode:58\npackage:com.android.shell versionCode:34\n")
	if len(v) != 2 || v[0].VersionCode != 58 || v[1].Package != "com.android.shell" {
		t.Fatalf("versioncode form: %+v", v)
	}
}

func TestParseGetpropCapture(t *testing.T) {
	for _, f := range captures(t, "getprop") {
		props := ParseGetprop(capture(t, f))
		n := 0
		for _, l := range lines(capture(t, f)) {
			if strings.HasPrefix(l, "[") {
				n++
			}
		}
		if len(props) < n*9/10 || len(props) == 0 {
			t.Errorf("%s: %d props from %d lines", f, len(props), n)
		}
	}
	props := ParseGetprop(capture(t, "getprop/api33-motorola-edge20.txt"))
	if props["ro.build.version.sdk"] != "33" || props["dev.bootcomplete"] != "1" || props["init.svc.bootanim"] != "stopped" {
		t.Fatalf("sdk=%q dev.bootcomplete=%q bootanim=%q", props["ro.build.version.sdk"],
			props["dev.bootcomplete"], props["init.svc.bootanim"])
	}
}

func TestParseBootStatus(t *testing.T) {
	// A booted device answers BootCommand with "1\n1\nstopped" (bitrise go-android).
	b := ParseBootStatus("1\n1\nstopped\n", "")
	if !b.Ready {
		t.Fatalf("booted: %+v", b)
	}
	if b := ParseBootStatus("\n\nrunning\n", ""); b.Ready || b.Reason != "sys.boot_completed is not 1" {
		t.Fatalf("booting: %+v", b)
	}
	if b := ParseBootStatus("1\n1\nrunning\n", ""); b.Ready {
		t.Fatalf("bootanim running: %+v", b)
	}
	svc := "Found 3 services:\n0\tactivity: [android.app.IActivityManager]\n1\tpackage: [android.content.pm.IPackageManager]\n2\tSurfaceFlinger: [android.ui.ISurfaceComposer]\n"
	b = ParseBootStatus("1\n1\nstopped\n", svc)
	if b.Ready || !cmp.Equal(b.MissingServices, []string{"window"}) {
		t.Fatalf("window missing: %+v", b)
	}
}

func TestParseWindowFocusCaptures(t *testing.T) {
	// API 34: the DisplayContent dump inside `dumpsys activity activities` is the
	// same text `dumpsys window displays` prints.
	ds := ParseWindowFocus(capture(t, "dumpsys-activity-activities/api34.txt"))
	want := Component{"com.android.launcher3", "com.android.launcher3.uioverrides.QuickstepLauncher"}
	if len(ds) != 1 || ds[0].DisplayID != 0 || ds[0].CurrentFocus != want || ds[0].FocusedApp != want {
		t.Fatalf("focus = %+v", ds)
	}
	if fg, ok := Foreground(ds); !ok || fg != want {
		t.Fatalf("foreground = %v %v", fg, ok)
	}
	// `dumpsys window windows` on R/S: the captured sections hold no mCurrentFocus
	// (SOURCES.md), so no focus may be invented.
	for _, f := range captures(t, "dumpsys-window-windows") {
		for _, d := range ParseWindowFocus(capture(t, f)) {
			if !d.CurrentFocus.IsZero() && !strings.Contains(capture(t, f), d.CurrentFocus.Package) {
				t.Errorf("%s: focus %v not in the text", f, d.CurrentFocus)
			}
		}
	}
}

func TestForegroundMultiDisplayAndNull(t *testing.T) {
	// Line forms: Q+ mFocusedApp=ActivityRecord{… u0 pkg/.Act tN} (appium-adb
	// apk-utils.spec.ts, Samsung sub-display) and mCurrentFocus=null.
	out := "  Display: mDisplayId=0\n    mCurrentFocus=null\n    mFocusedApp=ActivityRecord{1 u0 com.a/.Main t3}\n" +
		"  Display: mDisplayId=1\n    mCurrentFocus=Window{2 u0 com.android.systemui/com.android.systemui.subscreen.SubHomeActivity}\n" +
		"    mFocusedApp=ActivityRecord{14d88c3 u0 com.android.systemui/.subscreen.SubHomeActivity t9}\n"
	ds := ParseWindowFocus(out)
	if len(ds) != 2 || !ds[0].CurrentFocusNull || ds[0].FocusedApp.Activity != "com.a.Main" {
		t.Fatalf("%+v", ds)
	}
	fg, ok := Foreground(ds)
	if !ok || fg.Package != "com.android.systemui" {
		t.Fatalf("foreground = %v %v", fg, ok)
	}
	if _, ok := Foreground(ParseWindowFocus("  mCurrentFocus=null\n  mFocusedApp=null\n")); ok {
		t.Fatal("null focus reported a foreground")
	}
}

func TestParseResumedActivityCapture(t *testing.T) {
	c, ok := ParseResumedActivity(capture(t, "dumpsys-activity-activities/api34.txt"))
	want := Component{"com.android.launcher3", "com.android.launcher3.uioverrides.QuickstepLauncher"}
	if !ok || c != want {
		t.Fatalf("resumed = %v %v", c, ok)
	}
}

func TestParseComponent(t *testing.T) {
	c, ok := ParseComponent("com.a/.b.Main")
	if !ok || c != (Component{"com.a", "com.a.b.Main"}) || c.String() != "com.a/com.a.b.Main" {
		t.Fatal(c, ok)
	}
	for _, bad := range []string{"", "noslash", "/x", "a/", "StatusBar"} {
		if _, ok := ParseComponent(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseDevicesLong(t *testing.T) {
	// Lines as measured from adb 1.0.41 (host:devices-l) plus the USB form of
	// transport.cpp append_transport (devpath "usb:…" first).
	in := "127.0.0.1:17001        offline transport_id:1\n" +
		"emulator-5554          device product:sdk_gphone64_x86_64 model:sdk_gphone64_x86_64 device:emu64xa transport_id:2\n" +
		"0123456789ABCDEF       no permissions (user in plugdev group; are your udev rules wrong?); see [http://developer.android.com/tools/device.html] usb:1-1 transport_id:3\n"
	got := ParseDevicesLong(in)
	want := []DeviceInfo{
		{Serial: "127.0.0.1:17001", State: StateOffline, TransportID: 1},
		{Serial: "emulator-5554", State: StateDevice, Product: "sdk_gphone64_x86_64", Model: "sdk_gphone64_x86_64", Device: "emu64xa", TransportID: 2},
		{Serial: "0123456789ABCDEF", State: StateNoPermissions, DevPath: "usb:1-1", TransportID: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
	short := ParseDevices("127.0.0.1:17001\toffline\nemulator-5554\tdevice\n")
	if len(short) != 2 || short[0].State != StateOffline || short[1].State != StateDevice {
		t.Fatalf("%+v", short)
	}
}

func TestParseWmSizeAndGfxinfoForms(t *testing.T) {
	// `wm size` forms from appium-adb device-settings.js / README examples cited in
	// fixtures/captures/SOURCES.md.
	d, ok := ParseWmSize("Physical size: 1080x1920\nOverride size: 720x1280\n")
	if w, h := d.Effective(); !ok || w != 720 || h != 1280 || d.PhysicalWidth != 1080 {
		t.Fatalf("%+v", d)
	}
	if _, ok := ParseWmSize(""); ok {
		t.Fatal("empty wm size parsed")
	}
	if _, ok := ParseGfxinfo("No process found for: com.x\n"); ok {
		t.Fatal("gfxinfo of a missing process parsed")
	}
}

func TestParseServiceListForm(t *testing.T) {
	s := ParseServiceList("Found 2 services:\n0\tandroid.hardware.power.IPower/default: [android.hardware.power.IPower]\n1\tDockObserver: []\n")
	want := []Service{{0, "android.hardware.power.IPower/default", "android.hardware.power.IPower"}, {1, "DockObserver", ""}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatal(diff)
	}
	if p := ParsePmPath("package:/data/app/x/base.apk\npackage:/data/app/x/split_config.xhdpi.apk\n"); len(p) != 2 {
		t.Fatal(p)
	}
}

func TestParseGfxinfoRealOutputs(t *testing.T) {
	// Verbatim head of a real `adb shell dumpsys gfxinfo com.tencent.mobileqq`
	// (Windows host, pre-API-31: no "Frame deadline missed" line), public notes
	// file, search index id 52156645221.
	qq := "Applications Graphics Acceleration Info:\nUptime: 27522172 Realtime: 73274303\n\n" +
		"** Graphics info for pid 18222 [com.tencent.mobileqq] **\n\nStats since: 9858093255087ns\n" +
		"Total frames rendered: 2546\nJanky frames: 203 (7.97%)\n90th percentile: 14ms\n95th percentile: 20ms\n" +
		"99th percentile: 53ms\nNumber Missed Vsync: 42\nNumber High input latency: 0\nNumber Slow UI thread: 82\n" +
		"Number Slow bitmap uploads: 13\nNumber Slow issue draw commands: 108\n\nCaches:\n"
	got, ok := ParseGfxinfo(qq)
	want := FrameStats{PID: 18222, Package: "com.tencent.mobileqq", TotalFrames: 2546, JankyFrames: 203,
		MissedVsync: 42, SlowUIThread: 82, DeadlineMissed: -1, HighInputLatency: 0}
	if diff := cmp.Diff(want, got); !ok || diff != "" {
		t.Fatalf("ok=%v %s", ok, diff)
	}
	// API 31+ lines ("Janky frames (legacy)", "Number Frame deadline missed"), as in
	// the test fixture gfxinfoFixture, index id 59216589247.
	s12 := "** Graphics info for pid 1234 [com.example.app] **\n\nStats since: 91522723936145ns\n" +
		"Total frames rendered: 6266\nJanky frames: 489 (7.80%)\nJanky frames (legacy): 2300 (36.71%)\n" +
		"Number Missed Vsync: 4\nNumber High input latency: 10359\nNumber Slow UI thread: 456\n" +
		"Number Frame deadline missed: 489\nNumber Frame deadline missed (legacy): 517\n"
	got, ok = ParseGfxinfo(s12)
	if !ok || got.JankyFrames != 489 || got.DeadlineMissed != 489 || got.SlowUIThread != 456 {
		t.Fatalf("%+v", got)
	}
}

func TestParseActivityTopRealOutput(t *testing.T) {
	// Real `dumpsys activity top` lines from a device-diff report (index id
	// 57371943705): a task with a null affinity, then the Fire launcher.
	out := "TASK null id=26 userId=0\n  ACTIVITY com.android.launcher3/com.android.quickstep.RecentsActivity eb77636 pid=1948\n" +
		"    Local Activity 6047dfb State:\n      mResumed=false mStopped=true mFinished=false\n" +
		"TASK 10120:com.amazon.firelauncher id=2 userId=0\n  ACTIVITY com.amazon.firelauncher/.Launcher f7a5258 pid=1919\n"
	got := ParseActivityTop(out)
	want := []TopActivity{
		{Component{"com.android.launcher3", "com.android.quickstep.RecentsActivity"}, 1948},
		{Component{"com.amazon.firelauncher", "com.amazon.firelauncher.Launcher"}, 1919},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatal(diff)
	}
}

func TestParseServiceListRealOutput(t *testing.T) {
	// Head of a real `service list` (AndroidQF acquisition, OPPO device), index id
	// 44341411428: sparse indexes, HAL names with "/default", empty interfaces.
	out := "Found 368 services:\n0\tAtlasService: [android.atlas.service]\n1\tDockObserver: []\n" +
		"9\taccessibility: [android.view.accessibility.IAccessibilityManager]\n11\tactivity: [android.app.IActivityManager]\n" +
		"26\tandroid.hardware.power.IPower/default: [android.hardware.power.IPower]\n27\tandroid.hardware.power.stats.IPowerStats/default: []\n"
	got := ParseServiceList(out)
	if len(got) != 6 || got[3] != (Service{11, "activity", "android.app.IActivityManager"}) ||
		got[4].Name != "android.hardware.power.IPower/default" || got[5].Interface != "" {
		t.Fatalf("%+v", got)
	}
	b := ParseBootStatus("1\n1\nstopped\n", out)
	if b.Ready || !cmp.Equal(b.MissingServices, []string{"package", "window"}) {
		t.Fatalf("%+v", b)
	}
}

func TestParseAmStartCaptures(t *testing.T) {
	cases := []struct {
		file  string
		want  AmStart
		errID string
	}{
		{"am-start-W/api29plus-already-top-delivered.txt", AmStart{Status: "ok", LaunchState: "UNKNOWN",
			Activity:  Component{"moe.nb4a.debug", "io.nekohasekai.sagernet.ui.MainActivity"},
			TotalTime: 0, WaitTime: 10 * time.Millisecond, Complete: true,
			Warning: "Activity not started, intent has been delivered to currently running top-most instance."}, ""},
		{"am-start-W/api29plus-hot-brought-to-front.txt", AmStart{Status: "ok", LaunchState: "HOT",
			Activity:  Component{"com.google.android.calculator", "com.android.calculator2.CalculatorGoogle"},
			TotalTime: 60 * time.Millisecond, WaitTime: 67 * time.Millisecond, Complete: true,
			Warning: "Activity not started, its current task has been brought to the front"}, ""},
		{"am-start-W/api29plus-unknown-no-totaltime.txt", AmStart{Status: "ok", LaunchState: "UNKNOWN",
			Activity:  Component{"com.android.settings", "com.android.settings.HWSettings"},
			TotalTime: -1, WaitTime: 37 * time.Millisecond, Complete: true}, ""},
		{"am-start/success-explicit-component-shortened.txt", AmStart{TotalTime: -1, WaitTime: -1}, ""},
		{"am-start-errors/api30-not-exported.txt", AmStart{TotalTime: -1, WaitTime: -1}, IDPermissionError},
		{"am-start-errors/api31plus-not-exported.txt", AmStart{TotalTime: -1, WaitTime: -1}, IDPermissionError},
	}
	for _, c := range cases {
		got, err := ParseAmStart(capture(t, c.file))
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: %s", c.file, diff)
		}
		if IDOf(err) != c.errID {
			t.Errorf("%s: err %v, want id %q", c.file, err, c.errID)
		}
		if err != nil && !strings.Contains(err.Error(), "Permission Denial") {
			t.Errorf("%s: message %q lacks the exception text", c.file, err)
		}
	}
}

func TestParseInstallCaptures(t *testing.T) {
	cases := map[string]string{
		"adb-install/failure-update-incompatible-existing-package.txt":     "INSTALL_FAILED_UPDATE_INCOMPATIBLE",
		"adb-install/failure-update-incompatible-previously-installed.txt": "INSTALL_FAILED_UPDATE_INCOMPATIBLE",
		"pm-install/failure-test-only-api31plus.txt":                       "INSTALL_FAILED_TEST_ONLY",
		"pm-install/failure-test-only-legacy-installPackageLI.txt":         "INSTALL_FAILED_TEST_ONLY",
		"adb-uninstall/success-emulator.txt":                               "",
	}
	for f, code := range cases {
		err := ParseInstallOutput(capture(t, f))
		if code == "" {
			if err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.Msg == "" || strings.Contains(e.Msg, "]") {
			t.Errorf("%s: %+v, want code %s and a clean message", f, err, code)
		}
	}
}

func TestParseSmallCaptures(t *testing.T) {
	paths := ParsePmPath(capture(t, "pm-path/api35-moto-g45-split-apks.txt"))
	if len(paths) != 2 || !strings.HasSuffix(paths[0], "/base.apk") || !strings.HasSuffix(paths[1], "/split_config.arm64_v8a.apk") {
		t.Errorf("pm path: %q", paths)
	}
	if v := ParseGetpropValue(capture(t, "getprop-single/api33-emulator-ro.build.version.sdk.txt")); v != "33" {
		t.Errorf("getprop sdk %q", v)
	}
	if v := ParseGetpropValue(capture(t, "getprop-single/api33-emulator-unset-ro.boot.verifiedbootstate.txt")); v != "" {
		t.Errorf("unset prop %q", v)
	}
	fp := "google/sdk_gphone64_x86_64/emu64x:13/TE1A.240213.009/12342917:userdebug/dev-keys"
	if v := ParseGetpropValue(capture(t, "getprop-single/api33-emulator-ro.build.fingerprint.txt")); v != fp {
		t.Errorf("fingerprint %q", v)
	}
	apex := ParsePackageList(capture(t, "pm-list-packages/api33-emulator-apex-only.txt"))
	if len(apex) == 0 || apex[0].Package != "com.google.android.appsearch" {
		t.Errorf("apex list %+v", apex)
	}
	svc := capture(t, "service-list/api33-emulator.txt")
	list := ParseServiceList(svc)
	if len(list) < 200 || list[1] != (Service{1, "SurfaceFlinger", "android.ui.ISurfaceComposer"}) {
		t.Errorf("service list: %d services, [1]=%+v", len(list), list[1])
	}
	if b := ParseBootStatus("1\n1\nstopped\n", svc); !b.Ready {
		t.Errorf("API 33 emulator service list not ready: %+v", b)
	}
	g, ok := ParseGfxinfo(capture(t, "dumpsys-gfxinfo/api31plus-phone-instagram.txt"))
	want := FrameStats{PID: 31185, Package: "com.instagram.android", TotalFrames: 51, JankyFrames: 9,
		MissedVsync: 7, SlowUIThread: 9, DeadlineMissed: 9, HighInputLatency: 83}
	if diff := cmp.Diff(want, g); !ok || diff != "" {
		t.Errorf("gfxinfo: %s", diff)
	}
}

func TestParseFramestats(t *testing.T) {
	// Two real rows of `dumpsys gfxinfo PKG framestats` with the pre-Q 16-column
	// header (a blog's capture, search index id 44207812512), after an Uptime
	// header and process block shaped like the API 31+ capture in
	// fixtures/captures/dumpsys-gfxinfo.
	old := "Applications Graphics Acceleration Info:\nUptime: 594430354 Realtime: 594430354\n\n" +
		"** Graphics info for pid 31185 [com.example.app] **\n\nStats since: 594399000000000ns\nTotal frames rendered: 2\n" +
		"Profile data in ms:\n\n\tcom.example.app/com.example.app.Main/android.view.ViewRootImpl@1 (visibility=0)\n" +
		"Window: com.example.app/com.example.app.Main\nStats since: 594399500000000ns\nTotal frames rendered: 7\n\n" +
		"---PROFILEDATA---\n" +
		"Flags,IntendedVsync,Vsync,OldestInputEvent,NewestInputEvent,HandleInputStart,AnimationStart,PerformTraversalsStart,DrawStart,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,\n" +
		"0,594399833469194,594399833469194,9223372036854775807,0,594399833992420,594399834015180,594399834093462,594399835255753,594399835397316,594399835719034,594399835808878,594399836632628,594399837228514,96000,146000,\n" +
		"0,594429840570165,594429840570165,9223372036854775807,0,594429841649231,594429841736940,594429841741471,594429842202356,594429845314544,594429847401106,594429847993190,594429853626210,594429854321679,264000,326000,\n" +
		"---PROFILEDATA---\n\nView hierarchy:\n"
	f, ok := ParseFramestats(old)
	want := FrameTimeline{UptimeMillis: 594430354, StatsSinceNanos: 594399000000000, Windows: 1, Frames: 2,
		NewestFrameCompletedNanos: 594429854321679}
	if diff := cmp.Diff(want, f); !ok || diff != "" {
		t.Fatalf("ok=%v %s", ok, diff)
	}
	if d, ok := f.SinceLastFrame(); !ok || d != 594430354*time.Millisecond-594429854321679 {
		t.Fatalf("since last frame %v %v", d, ok)
	}
	// The process counters stay the process block's, not the window's.
	if g, ok := ParseGfxinfo(old); !ok || g.TotalFrames != 2 {
		t.Fatalf("%+v", g)
	}
	// API 31+ header (verbatim emulator header quoted in search index id
	// 62456845039): FrameCompleted moves to column 16; found by name. Two
	// windows, one without rows; a row still in flight (FrameCompleted 0)
	// counts by its IntendedVsync.
	h31 := "Flags,FrameTimelineVsyncId,IntendedVsync,Vsync,InputEventId,HandleInputStart,AnimationStart,PerformTraversalsStart,DrawStart,FrameDeadline,FrameInterval,FrameStartTime,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,GpuCompleted,SwapBuffersCompleted,DisplayPresentTime,CommandSubmissionCompleted,"
	row := func(iv, fc int64) string {
		c := make([]string, 23)
		for i := range c {
			c[i] = "0"
		}
		c[2], c[16] = strconv.FormatInt(iv, 10), strconv.FormatInt(fc, 10)
		return strings.Join(c, ",") + ","
	}
	s31 := "Uptime: 40000 Realtime: 40000\n** Graphics info for pid 1 [a] **\nStats since: 30000000000ns\n" +
		"---PROFILEDATA---\n" + h31 + "\n" + row(38_000_000_000, 38_009_000_000) + "\n" + row(38_100_000_000, 0) + "\n---PROFILEDATA---\n\n" +
		"---PROFILEDATA---\n" + h31 + "\n---PROFILEDATA---\n"
	f, ok = ParseFramestats(s31)
	if !ok || f.Windows != 2 || f.Frames != 2 || f.NewestFrameCompletedNanos != 38_100_000_000 {
		t.Fatalf("ok=%v %+v", ok, f)
	}
	if d, _ := f.SinceLastFrame(); d != 1900*time.Millisecond {
		t.Fatalf("since last frame %v", d)
	}
	// No rows at all: quiet since "Stats since".
	f, ok = ParseFramestats("Uptime: 40000 Realtime: 40000\nStats since: 30000000000ns\n---PROFILEDATA---\n" + h31 + "\n---PROFILEDATA---\n")
	if d, _ := f.SinceLastFrame(); !ok || d != 10*time.Second {
		t.Fatalf("ok=%v %+v %v", ok, f, d)
	}
	// Plain gfxinfo (no PROFILEDATA) and a missing process are not a timeline.
	for _, s := range []string{capture(t, "dumpsys-gfxinfo/api31plus-phone-instagram.txt"),
		"Applications Graphics Acceleration Info:\nUptime: 1 Realtime: 1\nNo process found for: com.x\n"} {
		if f, ok := ParseFramestats(s); ok {
			t.Fatalf("parsed %+v", f)
		}
	}
}

func wantID(t *testing.T, err error, id string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *parse.Error", err, err)
	}
	if e.ID != id {
		t.Fatalf("error id = %q, want %q (%v)", e.ID, id, err)
	}
	return e
}
