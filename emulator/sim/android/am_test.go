package android

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// amClock is a settable clock for Options.Now.
type amClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *amClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *amClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const amPkg = "com.example.shop"

func amBoolp(b bool) *bool { return &b }

// amProfile has one app: Home (launcher, idle, with a button to Detail),
// Detail (animates 2 s, network 3 s), Spinner (never idle), Secret (not exported).
func amProfile(api int) Profile {
	return Profile{
		Name: "t", APILevel: api,
		Preinstalled: []Package{{ID: amPkg, VersionCode: 3, VersionName: "1.2"}},
		Apps: []App{{
			Package: amPkg, LauncherActivity: amPkg + ".HomeActivity",
			Activities: []Activity{
				{Name: amPkg + ".HomeActivity", Root: &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2400},
					Children: []*Element{{Class: "android.widget.Button", Text: "Open", Clickable: true, Bounds: [4]int{100, 500, 500, 600}, OnClick: amPkg + ".DetailActivity"}}}},
				{Name: amPkg + ".DetailActivity", Busy: Busy{AnimateFor: 2 * time.Second, NetworkFor: 3 * time.Second},
					Root: &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2400}, Children: []*Element{{Class: "android.widget.TextView", Text: "Detail"}}}},
				{Name: amPkg + ".SpinnerActivity", Busy: Busy{NeverIdle: true}, Root: &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2400}}},
				{Name: amPkg + ".SecretActivity", Exported: amBoolp(false)},
			},
		}},
	}
}

func newAMDevice(t *testing.T, api int) (*Device, *amClock) {
	t.Helper()
	clk := &amClock{t: time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)}
	d, err := New(amProfile(api), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk
}

func amSh(t *testing.T, d *Device, cmd string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = d.Shell(context.Background(), cmd, strings.NewReader(""), &o, &e)
	return o.String(), e.String(), code
}

// appiumFocus mirrors appium-adb getFocusedPackageAndActivity's regexes
// (lib/tools/app-commands.ts) on `dumpsys window displays` output.
func appiumFocus(out string) (pkg, act string) {
	focusedApp := regexp.MustCompile(`(?m)^\s*mFocusedApp.+Record\{.*\s([^\s/}]+)/([^\s/},]+),?(\s[^\s/}]+)*\}`)
	if m := focusedApp.FindStringSubmatch(out); m != nil {
		return m[1], m[2]
	}
	cur := regexp.MustCompile(`(?m)^\s*mCurrentFocus.+\{.+\s([^\s/]+)/([^\s]+)\b`)
	if m := cur.FindStringSubmatch(out); m != nil {
		return m[1], m[2]
	}
	return "", ""
}

func amPidOf(t *testing.T, d *Device, pkg string) string {
	t.Helper()
	out, _, code := amSh(t, d, "pidof "+pkg)
	if code != 0 {
		return ""
	}
	return strings.TrimSpace(out)
}

func TestBootFocusIsLauncher(t *testing.T) {
	d, _ := newAMDevice(t, 30)
	out, _, _ := amSh(t, d, "dumpsys window displays")
	pkg, act := appiumFocus(out)
	if pkg != homePackage || act != ".NexusLauncherActivity" {
		t.Fatalf("boot focus = %s/%s\n%s", pkg, act, out)
	}
	if !strings.Contains(out, "mCurrentFocus=Window{") || !strings.Contains(out, "/com.google.android.apps.nexuslauncher.NexusLauncherActivity}") {
		t.Fatalf("mCurrentFocus line missing:\n%s", out)
	}
}

