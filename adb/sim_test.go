package adb

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/electricbubble/gadb"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// startSim launches a simulated emulator registered with the shared isolated
// adb server and waits until the server lists it as "device".
func startSim(t testing.TB, c *Client, p android.Profile) *sim.Emulator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, _, err := sim.Launch(ctx, sim.LaunchConfig{ADBServer: c.addr(), Profile: p, Log: zerolog.Nop()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); cancel() })
	waitState(t, c, e.Serial(), parse.StateDevice, 10*time.Second)
	return e
}

func waitState(t testing.TB, c *Client, serial string, want parse.DeviceState, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tr, err := c.TrackDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for {
		list, err := tr.Next()
		if err != nil {
			t.Fatalf("waiting for %s %s: %v", serial, want, err)
		}
		for _, d := range list {
			if d.Serial == serial && d.State == want {
				return
			}
		}
	}
}

func TestSimShellV2ExitCodesAndStderr(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "shell"})
	ctx := ctxT(t, 20*time.Second)
	f, err := c.Features(ctx, e.Serial())
	if err != nil || !f.Has("shell_v2") || !f.Has("cmd") {
		t.Fatalf("features %v %v", f, err)
	}
	r, err := c.Shell(ctx, e.Serial(), "echo hi")
	if err != nil || string(r.Stdout) != "hi\n" || r.ExitCode != 0 || !r.V2 {
		t.Fatalf("echo: %+v %v", r, err)
	}
	r, err = c.Shell(ctx, e.Serial(), "false")
	if err != nil || r.ExitCode != 1 {
		t.Fatalf("false: %+v %v", r, err)
	}
	r, err = c.Shell(ctx, e.Serial(), "no-such-command")
	if err != nil || r.ExitCode != 127 || len(r.Stderr) == 0 || len(r.Stdout) != 0 {
		t.Fatalf("unknown command: exit %d stdout %q stderr %q %v", r.ExitCode, r.Stdout, r.Stderr, err)
	}
	if _, err := c.ShellOutput(ctx, e.Serial(), "no-such-command"); IDOf(err) != IDProcessError ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("ShellOutput error = %v", err)
	}
	// stdin is closed at once: cat must end, not wait for the deadline.
	r, err = c.Shell(ctx, e.Serial(), "cat")
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("cat: %+v %v", r, err)
	}

	// The deadline ends a long command.
	start := time.Now()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Shell(short, e.Serial(), "sleep 10")
	wantID(t, err, IDTimeout)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("deadline honoured after %v", d)
	}

	// gadb v0.1.0 on the same device: `shell:` only, no exit code, stderr merged.
	g, err := gadb.NewClientWith("127.0.0.1", srvPort)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := g.DeviceList()
	if err != nil {
		t.Fatal(err)
	}
	var gd *gadb.Device
	for i := range devs {
		if devs[i].Serial() == e.Serial() {
			gd = &devs[i]
		}
	}
	if gd == nil {
		t.Fatalf("gadb DeviceList lacks the online device %s", e.Serial())
	}
	out, err := gd.RunShellCommand("no-such-command")
	if err != nil || !strings.Contains(out, "not found") {
		t.Fatalf("gadb: out %q err %v; measured before: stderr text in the output, nil error", out, err)
	}
}

func TestSimShellV1Fallback(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "shellv1"})
	ctx := ctxT(t, 20*time.Second)
	// A device without shell_v2: the cached features say so, and Shell must use
	// `shell:` with the exit marker against the real device side.
	c.mu.Lock()
	if c.features == nil {
		c.features = map[string]parse.Features{}
	}
	c.features[e.Serial()] = parse.Features{"cmd": true}
	c.mu.Unlock()
	defer c.forgetFeatures(e.Serial())
	r, err := c.Shell(ctx, e.Serial(), "echo hi")
	if err != nil || string(r.Stdout) != "hi\n" || r.ExitCode != 0 || r.V2 {
		t.Fatalf("echo: %+v %v", r, err)
	}
	r, err = c.Shell(ctx, e.Serial(), "false")
	if err != nil || r.ExitCode != 1 {
		t.Fatalf("false: %+v %v", r, err)
	}
	r, err = c.Shell(ctx, e.Serial(), "no-such-command")
	if err != nil || r.ExitCode != 127 || !strings.Contains(string(r.Stdout), "not found") {
		t.Fatalf("unknown: %+v %v", r, err)
	}
}

