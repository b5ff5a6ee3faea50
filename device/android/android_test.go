package android

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// scriptedDevice answers each shell command from a script, by the exact
// command line, and records the commands asked. A command not in the
// script answers exit 127 (as sh does for an unknown command), so a test
// that expects a command it did not script sees it fail.
type scriptedDevice struct {
	serial   string
	state    string
	stateErr error
	answers  map[string]device.ShellResult
	errs     map[string]error
	asked    []string
}

func (d *scriptedDevice) Serial() string { return d.serial }

func (d *scriptedDevice) State(context.Context) (string, error) { return d.state, d.stateErr }

func (d *scriptedDevice) Shell(_ context.Context, cmd string) (device.ShellResult, error) {
	d.asked = append(d.asked, cmd)
	if err, ok := d.errs[cmd]; ok {
		return device.ShellResult{}, err
	}
	if r, ok := d.answers[cmd]; ok {
		return r, nil
	}
	return device.ShellResult{ExitCode: 127, Stderr: "/system/bin/sh: not scripted: " + cmd}, nil
}

func (d *scriptedDevice) Install(context.Context, string, device.InstallOptions) error {
	return errors.New("not scripted")
}

func (d *scriptedDevice) Uninstall(context.Context, string) error { return errors.New("not scripted") }

func (d *scriptedDevice) Pull(context.Context, string, io.Writer) (int64, error) {
	return 0, errors.New("not scripted")
}