func TestStartColdThenFocusPerAPI(t *testing.T) {
	for _, api := range []int{29, 30, 31, 33, 34} {
		t.Run("api"+strconv.Itoa(api), func(t *testing.T) {
			d, _ := newAMDevice(t, api)
			out, _, code := amSh(t, d, "am start-activity -W -n "+amPkg+"/.HomeActivity -S -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f 0x10200000")
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			want := "Stopping: " + amPkg + "\n" +
				"Starting: Intent { act=android.intent.action.MAIN cat=[android.intent.category.LAUNCHER] flg=0x10200000 cmp=" + amPkg + "/.HomeActivity }\n" +
				"Status: ok\nLaunchState: COLD\nActivity: " + amPkg + "/.HomeActivity\n"
			if !strings.HasPrefix(out, want) || !regexp.MustCompile(`TotalTime: \d+\nWaitTime: \d+\nComplete\n$`).MatchString(out) {
				t.Fatalf("am start output:\n%s", out)
			}
			disp, _, _ := amSh(t, d, "dumpsys window displays")
			if pkg, act := appiumFocus(disp); pkg != amPkg || act != ".HomeActivity" {
				t.Fatalf("focus %s/%s\n%s", pkg, act, disp)
			}
			if api <= 29 && !strings.Contains(disp, "mFocusedApp=AppWindowToken{") {
				t.Fatalf("API 29 form expected:\n%s", disp)
			}
			if api >= 30 && !regexp.MustCompile(`(?m)^  mFocusedApp=ActivityRecord\{[0-9a-f]+ u0 com\.example\.shop/\.HomeActivity t\d+\}$`).MatchString(disp) {
				t.Fatalf("API 30+ form expected:\n%s", disp)
			}
			acts, _, _ := amSh(t, d, "dumpsys activity activities")
			rec := regexp.MustCompile(`ActivityRecord\{[0-9a-f]+ u0 com\.example\.shop/\.HomeActivity t\d+\}`)
			key := "mResumedActivity: "
			if api >= 31 {
				key = "topResumedActivity="
			}
			if !regexp.MustCompile(regexp.QuoteMeta(key) + rec.String()).MatchString(acts) {
				t.Fatalf("%s missing:\n%s", key, acts)
			}
			if !regexp.MustCompile(`(?m)^  ResumedActivity: ` + rec.String() + `$`).MatchString(acts) {
				t.Fatalf("ResumedActivity missing:\n%s", acts)
			}
			top, _, _ := amSh(t, d, "dumpsys activity top")
			pid := amPidOf(t, d, amPkg)
			if !regexp.MustCompile(`(?m)^  ACTIVITY com\.example\.shop/\.HomeActivity [0-9a-f]+ pid=` + pid + `$`).MatchString(top) {
				t.Fatalf("dumpsys activity top (pid %s):\n%s", pid, top)
			}
		})
	}
}

func TestResetTaskFlagBringsExistingTaskForward(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	launch := "am start-activity -W -n " + amPkg + "/.HomeActivity -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f 0x10200000"
	amSh(t, d, launch)
	pid1 := amPidOf(t, d, amPkg)
	amSh(t, d, "input keyevent 3")
	if p, _ := appiumFocus(amOut(t, d, "dumpsys window displays")); p != homePackage {
		t.Fatalf("HOME did not show the launcher: %s", p)
	}
	out, _, _ := amSh(t, d, launch)
	if !strings.Contains(out, "Warning: Activity not started, its current task has been brought to the front\nStatus: ok\nLaunchState: HOT\n") {
		t.Fatalf("warm start output:\n%s", out)
	}
	if pid2 := amPidOf(t, d, amPkg); pid2 != pid1 || pid1 == "" {
		t.Fatalf("pid changed %q -> %q (must not relaunch)", pid1, pid2)
	}
	// Already in front: task to front, nothing drawn: UNKNOWN (0), no TotalTime.
	out, _, _ = amSh(t, d, launch)
	if !strings.Contains(out, "LaunchState: UNKNOWN (0)\n") || strings.Contains(out, "TotalTime") {
		t.Fatalf("already-front output:\n%s", out)
	}
}