func TestSimPushPull20MB(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "sync"})
	ctx := ctxT(t, 60*time.Second)
	data := make([]byte, 20<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "blob.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var calls int
	var last, lastTotal int64
	mono := true
	err := c.PushFile(ctx, e.Serial(), local, "/data/local/tmp/blob.bin", func(done, total int64) {
		calls++
		mono = mono && done > last
		last, lastTotal = done, total
	})
	if err != nil {
		t.Fatal(err)
	}
	if !mono || last != int64(len(data)) || lastTotal != int64(len(data)) || calls < len(data)/SyncMaxChunk {
		t.Fatalf("push progress: calls %d last %d/%d monotonic %v", calls, last, lastTotal, mono)
	}
	st, err := c.Stat(ctx, e.Serial(), "/data/local/tmp/blob.bin")
	if err != nil || st.Size != int64(len(data)) || st.IsDir() {
		t.Fatalf("stat: %+v %v", st, err)
	}
	ents, err := c.List(ctx, e.Serial(), "/data/local/tmp")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range ents {
		found = found || (en.Name == "blob.bin" && en.Size == int64(len(data)))
	}
	if !found {
		t.Fatalf("LIST lacks blob.bin: %+v", ents)
	}
	var buf bytes.Buffer
	last, lastTotal = 0, 0
	n, err := c.Pull(ctx, e.Serial(), "/data/local/tmp/blob.bin", &buf, func(done, total int64) { last, lastTotal = done, total })
	if err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("pull: n=%d err=%v identical=%v", n, err, bytes.Equal(buf.Bytes(), data))
	}
	if last != n || lastTotal != n {
		t.Fatalf("pull progress %d/%d", last, lastTotal)
	}
	_, err = c.Pull(ctx, e.Serial(), "/data/local/tmp/missing.bin", io.Discard, nil)
	if IDOf(err) != IDProcessError {
		t.Fatalf("pull of a missing file: %v", err)
	}
	if _, err := c.Stat(ctx, e.Serial(), "/data/local/tmp/missing.bin"); !errorsIsNotExist(err) {
		t.Fatalf("stat of a missing file: %v", err)
	}
}

func errorsIsNotExist(err error) bool {
	return IDOf(err) == IDProcessError && errors.Is(err, fs.ErrNotExist)
}

const (
	uia2Dir       = "../.cache/appium-home/node_modules/appium-uiautomator2-driver/node_modules/appium-uiautomator2-server/apks/"
	uia2ServerAPK = uia2Dir + "appium-uiautomator2-server-v10.6.6.apk"
	uia2TestAPK   = uia2Dir + "appium-uiautomator2-server-debug-androidTest.apk"
)

const settingsAPK = "../.cache/appium-home/node_modules/appium-uiautomator2-driver/node_modules/io.appium.settings/apks/settings_apk-debug.apk"