// capture reads a real device's output from fixtures/captures (see its
// SOURCES.md for where each came from).
func capture(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func out(stdout string) device.ShellResult { return device.ShellResult{Stdout: stdout} }

func wantErrID(t *testing.T, what string, err error, id agent.ErrorID) {
	t.Helper()
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != id {
		t.Errorf("%s: error %v, want %s", what, err, id)
	}
}

// BootProbe is BootCommand's getprops, the marker and `service list` in one
// shell; its answer is judged on the API 33 emulator's real service list.
func TestBootStatusProbe(t *testing.T) {
	if BootProbe != "getprop dev.bootcomplete; getprop sys.boot_completed; getprop init.svc.bootanim; echo --SCREENGRAPH-BOOT-SPLIT--; service list" {
		t.Errorf("BootProbe = %q", BootProbe)
	}
	services := capture(t, "service-list/api33-emulator.txt")
	for _, tc := range []struct {
		name, stdout string
		ready        bool
		reason       string
	}{
		{"booted", "1\n1\nstopped\n" + BootSplit + "\n" + services, true, ""},
		{"no services yet", "1\n1\nstopped\n" + BootSplit + "\n", false, "service list is empty"},
		{"no marker", "1\n1\nstopped\n", false, "service list is empty"},
		{"still booting", "\n\nrunning\n" + BootSplit + "\n" + services, false, ""},
	} {
		d := &scriptedDevice{serial: "emulator-5554", answers: map[string]device.ShellResult{
			BootProbe: {Stdout: tc.stdout, TransportID: 7}}}
		b, err := BootStatus(t.Context(), d)
		if err != nil || b.Ready != tc.ready || b.TransportID != 7 || (tc.reason != "" && b.Reason != tc.reason) {
			t.Errorf("%s: %+v, %v; want ready %v reason %q", tc.name, b, err, tc.ready, tc.reason)
		}
		if !slices.Equal(d.asked, []string{BootProbe}) {
			t.Errorf("%s: asked %q, want one BootProbe", tc.name, d.asked)
		}
	}
	d := &scriptedDevice{errs: map[string]error{BootProbe: agent.Errorf(agent.ErrDeviceOffline, "gone")}}
	_, err := BootStatus(t.Context(), d)
	wantErrID(t, "transport error", err, agent.ErrDeviceOffline)
}

// A proof holds while the transport is the same and sys.boot_completed is
// 1; anything else drops it.
func TestBootProofsRecheck(t *testing.T) {
	var p BootProofs
	d := &scriptedDevice{serial: "emulator-5554", answers: map[string]device.ShellResult{
		"getprop sys.boot_completed": {Stdout: "1\n", TransportID: 7}}}
	if ok, why := p.Recheck(t.Context(), d); ok || why != "" || len(d.asked) != 0 {
		t.Fatalf("no proof: %v %q, asked %q", ok, why, d.asked)
	}
	p.Proven("emulator-5554", 0) // unknown transport: no proof
	if ok, _ := p.Recheck(t.Context(), d); ok {
		t.Fatal("a proof on transport 0 was kept")
	}
	p.Proven("emulator-5554", 7)
	if ok, why := p.Recheck(t.Context(), d); !ok || why != "" {
		t.Fatalf("same transport: %v %q", ok, why)
	}
	d.answers["getprop sys.boot_completed"] = device.ShellResult{Stdout: "1\n", TransportID: 8}
	if ok, why := p.Recheck(t.Context(), d); ok || why != "adb transport 8, not 7: reconnected or rebooted" {
		t.Fatalf("new transport: %v %q", ok, why)
	}
	if ok, why := p.Recheck(t.Context(), d); ok || why != "" {
		t.Fatalf("the proof was not dropped: %v %q", ok, why)
	}
	p.Proven("emulator-5554", 8)
	d.answers["getprop sys.boot_completed"] = device.ShellResult{Stdout: "\n", TransportID: 8}
	if ok, why := p.Recheck(t.Context(), d); ok || why != `sys.boot_completed is ""` {
		t.Fatalf("not booted: %v %q", ok, why)
	}
	var nilProofs *BootProofs
	nilProofs.Proven("emulator-5554", 1)
	if ok, _ := nilProofs.Recheck(t.Context(), d); ok {
		t.Fatal("nil BootProofs rechecked ok")
	}
}

func TestOnline(t *testing.T) {
	for _, tc := range []struct {
		state    string
		stateErr error
		usable   bool
		errID    agent.ErrorID
	}{
		{state: "device", usable: true},
		{state: "offline"},
		{state: "authorizing"},
		{state: "connecting"},
		{state: "unauthorized", errID: agent.ErrDeviceUnauthorized},
		{state: "no permissions", errID: agent.ErrDeviceUnauthorized},
		{state: "bootloader", errID: agent.ErrDeviceOffline},
		{stateErr: agent.Errorf(agent.ErrDeviceOffline, "device offline")},
		{stateErr: agent.Errorf(agent.ErrDeviceNotFound, "no such serial"), errID: agent.ErrDeviceNotFound},
	} {
		st, usable, err := Online(t.Context(), &scriptedDevice{serial: "emulator-5554", state: tc.state, stateErr: tc.stateErr})
		if usable != tc.usable || (tc.errID == "") != (err == nil) {
			t.Errorf("state %q / %v: %q usable %v err %v", tc.state, tc.stateErr, st, usable, err)
			continue
		}
		if tc.errID != "" {
			wantErrID(t, "state "+tc.state, err, tc.errID)
		}
		if tc.stateErr != nil && tc.errID == "" && st != "offline" {
			t.Errorf("a device_offline error reads as state %q, want offline", st)
		}
	}
}

func TestLaunchCommandAndActivity(t *testing.T) {
	act := parse.Component{Package: "com.example.foodies", Activity: "com.example.foodies.MainActivity"}
	if got := LaunchCommand(act, true); got != "am start-activity -W -S -n com.example.foodies/com.example.foodies.MainActivity -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f 0x10200000" {
		t.Errorf("LaunchCommand(-S) = %q", got)
	}
	if got := LaunchCommand(act, false); strings.Contains(got, " -S") || !strings.HasPrefix(got, "am start-activity -W -n ") {
		t.Errorf("LaunchCommand = %q", got)
	}
	d := &scriptedDevice{}
	for name, want := range map[string]parse.Component{
		".MainActivity":                    act,
		"com.example.foodies.MainActivity": act,
		"com.other/.Main":                  {Package: "com.other", Activity: "com.other.Main"},
	} {
		if c, err := LaunchActivity(t.Context(), d, "com.example.foodies", name); err != nil || c != want {
			t.Errorf("LaunchActivity(%q) = %v, %v; want %v", name, c, err, want)
		}
	}
	_, err := LaunchActivity(t.Context(), d, "com.example.foodies", "com.other/")
	wantErrID(t, "a pkg/ name that is no component", err, agent.ErrInvalidRequest)
	if len(d.asked) != 0 {
		t.Errorf("a named activity asked the device %q", d.asked)
	}
}

// StartActivity reads am's output (real -W captures), the exit status and
// the device clock that follow it on the same shell.
func TestStartActivityCaptures(t *testing.T) {
	act := parse.Component{Package: "com.google.android.calculator", Activity: "com.android.calculator2.Calculator"}
	cmd := LaunchCommand(act, false)
	full := cmd + "; echo " + SampleSplit + " $?; date +%s.%N"
	for _, tc := range []struct {
		name, stdout string
		errID        agent.ErrorID
		warning      string
	}{
		{"brought to front", capture(t, "am-start-W/api29plus-hot-brought-to-front.txt"), "", "Activity not started, its current task has been brought to the front"},
		{"cold start", capture(t, "am-start-W/api29plus-cold-encapp.txt"), "", ""},
		{"not exported", capture(t, "am-start-errors/api31plus-not-exported.txt"), agent.ErrPermission, ""},
	} {
		d := &scriptedDevice{answers: map[string]device.ShellResult{
			full: out(tc.stdout + SampleSplit + " 0\n1764316800.123456789\n")}}
		st, err := StartActivity(t.Context(), d, cmd, act)
		if st.EpochMillis != 1764316800123 {
			t.Errorf("%s: EpochMillis %d", tc.name, st.EpochMillis)
		}
		if tc.errID != "" {
			wantErrID(t, tc.name, err, tc.errID)
			continue
		}
		if err != nil || st.Warning != tc.warning {
			t.Errorf("%s: %+v, %v; want warning %q", tc.name, st, err, tc.warning)
		}
	}
	// A clean am output with a non-zero exit is still a failure.
	d := &scriptedDevice{answers: map[string]device.ShellResult{
		full: out(capture(t, "am-start-W/api29plus-cold-encapp.txt") + SampleSplit + " 1\n1764316800.5\n")}}
	_, err := StartActivity(t.Context(), d, cmd, act)
	wantErrID(t, "exit 1", err, agent.ErrProcess)
}

// The fallback chain: no focus in the window dumps (the real API 30/31
// `dumpsys window windows` sections hold none), so the resumed activity of
// `dumpsys activity activities` (a real API 34 capture) answers.
func TestForegroundActivityChain(t *testing.T) {
	d := &scriptedDevice{answers: map[string]device.ShellResult{
		"dumpsys window displays":     out(capture(t, "dumpsys-window-windows/api30.txt")),
		"dumpsys window windows":      out(capture(t, "dumpsys-window-windows/api31.txt")),
		"dumpsys activity activities": out(capture(t, "dumpsys-activity-activities/api34.txt")),
	}}
	c, source, err := ForegroundActivity(t.Context(), d)
	want := parse.Component{Package: "com.android.launcher3", Activity: "com.android.launcher3.uioverrides.QuickstepLauncher"}
	if err != nil || c != want || source != "dumpsys activity activities" {
		t.Errorf("ForegroundActivity = %v from %q, %v", c, source, err)
	}
	if !slices.Equal(d.asked, []string{"dumpsys window displays", "dumpsys window windows", "dumpsys activity activities"}) {
		t.Errorf("asked %q", d.asked)
	}
	// The display dump of API 34 names the focus itself: one shell.
	d = &scriptedDevice{answers: map[string]device.ShellResult{
		"dumpsys window displays": out(capture(t, "dumpsys-activity-activities/api34.txt"))}}
	if c, source, err := ForegroundActivity(t.Context(), d); err != nil || c != want || source != "dumpsys window" || len(d.asked) != 1 {
		t.Errorf("ForegroundActivity = %v from %q, %v; asked %q", c, source, err, d.asked)
	}
	// A failing command is a process_error naming it.
	d = &scriptedDevice{answers: map[string]device.ShellResult{
		"dumpsys window displays": {ExitCode: 255, Stderr: "Can't find service: window"}}}
	_, _, err = ForegroundActivity(t.Context(), d)
	wantErrID(t, "dumpsys exit 255", err, agent.ErrProcess)
	if err == nil || !strings.Contains(err.Error(), "`dumpsys window displays` exited 255: Can't find service: window") {
		t.Errorf("error %v does not name the command", err)
	}
}

// ReadDeviceApp's one shell: the real API 33 sdk getprop, a list line,
// and the real API 34 `dumpsys package` of an adb-installed app.
func TestReadDeviceAppCaptures(t *testing.T) {
	const pkg = "com.example.foodies"
	cmd := "getprop ro.build.version.sdk; echo " + ProvisionSplit + " $?; cmd package list packages --show-versioncode " + pkg +
		"; echo " + ProvisionSplit + " $?; dumpsys package " + pkg
	sdk, dump := capture(t, "getprop-single/api33-emulator-ro.build.version.sdk.txt"), capture(t, "dumpsys-package/api34-emulator-adb-installed.txt")
	answer := func(list string, listCode string) string {
		return sdk + ProvisionSplit + " 0\n" + list + ProvisionSplit + " " + listCode + "\n" + dump
	}
	d := &scriptedDevice{answers: map[string]device.ShellResult{cmd: out(answer("package:"+pkg+" versionCode:1\n", "0"))}}
	lvl, a, err := ReadDeviceApp(t.Context(), d, pkg)
	want := InstalledApp{Present: true, VersionCode: 1, VersionName: "1.0", LastUpdateTime: time.Date(2025, 5, 22, 4, 17, 19, 0, time.UTC),
		CodePath: "/data/app/~~oZ0lNhDdkIp2NaWMhGczgw==/com.example.foodies-ttByxQb49HI7GiOb62XhPQ=="}
	if err != nil || lvl != 33 || a != want || len(d.asked) != 1 {
		t.Errorf("ReadDeviceApp = %d %+v %v; asked %q", lvl, a, err, d.asked)
	}
	if a.VersionText() != `versionCode 1 "1.0"` || a.LastUpdateText() != "2025-05-22 04:17:19" {
		t.Errorf("texts %q %q", a.VersionText(), a.LastUpdateText())
	}
	// Not listed: absent, whatever the dump says.
	d.answers[cmd] = out(answer("", "0"))
	if _, a, err := ReadDeviceApp(t.Context(), d, pkg); err != nil || a.Present || a.VersionText() != "not installed" {
		t.Errorf("absent: %+v %v", a, err)
	}
	// The list command failed: process_error naming it.
	d.answers[cmd] = out(answer("", "1"))
	_, _, err = ReadDeviceApp(t.Context(), d, pkg)
	wantErrID(t, "list exit 1", err, agent.ErrProcess)
	if err == nil || !strings.Contains(err.Error(), "cmd package list packages --show-versioncode "+pkg) {
		t.Errorf("error %v does not name the list command", err)
	}
	// API 27: no --show-versioncode, so `pm path` then `dumpsys package`.
	d = &scriptedDevice{answers: map[string]device.ShellResult{
		cmd:                      out("27\n" + ProvisionSplit + " 0\n" + ProvisionSplit + " 255\n"),
		"pm path " + pkg:         out("package:/data/app/com.example.foodies-1/base.apk\n"),
		"dumpsys package " + pkg: out(dump),
	}}
	if lvl, a, err := ReadDeviceApp(t.Context(), d, pkg); err != nil || lvl != 27 || a != want {
		t.Errorf("API 27: %d %+v %v", lvl, a, err)
	}
	if !slices.Equal(d.asked, []string{cmd, "pm path " + pkg, "dumpsys package " + pkg}) {
		t.Errorf("API 27 asked %q", d.asked)
	}
}

func TestAPILevelAndUIDs(t *testing.T) {
	d := &scriptedDevice{answers: map[string]device.ShellResult{
		"getprop ro.build.version.sdk": out(capture(t, "getprop-single/api33-emulator-ro.build.version.sdk.txt")),
		"pm list packages -U com.a":    out("package:com.a uid:10123\n"),
		"pm list packages -U com.b":    out("package:com.bb uid:10124\n"),
	}}
	if n, err := APILevel(t.Context(), d); err != nil || n != 33 {
		t.Errorf("APILevel = %d, %v", n, err)
	}
	d.answers["getprop ro.build.version.sdk"] = out("\n")
	_, err := APILevel(t.Context(), d)
	wantErrID(t, "empty sdk", err, agent.ErrProcess)
	dump := capture(t, "dumpsys-package/api34-emulator-adb-installed.txt")
	if uid := DumpsysUID(dump, "com.example.foodies"); uid != 10197 { // appId= on API 34
		t.Errorf("DumpsysUID = %d, want 10197", uid)
	}
	if uid := DumpsysUID(dump, "com.not.there"); uid != -1 {
		t.Errorf("DumpsysUID(absent) = %d", uid)
	}
	if uid := PmListUID(t.Context(), d, "com.a"); uid != 10123 {
		t.Errorf("PmListUID = %d", uid)
	}
	if uid := PmListUID(t.Context(), d, "com.b"); uid != -1 { // another package's line
		t.Errorf("PmListUID(prefix) = %d", uid)
	}
}

// ReadSignals' one shell and the parts it reads: real gfxinfo and window
// captures, pidof, the socket tables, then the clock and the uid.
func TestReadSignals(t *testing.T) {
	const pkg = "com.instagram.android"
	cmd, want := signalsCommand(pkg, true)
	if want != 4 || cmd != "dumpsys gfxinfo "+pkg+" framestats; echo "+SampleSplit+"; pidof "+pkg+"; echo "+SampleSplit+
		"; dumpsys window displays; echo "+SampleSplit+"; cat /proc/net/tcp /proc/net/tcp6; echo "+SampleSplit+
		"; date +%s.%N; echo "+SampleSplit+"; dumpsys package "+pkg {
		t.Errorf("signalsCommand = %q, %d", cmd, want)
	}
	if cmd, want := signalsCommand("", false); want != 2 || cmd != "dumpsys window displays; echo "+SampleSplit+"; cat /proc/net/tcp /proc/net/tcp6" {
		t.Errorf("signalsCommand(no package) = %q, %d", cmd, want)
	}
	gfx, win := capture(t, "dumpsys-gfxinfo/api31plus-phone-instagram.txt"), capture(t, "dumpsys-activity-activities/api34.txt")
	tables := "  sl  local_address rem_address   st\n"
	stdout := strings.Join([]string{gfx, "31185 31190\n", win, tables, "1764316800.250\n", "Packages:\n  Package [" + pkg + "] (1):\n    userId=10150\n"}, SampleSplit)
	d := &scriptedDevice{answers: map[string]device.ShellResult{cmd: out(stdout)}}
	s, err := ReadSignals(t.Context(), d, pkg, -1, true)
	if err != nil || s.Unread || s.Frames != 51 || s.PIDs == nil || !slices.Equal(*s.PIDs, []int{31185, 31190}) ||
		s.Window != win || s.Tables != tables || s.UID != 10150 || s.EpochMillis != 1764316800250 || !strings.HasPrefix(s.Focus, "0:") {
		t.Errorf("ReadSignals = %+v, %v", s, err)
	}
	// pidof missing (stderr names it): pids unknown, the rest read.
	d.answers[cmd] = device.ShellResult{Stdout: stdout, Stderr: "/system/bin/sh: pidof: inaccessible or not found"}
	if s, _ := ReadSignals(t.Context(), d, pkg, -1, true); s.PIDs != nil || s.Frames != 51 {
		t.Errorf("without pidof: %+v", s)
	}
	// Not the shape asked for: only the uid (asked with pm) is read.
	d.answers[cmd] = out("garbage")
	d.answers["pm list packages -U "+pkg] = out("package:" + pkg + " uid:10151\n")
	if s, err := ReadSignals(t.Context(), d, pkg, -1, true); err != nil || !s.Unread || s.UID != 10151 || s.Frames != -1 {
		t.Errorf("unread: %+v, %v", s, err)
	}
}

// CrashEvidence: the real API 30 crash in the crash buffer; else, for a pid
// seen, the real data_app_crash dropbox entry.
func TestCrashEvidenceCaptures(t *testing.T) {
	logcat := "logcat -d -b crash -v threadtime -t '1764316800.007'"
	if got := logcatSince(1764316800007); got != " -t '1764316800.007'" {
		t.Errorf("logcatSince = %q", got)
	}
	d := &scriptedDevice{answers: map[string]device.ShellResult{logcat: out(capture(t, "logcat/api30-threadtime-crash-no-dialog.txt"))}}
	f, err := CrashEvidence(t.Context(), d, "com.example.safsumple", []int{10130}, 1764316800007)
	if err != nil || f.Source != SourceCrashBuffer || f.PID != 10130 || f.Exception != "android.content.ActivityNotFoundException" ||
		f.TopFrame != "com.example.safsumple.FirstFragment.openSAF(FirstFragment.kt:63)" {
		t.Errorf("crash buffer: %+v, %v", f, err)
	}
	wantErrID(t, "the failure it makes", f.Error(false), agent.ErrAppCrashed)
	const pkg = "com.harnessplayground"
	d = &scriptedDevice{answers: map[string]device.ShellResult{
		"logcat -d -b crash -v threadtime":       out(""),
		"dumpsys dropbox --print data_app_crash": out(capture(t, "dumpsys-dropbox/api34plus-print-data_app_crash-trimmed.txt")),
	}}
	f, err = CrashEvidence(t.Context(), d, pkg, []int{586}, 0)
	if err != nil || f.Source != SourceDropbox || f.PID != 586 || f.Exception != "java.lang.RuntimeException" || f.Message != "Intentional asynchronous Kotlin crash" {
		t.Errorf("dropbox: %+v, %v", f, err)
	}
	// Another pid's entry is not this crash: only the process is gone.
	if f, _ := CrashEvidence(t.Context(), d, pkg, []int{587}, 0); f.Source != SourceProcessGone || f.PID != 587 {
		t.Errorf("another pid: %+v", f)
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"com.example.app", "a.b", "com.ex_1.App2"} {
		if err := CheckPackageID("$.p", ok); err != nil {
			t.Errorf("CheckPackageID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "app", "com..x", "1com.x", "com.x;rm", "com.x$y", strings.Repeat("a.", 128) + "b"} {
		wantErrID(t, "CheckPackageID("+bad+")", CheckPackageID("$.p", bad), agent.ErrInvalidRequest)
	}
	for _, ok := range []string{"", ".Main", "com.x.Main", "com.x/.Main", "com.x/com.x.ui.Main"} {
		if err := CheckActivityName("$.a", ok); err != nil {
			t.Errorf("CheckActivityName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"com.x.Main$Inner", "/Main", "com.x/", "Main Activity", ".1Main"} {
		wantErrID(t, "CheckActivityName("+bad+")", CheckActivityName("$.a", bad), agent.ErrInvalidRequest)
	}
}

func TestSessionCapabilities(t *testing.T) {
	caps, err := SessionCapabilities(nil, "emulator-5554", 5037, "14")
	if err != nil || caps["platformName"] != "Android" || caps["appium:automationName"] != "UiAutomator2" || caps["appium:udid"] != "emulator-5554" ||
		caps["appium:suppressKillServer"] != true || caps["appium:adbPort"] != 5037 || caps["appium:platformVersion"] != "14" {
		t.Errorf("default caps %v, %v", caps, err)
	}
	built := map[string]any{"platformName": "android", "appium:udid": "other", "appium:platformVersion": "13"}
	caps, _ = SessionCapabilities(func(string, int) (map[string]any, error) { return built, nil }, "emulator-5554", 5038, "14")
	if caps["platformName"] != "android" || caps["appium:udid"] != "emulator-5554" || caps["appium:platformVersion"] != "13" || built["appium:udid"] != "other" {
		t.Errorf("built caps %v (builder's map %v)", caps, built)
	}
	if _, err := SessionCapabilities(func(string, int) (map[string]any, error) { return nil, errors.New("no") }, "s", 1, ""); err == nil {
		t.Error("the builder's error was dropped")
	}
	for caps, want := range map[*map[string]any]string{
		{"appium:udid": "a", "udid": "b"}: "a", {"udid": "b"}: "b", {"deviceUDID": "c"}: "c", {"udid": 5}: "",
	} {
		if got := CapUDID(*caps); got != want {
			t.Errorf("CapUDID(%v) = %q, want %q", *caps, got, want)
		}
	}
}

func TestPackageHelpers(t *testing.T) {
	for code, want := range map[string]bool{"INSTALL_FAILED_UPDATE_INCOMPATIBLE": true, "INSTALL_FAILED_INCONSISTENT_CERTIFICATES": true,
		"INSTALL_FAILED_SHARED_USER_INCOMPATIBLE": true, "INSTALL_FAILED_VERSION_DOWNGRADE": false} {
		if SignerConflict(code) != want {
			t.Errorf("SignerConflict(%s) != %v", code, want)
		}
	}
	for _, tc := range []struct {
		o    device.InstallOptions
		want string
	}{{device.InstallOptions{}, "no flags"}, {device.InstallOptions{Replace: true}, "-r"}, {device.InstallOptions{Replace: true, AllowTestOnly: true, GrantAll: true}, "-r -t"}} {
		if got := InstallFlags(tc.o); got != tc.want {
			t.Errorf("InstallFlags(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}
	if !OwnProcess("com.a", "com.a") || !OwnProcess("com.a:remote", "com.a") || OwnProcess("com.ab", "com.a") {
		t.Error("OwnProcess")
	}
}