func TestStopOptionRestartsWithNewPid(t *testing.T) {
	d, _ := newAMDevice(t, 33)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	pid1 := amPidOf(t, d, amPkg)
	out, _, _ := amSh(t, d, "am start -W -S -n "+amPkg+"/.HomeActivity")
	pid2 := amPidOf(t, d, amPkg)
	if pid1 == "" || pid2 == "" || pid1 == pid2 {
		t.Fatalf("-S must restart: %q -> %q", pid1, pid2)
	}
	if !strings.Contains(out, "LaunchState: COLD") {
		t.Fatalf("-S start not cold:\n%s", out)
	}
}

func TestBackThenStartIsWarm(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	amSh(t, d, "input keyevent KEYCODE_BACK")
	if p, _ := appiumFocus(amOut(t, d, "dumpsys window displays")); p != homePackage {
		t.Fatalf("BACK on the root activity must show home, focus %s", p)
	}
	out := amOut(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	if !strings.Contains(out, "LaunchState: WARM") {
		t.Fatalf("process alive, activity gone: want WARM\n%s", out)
	}
}

func TestActivityNotFoundAndUnresolved(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	out, errOut, code := amSh(t, d, "am start -W -n "+amPkg+"/.Nope")
	want := "Starting: Intent { cmp=" + amPkg + "/.Nope }\nError type 3\nError: Activity class {" + amPkg + "/" + amPkg + ".Nope} does not exist.\n"
	if out != want || errOut != "" || code != 0 {
		t.Fatalf("got %q / %q / %d", out, errOut, code)
	}
	// Without -W the result lines go to stderr.
	out, errOut, _ = amSh(t, d, "am start -n "+amPkg+"/.Nope")
	if !strings.HasPrefix(out, "Starting:") || !strings.Contains(errOut, "Error type 3") {
		t.Fatalf("no -W: %q / %q", out, errOut)
	}
	out, _, code = amSh(t, d, "am start -W -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -p com.not.installed")
	if !strings.Contains(out, "Error: Activity not started, unable to resolve Intent { act=android.intent.action.MAIN cat=[android.intent.category.LAUNCHER] flg=0x10000000 pkg=com.not.installed }") || code != 0 {
		t.Fatalf("unresolved: %q %d", out, code)
	}
}

func TestNotExportedIsSecurityException(t *testing.T) {
	d, _ := newAMDevice(t, 31)
	out, errOut, code := amSh(t, d, "am start -n "+amPkg+"/.SecretActivity")
	if code != 255 || out != "Starting: Intent { cmp="+amPkg+"/.SecretActivity }\n" {
		t.Fatalf("out %q code %d", out, code)
	}
	re := regexp.MustCompile(`^\nException occurred while executing 'start':\njava\.lang\.SecurityException: Permission Denial: starting Intent \{ flg=0x10000000 cmp=com\.example\.shop/\.SecretActivity \} from null \(pid=\d+, uid=2000\) not exported from uid 1\d{4}\n\tat com\.android\.server\.wm\.ActivityTaskSupervisor\.checkStartAnyActivityPermission`)
	if !re.MatchString(errOut) {
		t.Fatalf("stderr:\n%s", errOut)
	}
}

func TestAmArgumentErrors(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	cases := []struct {
		cmd, stderr string
		code        int
	}{
		{"am start", "Error: No intent supplied\n", 255},
		{"am start -W", "Error: No intent supplied\n", 255},
		{"am start -x " + amPkg + "/.HomeActivity", "Error: Unknown option: -x\n", 255},
		{"am start -n", "Error: No argument supplied for option: -n\n", 255},
		{"am start -n nocomponent", "Error: Bad component name: nocomponent\n", 255},
		{"am start -f zz -n " + amPkg + "/.HomeActivity", "Error: Bad number: zz\n", 255},
		{"am start --user all -n " + amPkg + "/.HomeActivity", "Error: Can't start service with user 'all'\n", 1},
		{"am force-stop", "Error: Argument expected after \"force-stop\"\n", 255},
		{"am frobnicate", "Unknown command: frobnicate\n", 255},
		{"am instrument", "Error: Bad component name: \n", 1},
	}
	for _, c := range cases {
		out, errOut, code := amSh(t, d, c.cmd)
		if errOut != c.stderr || code != c.code || out != "" {
			t.Errorf("%s: stdout %q stderr %q code %d; want stderr %q code %d", c.cmd, out, errOut, code, c.stderr, c.code)
		}
	}
	if _, errOut, code := amSh(t, d, "am force-stop com.not.installed"); code != 0 || errOut != "" {
		t.Errorf("force-stop of an unknown package must be silent: %q %d", errOut, code)
	}
}

func amOut(t *testing.T, d *Device, cmd string) string {
	t.Helper()
	out, _, _ := amSh(t, d, cmd)
	return out
}

func amFrames(t *testing.T, d *Device, pkg string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^Total frames rendered: (\d+)$`).FindStringSubmatch(amOut(t, d, "dumpsys gfxinfo "+pkg))
	if m == nil {
		t.Fatalf("no Total frames line")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestNeverIdleKeepsDrawing(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.SpinnerActivity")
	amSh(t, d, "dumpsys gfxinfo "+amPkg+" reset")
	prev := amFrames(t, d, amPkg)
	if prev != 0 {
		t.Fatalf("after reset: %d frames", prev)
	}
	for i := 0; i < 3; i++ {
		clk.Advance(time.Second)
		n := amFrames(t, d, amPkg)
		if n < prev+50 {
			t.Fatalf("second %d: %d frames after %d; a never-idle screen must keep drawing ~60/s", i, n, prev)
		}
		prev = n
	}
	_, _, root1 := d.Foreground()
	clk.Advance(150 * time.Millisecond)
	_, _, root2 := d.Foreground()
	if amText(root1) == amText(root2) {
		t.Fatalf("never-idle hierarchy did not change: %q", amText(root1))
	}
}

func amText(e *Element) string {
	if e == nil {
		return ""
	}
	s := e.Text
	for _, c := range e.Children {
		s += "|" + amText(c)
	}
	return s
}

func TestBusyPeriodEnds(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	amSh(t, d, "input tap 200 550") // the Open button -> DetailActivity
	pkg, act, _ := d.Foreground()
	if pkg != amPkg || act != amPkg+".DetailActivity" {
		t.Fatalf("tap did not open Detail: %s/%s", pkg, act)
	}
	uid, _ := d.packageUID(amPkg)
	tcp6 := func() string { b, _ := d.ReadFile("/proc/net/tcp6"); return string(b) }
	sock := regexp.MustCompile(`(?m)^\s+\d+: [0-9A-F]{32}:[0-9A-F]{4} [0-9A-F]{32}:01BB 01 0*([1-9A-F][0-9A-F]*):00000000 \S+ \S+\s+` + strconv.Itoa(uid) + ` `)
	if !sock.MatchString(tcp6()) {
		t.Fatalf("no busy socket of uid %d:\n%s", uid, tcp6())
	}
	tcp, _ := d.ReadFile("/proc/net/tcp")
	if !strings.HasPrefix(string(tcp), "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode") {
		t.Fatalf("tcp header:\n%s", tcp)
	}
	clk.Advance(time.Second)
	f1 := amFrames(t, d, amPkg)
	clk.Advance(1500 * time.Millisecond) // animation (2 s) over
	f2 := amFrames(t, d, amPkg)
	clk.Advance(2 * time.Second) // network (3 s) over too
	f3 := amFrames(t, d, amPkg)
	if f2 <= f1 || f3 != f2 {
		t.Fatalf("frames %d, %d, %d: must grow while animating, then stop", f1, f2, f3)
	}
	if sock.MatchString(tcp6()) {
		t.Fatalf("socket still queued after NetworkFor:\n%s", tcp6())
	}
	_, _, r1 := d.Foreground()
	clk.Advance(300 * time.Millisecond)
	_, _, r2 := d.Foreground()
	if amText(r1) != amText(r2) || strings.Contains(amText(r1), "Loading") {
		t.Fatalf("idle screen changed: %q vs %q", amText(r1), amText(r2))
	}
}

func TestGfxinfoFormat(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	if out := amOut(t, d, "dumpsys gfxinfo "+amPkg); !strings.HasSuffix(out, "No process found for: "+amPkg+"\n") {
		t.Fatalf("not running: %q", out)
	}
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(100 * time.Millisecond) // the launch frames complete (FrameCompleted) ~93 ms after the start
	out := amOut(t, d, "dumpsys gfxinfo "+amPkg)
	pid := amPidOf(t, d, amPkg)
	for _, re := range []string{
		`^Applications Graphics Acceleration Info:\nUptime: \d+ Realtime: \d+\n\n\*\* Graphics info for pid ` + pid + ` \[com\.example\.shop\] \*\*\n\nStats since: \d+ns\n`,
		`(?m)^Total frames rendered: 3\nJanky frames: 1 \(33\.33%\)\nJanky frames \(legacy\): 1 \(33\.33%\)\n50th percentile: 9ms\n90th percentile: 48ms\n95th percentile: 48ms\n99th percentile: 48ms\n`,
		`(?m)^Number Missed Vsync: 0\nNumber High input latency: 0\nNumber Slow UI thread: 1\nNumber Slow bitmap uploads: 0\nNumber Slow issue draw commands: 0\nNumber Frame deadline missed: 1\n`,
		`(?m)^HISTOGRAM: 5ms=0 6ms=0 7ms=0 8ms=0 9ms=2 .* 48ms=1 53ms=0 .* 4950ms=0$`,
		`(?m)^GPU HISTOGRAM: 1ms=0 2ms=2 .* 25ms=0 4950ms=0$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("gfxinfo does not match %s:\n%s", re, out)
		}
	}
	amSh(t, d, "dumpsys gfxinfo "+amPkg+" reset")
	out = amOut(t, d, "dumpsys gfxinfo "+amPkg)
	if !strings.Contains(out, "Total frames rendered: 0\nJanky frames: 0 (0.00%)\n") || !strings.Contains(out, "50th percentile: 4950ms") {
		t.Fatalf("after reset:\n%s", out)
	}
}