func TestSimInstallUninstall(t *testing.T) {
	if _, err := os.Stat(settingsAPK); err != nil {
		t.Fatalf("io.appium.settings APK not present: %v", err)
	}
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "install"})
	ctx := ctxT(t, 60*time.Second)
	var last, total int64
	if err := c.Install(ctx, e.Serial(), settingsAPK, InstallOptions{Replace: true, AllowTestOnly: true,
		Progress: func(d, tt int64) { last, total = d, tt }}); err != nil {
		t.Fatal(err)
	}
	if last != total || total <= 0 {
		t.Fatalf("install progress %d/%d", last, total)
	}
	out, err := c.ShellOutput(ctx, e.Serial(), "pm list packages --show-versioncode io.appium.settings")
	if err != nil {
		t.Fatal(err)
	}
	pk := parse.ParsePackageList(out)
	if len(pk) != 1 || pk[0].Package != "io.appium.settings" || pk[0].VersionCode <= 0 {
		t.Fatalf("pm list packages: %q -> %+v", out, pk)
	}
	dump, err := c.ShellOutput(ctx, e.Serial(), "dumpsys package io.appium.settings")
	if err != nil {
		t.Fatal(err)
	}
	info, ok := parse.ParseDumpsysPackage(dump, "io.appium.settings")
	if !ok || info.VersionCode != pk[0].VersionCode || info.VersionName == "" {
		t.Fatalf("dumpsys package: %+v ok=%v", info, ok)
	}
	paths, err := c.ShellOutput(ctx, e.Serial(), "pm path io.appium.settings")
	if err != nil || len(parse.ParsePmPath(paths)) == 0 {
		t.Fatalf("pm path: %q %v", paths, err)
	}
	if err := c.Uninstall(ctx, e.Serial(), "io.appium.settings", false); err != nil {
		t.Fatal(err)
	}
	err = c.Uninstall(ctx, e.Serial(), "io.appium.settings", false)
	if IDOf(err) != IDProcessError || !strings.HasPrefix(err.(*Error).Code, "DELETE_FAILED") {
		t.Fatalf("second uninstall: %v", err)
	}

	// Fallback without feature cmd: push to /data/local/tmp + pm install.
	c.mu.Lock()
	c.features[e.Serial()] = parse.Features{"shell_v2": true, "stat_v2": true}
	c.mu.Unlock()
	defer c.forgetFeatures(e.Serial())
	if err := c.Install(ctx, e.Serial(), settingsAPK, InstallOptions{Replace: true, AllowTestOnly: true}); err != nil {
		t.Fatalf("pm install fallback: %v", err)
	}
	if out, _ := c.ShellOutput(ctx, e.Serial(), "pm list packages io.appium.settings"); len(parse.ParsePackageList(out)) != 1 {
		t.Fatalf("fallback install not listed: %q", out)
	}
	if _, err := c.Stat(ctx, e.Serial(), "/data/local/tmp/settings_apk-debug.apk"); err == nil {
		t.Fatal("fallback left its copy in /data/local/tmp")
	}
}

func TestSimInstallFailureCode(t *testing.T) {
	if _, err := os.Stat(settingsAPK); err != nil {
		t.Fatalf("io.appium.settings APK not present: %v", err)
	}
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "full", Faults: android.Faults{InstallFailure: "INSTALL_FAILED_INSUFFICIENT_STORAGE"}})
	err := c.Install(ctxT(t, 30*time.Second), e.Serial(), settingsAPK, InstallOptions{Replace: true})
	ee := wantID(t, err, IDInstallFailed)
	if ee.Code != "INSTALL_FAILED_INSUFFICIENT_STORAGE" || ee.Retryable {
		t.Fatalf("%+v", ee)
	}
}

