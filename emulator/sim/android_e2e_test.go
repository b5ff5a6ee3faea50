package sim_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

func launchProfile(t *testing.T, srv *simtest.ADBServer, name string) (*sim.Emulator, *android.Device) {
	t.Helper()
	e, dev := simtest.Launch(t, srv, simtest.Profile(t, name))
	srv.WaitState(t, e.Serial(), "device", 10*time.Second)
	return e, dev
}

func driverAPK(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{repoRoot(t), ".cache", "appium-home", "node_modules", "appium-uiautomator2-driver", "node_modules"}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing: run tools/setup.sh", p)
	}
	return p
}

// TestTwoSimulatedEmulatorsThroughRealADB is the simulator's acceptance run on
// the Android device model: two emulators listed as `device`, shell exit codes,
// a 20 MB push/pull, a real APK installed and read back, and a forward to the
// in-device UiAutomator2 server on port 6790.
func TestTwoSimulatedEmulatorsThroughRealADB(t *testing.T) {
	srv := simtest.StartADBServer(t)
	a, _ := launchProfile(t, srv, "default")
	b, _ := launchProfile(t, srv, "api30")

	out, _, _ := srv.Run(t, "devices", "-l")
	for _, s := range []string{a.Serial(), b.Serial()} {
		if !regexp.MustCompile(`(?m)^` + s + `\s+device product:\S+ model:\S+ device:\S+ transport_id:\d+$`).MatchString(out) {
			t.Fatalf("adb devices -l does not list %s as device:\n%s", s, out)
		}
	}

	s := b.Serial()
	if _, _, code := srv.Run(t, "-s", s, "shell", "ls /data/local/tmp && false"); code != 1 {
		t.Errorf("`ls && false` exit %d, want 1", code)
	}
	if _, errOut, code := srv.Run(t, "-s", s, "shell", "cat /nonexistent"); code != 1 || !strings.Contains(errOut, "No such file or directory") {
		t.Errorf("cat of a missing file: exit %d stderr %q", code, errOut)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "in.bin")
	data := make([]byte, 20<<20)
	rand.Read(data)
	os.WriteFile(src, data, 0o644)
	if o, e, code := srv.Run(t, "-s", s, "push", src, "/sdcard/Download/in.bin"); code != 0 {
		t.Fatalf("push: %s %s", o, e)
	}
	if o, _, _ := srv.Run(t, "-s", s, "shell", "ls -l /sdcard/Download/in.bin"); !strings.Contains(o, fmt.Sprint(len(data))) {
		t.Errorf("ls -l after push: %q", o)
	}
	dst := filepath.Join(dir, "out.bin")
	if o, e, code := srv.Run(t, "-s", s, "pull", "/sdcard/Download/in.bin", dst); code != 0 {
		t.Fatalf("pull: %s %s", o, e)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatalf("pulled file differs from the pushed one (%d bytes)", len(got))
	}

	settings := driverAPK(t, "io.appium.settings", "apks", "settings_apk-debug.apk")
	if o, e, code := srv.Run(t, "-s", s, "install", settings); code != 0 || !strings.Contains(o, "Success") {
		t.Fatalf("adb install io.appium.settings: exit %d %s %s", code, o, e)
	}
	wantCode, wantName := aaptVersion(t, settings)
	o, _, _ := srv.Run(t, "-s", s, "shell", "dumpsys package io.appium.settings")
	if !strings.Contains(o, fmt.Sprintf("versionCode=%d ", wantCode)) || !strings.Contains(o, "versionName="+wantName+"\n") {
		t.Errorf("dumpsys package io.appium.settings lacks versionCode=%d / versionName=%s:\n%s", wantCode, wantName, o)
	}

	// The UiAutomator2 server APKs, then its instrumentation, as the driver does.
	for _, apk := range []string{"appium-uiautomator2-server-v10.6.6.apk", "appium-uiautomator2-server-debug-androidTest.apk"} {
		if o, e, code := srv.Run(t, "-s", s, "install", "-r", driverAPK(t, "appium-uiautomator2-server", "apks", apk)); code != 0 {
			t.Fatalf("install %s: %s %s", apk, o, e)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	instr := srv.Command(ctx, "-s", s, "shell", "am", "instrument", "-w", "-e", "disableAnalytics", "true", sim.UiAutomator2Instrumentation)
	if err := instr.Start(); err != nil {
		t.Fatal(err)
	}
	port := simtest.FreePort(t)
	if _, e, code := srv.Run(t, "-s", s, "forward", fmt.Sprintf("tcp:%d", port), "tcp:6790"); code != 0 {
		t.Fatalf("forward: %s", e)
	}
	var status map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/status", port))
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&status)
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device port 6790 not reachable through adb forward: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, ok := status["value"].(map[string]any); !ok || v["ready"] != true {
		t.Fatalf("GET /status through the forward: %v", status)
	}
	// force-stop of the target package ends the instrumentation, as on Android.
	srv.Run(t, "-s", s, "shell", "am", "force-stop", "io.appium.uiautomator2.server")
	done := make(chan error, 1)
	go func() { done <- instr.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("am instrument kept running after force-stop")
	}
}