func TestForceStopKillsInstrumentation(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	// Relative to this package (go test runs in the package directory), so
	// the test works in any clone of the module.
	testAPK, err := os.ReadFile(filepath.Join("..", "..", "..", ".cache", "appium-home", "node_modules",
		"appium-uiautomator2-driver", "node_modules", "appium-uiautomator2-server", "apks",
		"appium-uiautomator2-server-debug-androidTest.apk"))
	if err != nil {
		t.Fatalf("real test APK not available: %v", err)
	}
	if r := d.install(testAPK, installFlags{}); !r.ok {
		t.Fatalf("install: %+v", r)
	}
	var comp0 string
	for _, in := range d.instrumentations() {
		comp0 = in.Component
	}
	// The target (server) package is not installed yet: AMS refuses.
	out, _, code := amSh(t, d, "am instrument -w "+comp0)
	if code != 1 || !strings.Contains(out, "INSTRUMENTATION_STATUS: Error=Unable to find instrumentation target package: io.appium.uiautomator2.server\n") {
		t.Fatalf("missing target: %q %d", out, code)
	}
	// The server APK (the target) comes preinstalled here, so this test does
	// not depend on parsing the 18 MB server APK.
	p := amProfile(34)
	p.Preinstalled = append(p.Preinstalled, Package{ID: "io.appium.uiautomator2.server", VersionCode: 1})
	d, err = New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := d.install(testAPK, installFlags{}); !r.ok {
		t.Fatalf("install: %+v", r)
	}
	var comp, target string
	for _, in := range d.instrumentations() {
		comp, target = in.Component, in.TargetPackage
	}
	if comp == "" {
		t.Fatal("the androidTest APK declares no instrumentation")
	}
	started := make(chan struct{})
	ended := make(chan error, 1)
	d.RegisterInstrumentation(comp, func(ctx context.Context, d *Device, args map[string]string) error {
		if args["disableAnalytics"] != "true" {
			t.Errorf("args %v", args)
		}
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	})
	type res struct {
		out  string
		code int
	}
	done := make(chan res, 1)
	go func() {
		out, _, code := amSh(t, d, "am instrument -w --no-window-animation -e disableAnalytics true "+comp)
		done <- res{out, code}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("instrumentation did not start")
	}
	if ps := amOut(t, d, "ps -A"); !regexp.MustCompile(`(?m)^u0_a\d+ +\d+ +\d+ .* S ` + regexp.QuoteMeta(target) + `$`).MatchString(ps) {
		t.Fatalf("instrumented process %s not in ps:\n%s", target, ps)
	}
	amSh(t, d, "am force-stop "+target)
	select {
	case r := <-done:
		if r.out != "INSTRUMENTATION_RESULT: shortMsg=Process crashed.\nINSTRUMENTATION_CODE: 0\n" || r.code != 0 {
			t.Fatalf("instrument output %q code %d", r.out, r.code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("force-stop did not end the instrumentation")
	}
	if err := <-ended; err == nil {
		t.Fatal("instrumentation context not cancelled")
	}
	if amPidOf(t, d, target) != "" {
		t.Fatal("target process still alive")
	}
}

func TestUnknownInstrumentation(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	out, errOut, code := amSh(t, d, "am instrument -w com.nope.test/androidx.test.runner.AndroidJUnitRunner")
	wantOut := "INSTRUMENTATION_STATUS: id=ActivityManagerService\n" +
		"INSTRUMENTATION_STATUS: Error=Unable to find instrumentation info for: ComponentInfo{com.nope.test/androidx.test.runner.AndroidJUnitRunner}\n" +
		"INSTRUMENTATION_STATUS_CODE: -1\n"
	if out != wantOut || code != 1 || !strings.HasPrefix(errOut, "android.util.AndroidException: INSTRUMENTATION_FAILED: com.nope.test/androidx.test.runner.AndroidJUnitRunner\n") {
		t.Fatalf("got %q / %q / %d", out, errOut, code)
	}
}

func TestMonkey(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	out, errOut, code := amSh(t, d, "monkey -p "+amPkg+" -c android.intent.category.LAUNCHER 1")
	if code != 0 || !strings.HasPrefix(out, "  bash arg: -p\n  bash arg: "+amPkg+"\n") || !regexp.MustCompile(`Events injected: 1\n## Network stats: elapsed time=\d+ms \(0ms mobile, 0ms wifi, \d+ms not connected\)\n$`).MatchString(out) {
		t.Fatalf("monkey: %q %d", out, code)
	}
	if !strings.HasPrefix(errOut, "args: [-p, "+amPkg+", -c, android.intent.category.LAUNCHER, 1]\n arg: \"-p\"\n") {
		t.Fatalf("monkey stderr: %q", errOut)
	}
	if p, a := appiumFocus(amOut(t, d, "dumpsys window displays")); p != amPkg || a != ".HomeActivity" {
		t.Fatalf("monkey did not launch: %s/%s", p, a)
	}
	out, _, code = amSh(t, d, "monkey -p com.not.installed -c android.intent.category.LAUNCHER 1")
	if !strings.HasSuffix(out, "** No activities found to run, monkey aborted.\n") || code == 0 {
		t.Fatalf("monkey abort: %q %d", out, code)
	}
}

func TestKeyguardAndPower(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	all := amOut(t, d, "dumpsys window")
	if !strings.Contains(all, "mDreamingLockscreen=false") || !strings.Contains(all, "mScreenOnFully=true") {
		t.Fatalf("unlocked dump:\n%s", all)
	}
	if !strings.Contains(amOut(t, d, "dumpsys power"), "\n  mWakefulness=Awake\n") {
		t.Fatal("power not awake")
	}
	amSh(t, d, "input keyevent 26") // screen off -> keyguard
	if !strings.Contains(amOut(t, d, "dumpsys power"), "\n  mWakefulness=Asleep\n") {
		t.Fatal("power still awake")
	}
	amSh(t, d, "input keyevent 224")
	all = amOut(t, d, "dumpsys window")
	if !strings.Contains(all, "mDreamingLockscreen=true") || !strings.Contains(all, "mCurrentFocus=Window{91c910b u0 NotificationShade}") {
		t.Fatalf("locked dump:\n%s", all)
	}
	amSh(t, d, "input keyevent 82")
	if all = amOut(t, d, "dumpsys window"); !strings.Contains(all, "mDreamingLockscreen=false") {
		t.Fatalf("MENU did not dismiss the keyguard")
	}
}

func TestSettingsHelperForegroundService(t *testing.T) {
	p := amProfile(34)
	p.Preinstalled = append(p.Preinstalled, Package{ID: "io.appium.settings", VersionCode: 1})
	p.Apps = append(p.Apps, App{Package: "io.appium.settings", LauncherActivity: "io.appium.settings.Settings",
		Activities: []Activity{{Name: "io.appium.settings.Settings"}}})
	d, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if out := amOut(t, d, "dumpsys activity services io.appium.settings"); strings.Contains(out, "isForeground=true") {
		t.Fatalf("service running before start:\n%s", out)
	}
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	amSh(t, d, "am start -n io.appium.settings/.Settings -a android.intent.action.MAIN -c android.intent.category.LAUNCHER -f 0x10200000")
	if out := amOut(t, d, "dumpsys activity services io.appium.settings"); !strings.Contains(out, "isForeground=true") {
		t.Fatalf("no foreground service:\n%s", out)
	}
	if p, _ := appiumFocus(amOut(t, d, "dumpsys window displays")); p != amPkg {
		t.Fatalf("the Settings activity finishes at once; focus %s", p)
	}
}

func TestPsFormat(t *testing.T) {
	for _, api := range []int{30, 34} {
		d, _ := newAMDevice(t, api)
		amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
		out := amOut(t, d, "ps -A")
		lines := strings.Split(out, "\n")
		header := "USER           PID  PPID     VSZ    RSS WCHAN            ADDR S NAME"
		if api >= 34 {
			header = "USER           PID  PPID        VSZ    RSS WCHAN            ADDR S NAME" // API 34
		}
		if lines[0] != header {
			t.Fatalf("api %d header %q", api, lines[0])
		}
		if api < 33 && lines[1] != "root             1     0 10826728  3728 0                   0 S init" {
			t.Fatalf("init row %q", lines[1])
		}
		uid, _ := d.packageUID(amPkg)
		row := regexp.MustCompile(`(?m)^u0_a` + strconv.Itoa(uid-10000) + ` +(\d+) +` + strconv.Itoa(pidZygote64) + ` .* S com\.example\.shop$`)
		m := row.FindStringSubmatch(out)
		if m == nil || m[1] != amPidOf(t, d, amPkg) {
			t.Fatalf("app row missing or pid mismatch:\n%s", out)
		}
		if help := amOut(t, d, "ps --help"); !regexp.MustCompile(`(?m)^-A\b`).MatchString(help) {
			t.Fatalf("ps --help lacks -A line")
		}
		o := amOut(t, d, "ps -o PID,NAME -p "+m[1])
		if o != "  PID NAME\n"+strings.Repeat(" ", 5-len(m[1]))+m[1]+" com.example.shop\n" {
			t.Fatalf("ps -o: %q", o)
		}
	}
}

func TestAmBeforeBoot(t *testing.T) {
	p := amProfile(34)
	p.BootDuration = time.Hour
	d, err := New(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, errOut, code := amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	if code != 20 || errOut != "cmd: Can't find service: activity\n" {
		t.Fatalf("before boot: %q %d", errOut, code)
	}
}