func TestSimTrackAppearDisappearAndForward(t *testing.T) {
	c := adbServer(t)
	ctx := ctxT(t, 30*time.Second)
	tr, err := c.TrackDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	simCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, _, err := sim.Launch(simCtx, sim.LaunchConfig{ADBServer: c.addr(), Profile: android.Profile{Name: "track"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	var seen []parse.DeviceState
	for {
		list, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		var st parse.DeviceState
		for _, d := range list {
			if d.Serial == e.Serial() {
				st = d.State
				if d.TransportID == 0 {
					t.Errorf("no transport_id in %+v", d)
				}
			}
		}
		if st != "" && (len(seen) == 0 || seen[len(seen)-1] != st) {
			seen = append(seen, st)
		}
		if st == parse.StateDevice {
			break
		}
	}
	if st, err := c.GetState(ctx, e.Serial()); err != nil || st != parse.StateDevice {
		t.Fatalf("get-state %q %v", st, err)
	}

	// Forward to the on-device UiAutomator2 port: install the real server APKs and
	// start the server the way the driver does (`am instrument -w`, which blocks
	// while it serves).
	for _, apk := range []string{uia2ServerAPK, uia2TestAPK} {
		if _, err := os.Stat(apk); err != nil {
			t.Fatalf("UiAutomator2 server APK not present: %v", err)
		}
		if err := c.Install(ctx, e.Serial(), apk, InstallOptions{Replace: true, AllowTestOnly: true}); err != nil {
			t.Fatalf("install %s: %v", filepath.Base(apk), err)
		}
	}
	instCtx, stopInst := context.WithCancel(ctx)
	go func() {
		_, _ = c.Shell(instCtx, e.Serial(), "am instrument -w "+sim.UiAutomator2Instrumentation)
	}()
	local, err := c.Forward(ctx, e.Serial(), "tcp:0", "tcp:6790")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := c.ForwardList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fl) != 1 || fl[0] != (Forward{Serial: e.Serial(), Local: local, Remote: "tcp:6790"}) {
		t.Fatalf("forward list %+v, bound %s", fl, local)
	}
	var status int
	for i := 0; i < 50 && status != 200; i++ {
		resp, err := http.Get("http://127.0.0.1:" + strings.TrimPrefix(local, "tcp:") + "/status")
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if status != 200 {
		t.Fatalf("GET /status through the forward: %d", status)
	}
	// A fixed local port: the server sends no port string after the second OKAY.
	fixed := "tcp:" + strconv.Itoa(freePort(t))
	start := time.Now()
	if got, err := c.Forward(ctx, e.Serial(), fixed, "tcp:6790"); err != nil || got != fixed {
		t.Fatalf("forward %s: %q %v", fixed, got, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("forward with a fixed port took %v", d)
	}
	if err := c.ForwardRemove(ctx, e.Serial(), fixed); err != nil {
		t.Fatal(err)
	}
	if err := c.ForwardRemove(ctx, e.Serial(), local); err != nil {
		t.Fatal(err)
	}
	if fl, _ := c.ForwardList(ctx); len(fl) != 0 {
		t.Fatalf("forward not removed: %+v", fl)
	}
	stopInst()

	e.Close()
	for {
		list, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		gone := true
		for _, d := range list {
			gone = gone && d.Serial != e.Serial()
		}
		if gone {
			break
		}
	}
	_, err = c.GetState(ctx, e.Serial())
	wantID(t, err, IDDeviceNotFound)
	t.Logf("states seen while appearing: %v", seen)
}

func TestSimOfflineAndBack(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "offline"})
	ctx := ctxT(t, 30*time.Second)
	e.SetOffline(true)
	waitState(t, c, e.Serial(), parse.StateOffline, 10*time.Second)
	_, err := c.Shell(ctx, e.Serial(), "echo hi")
	if ee := wantID(t, err, IDDeviceOffline); !ee.Retryable {
		t.Fatal("device_offline must be retryable")
	}
	e.SetOffline(false)
	waitState(t, c, e.Serial(), parse.StateDevice, 10*time.Second)
	if r, err := c.Shell(ctx, e.Serial(), "echo back"); err != nil || string(r.Stdout) != "back\n" {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestSimOutputsParse runs the parsers on what the simulator prints for the
// commands the daemon uses (the simulator models real captures; a disagreement
// here means one of the two drifted from real Android).
func TestSimOutputsParse(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "parse", APILevel: 34})
	ctx := ctxT(t, 30*time.Second)
	sh := func(cmd string) string {
		t.Helper()
		out, err := c.ShellOutput(ctx, e.Serial(), cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return out
	}
	boot := parse.ParseBootStatus(sh(parse.BootCommand), sh("service list"))
	if !boot.Ready {
		t.Errorf("boot status %+v", boot)
	}
	props := parse.ParseGetprop(sh("getprop"))
	if props["ro.build.version.sdk"] != "34" || parse.ParseGetpropValue(sh("getprop ro.build.version.sdk")) != "34" {
		t.Errorf("getprop sdk = %q", props["ro.build.version.sdk"])
	}
	if d, ok := parse.ParseWmSize(sh("wm size")); !ok || d.PhysicalWidth == 0 {
		t.Errorf("wm size %+v", d)
	}
	if len(parse.ParsePackageList(sh("pm list packages"))) == 0 {
		t.Error("pm list packages: nothing parsed")
	}
	ds := parse.ParseWindowFocus(sh("dumpsys window displays"))
	fg, ok := parse.Foreground(ds)
	if !ok || fg.IsZero() {
		t.Errorf("no foreground in dumpsys window displays: %+v", ds)
	}
	if r, ok := parse.ParseResumedActivity(sh("dumpsys activity activities")); ok && fg.Package != "" && r.Package != fg.Package {
		t.Errorf("resumed %v vs focus %v", r, fg)
	}
	res, err := c.Shell(ctx, e.Serial(), "am start -W -n com.example.none/.Missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parse.ParseAmStart(string(res.Stdout) + string(res.Stderr)); IDOf(err) != IDActivityNotFound {
		t.Errorf("am start of a missing activity: %v (out %q err %q)", err, res.Stdout, res.Stderr)
	}
}

// TestSimShellAllocatesLittle: a shell round trip (one connection to the adb
// server per service) allocates about 10 KiB in this process, the simulator's
// side included; it was 71 KiB while each connection had a 64 KiB read
// buffer. Large reads still work (TestSimPushPull20MB pulls through the same
// buffer).
func TestSimShellAllocatesLittle(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "alloc-shell"})
	ctx := context.Background()
	shell := func() {
		if r, err := c.Shell(ctx, e.Serial(), "echo hi"); err != nil || string(r.Stdout) != "hi\n" {
			t.Fatalf("%+v %v", r, err)
		}
	}
	shell() // features cached, first-use allocations done
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		shell()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 32<<10 {
		t.Fatalf("a shell round trip allocated %d bytes, want <= 32 KiB", per)
	}
}

// TestSimOpenedAndLastTransport: WithOpened's function runs once the
// device accepted the shell's stream, while the command still runs (the
// recorder's start returns then, not when screenrecord ends), and
// LastTransportID is the transport the last command ran on, without a
// round trip (0 for a serial never used).
func TestSimOpenedAndLastTransport(t *testing.T) {
	c := adbServer(t)
	e := startSim(t, c, android.Profile{Name: "opened"})
	ctx := ctxT(t, 20*time.Second)
	if id := c.LastTransportID(e.Serial()); id != 0 {
		t.Fatalf("LastTransportID before any command: %d", id)
	}
	opened := make(chan time.Time, 2)
	start := time.Now()
	r, err := c.Shell(WithOpened(ctx, func() { opened <- time.Now() }), e.Serial(), "sleep 1; echo done")
	returned := time.Now()
	if err != nil || string(r.Stdout) != "done\n" {
		t.Fatalf("shell: %+v %v", r, err)
	}
	if len(opened) != 1 {
		t.Fatalf("opened called %d times, want 1", len(opened))
	}
	at := <-opened
	t.Logf("opened after %v, returned after %v", at.Sub(start), returned.Sub(start))
	if returned.Sub(at) < 900*time.Millisecond {
		t.Errorf("opened %v after the start, %v before the command ended: not while it ran", at.Sub(start), returned.Sub(at))
	}
	if id := c.LastTransportID(e.Serial()); id == 0 || id != r.TransportID {
		t.Errorf("LastTransportID %d, the shell ran on %d", id, r.TransportID)
	}
}
