package sim_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// repoRoot is two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// TestAppiumADBReadsTheSimulator drives the simulator with appium-adb, the npm
// library Appium uses against real devices (it spawns the real adb CLI and
// parses real output formats), and checks every answer against the device
// model's own state.
func TestAppiumADBReadsTheSimulator(t *testing.T) {
	root := repoRoot(t)
	probe := filepath.Join(root, "tools", "node", "appium-adb-probe.mjs")
	if _, err := os.Stat(filepath.Join(root, "tools", "node", "node_modules", "appium-adb")); err != nil {
		t.Fatalf("appium-adb is not installed: run tools/setup.sh (%v)", err)
	}
	apk := filepath.Join(root, ".cache", "appium-home", "node_modules", "appium-uiautomator2-driver",
		"node_modules", "io.appium.settings", "apks", "settings_apk-debug.apk")
	if _, err := os.Stat(apk); err != nil {
		t.Fatalf("io.appium.settings APK missing: run tools/setup.sh (%v)", err)
	}
	b, err := fixtures.Profile("api33")
	if err != nil {
		t.Fatal(err)
	}
	prof, err := android.ParseProfile("api33", b)
	if err != nil {
		t.Fatal(err)
	}
	srv := simtest.StartADBServer(t)
	e, dev, err := sim.Launch(context.Background(), sim.LaunchConfig{ADBServer: srv.Addr(), Profile: prof, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv.WaitState(t, e.Serial(), "device", 10*time.Second)

	// A preinstalled package of the profile, to check getPackageInfo on it.
	pre := prof.Preinstalled[0]

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", probe, strconv.Itoa(srv.Port), e.Serial(), apk, pre.ID, "io.appium.settings")
	cmd.Env = append(srv.Env(), "ANDROID_HOME=/usr/lib/android-sdk", "ANDROID_SDK_ROOT=/usr/lib/android-sdk")
	var logs strings.Builder
	cmd.Stderr = &logs
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("appium-adb probe: %v\n%s\nappium-adb log:\n%s", err, out, logs.String())
	}
	var got struct {
		APILevel         int    `json:"apiLevel"`
		PlatformVersion  string `json:"platformVersion"`
		InstalledBefore  bool   `json:"installedBefore"`
		InstalledAfter   bool   `json:"installedAfter"`
		InstalledPkgInfo struct {
			Name        string `json:"name"`
			VersionCode int64  `json:"versionCode"`
			VersionName string `json:"versionName"`
			IsInstalled bool   `json:"isInstalled"`
		} `json:"installedPkgInfo"`
		APKPkgInfo struct {
			Name        string `json:"name"`
			VersionCode int64  `json:"versionCode"`
			VersionName string `json:"versionName"`
			IsInstalled bool   `json:"isInstalled"`
		} `json:"apkPkgInfo"`
		Focused struct {
			AppPackage  string `json:"appPackage"`
			AppActivity string `json:"appActivity"`
		} `json:"focused"`
		ShellEcho  string `json:"shellEcho"`
		ShellExit3 string `json:"shellExit3"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	t.Logf("appium-adb saw: %s", out)

	if got.APILevel != dev.APILevel() || got.APILevel != 33 {
		t.Errorf("getApiLevel = %d, device model says %d", got.APILevel, dev.APILevel())
	}
	if got.PlatformVersion != dev.Prop("ro.build.version.release") {
		t.Errorf("getPlatformVersion = %q, device says %q", got.PlatformVersion, dev.Prop("ro.build.version.release"))
	}
	if got.InstalledBefore || !got.InstalledAfter {
		t.Errorf("isAppInstalled before/after install = %v/%v, want false/true", got.InstalledBefore, got.InstalledAfter)
	}
	if p := got.InstalledPkgInfo; !p.IsInstalled || p.Name != pre.ID || p.VersionCode != pre.VersionCode || p.VersionName != pre.VersionName {
		t.Errorf("getPackageInfo(%s) = %+v, profile says %+v", pre.ID, p, pre)
	}
	// io.appium.settings's real manifest values, as `aapt dump badging` reads them.
	wantCode, wantName := aaptVersion(t, apk)
	if p := got.APKPkgInfo; !p.IsInstalled || p.VersionCode != wantCode || p.VersionName != wantName {
		t.Errorf("getPackageInfo(io.appium.settings) = %+v, aapt says versionCode=%d versionName=%s", p, wantCode, wantName)
	}
	pkg, act, _ := dev.Foreground()
	if got.Focused.AppPackage != pkg || !sameActivity(pkg, got.Focused.AppActivity, act) {
		t.Errorf("getFocusedPackageAndActivity = %+v, device model has %s/%s", got.Focused, pkg, act)
	}
	if got.ShellEcho != "hello from appium-adb" {
		t.Errorf("shell echo = %q", got.ShellEcho)
	}
	if got.ShellExit3 == "no error" {
		t.Errorf("shell exit 3 did not fail in appium-adb")
	}
}

// sameActivity compares an activity as appium-adb reports it (often relative,
// ".Main") with the model's fully qualified class name.
func sameActivity(pkg, reported, full string) bool {
	if reported == full {
		return true
	}
	return len(reported) > 0 && reported[0] == '.' && pkg+reported == full
}

func aaptVersion(t *testing.T, apk string) (int64, string) {
	t.Helper()
	out, err := exec.Command("aapt", "dump", "badging", apk).Output()
	if err != nil {
		t.Fatalf("aapt dump badging: %v", err)
	}
	var code int64
	var name string
	for _, f := range splitFields(string(out)) {
		if v, ok := cutPrefix(f, "versionCode='"); ok && code == 0 {
			code, _ = strconv.ParseInt(v[:len(v)-1], 10, 64)
		}
		if v, ok := cutPrefix(f, "versionName='"); ok && name == "" {
			name = v[:len(v)-1]
		}
	}
	return code, name
}

func splitFields(s string) []string {
	var out []string
	cur := ""
	for _, r := range s {
		if r == ' ' || r == '\n' {
			if cur != "" {
				out = append(out, cur)
			}
			cur = ""
			continue
		}
		cur += string(r)
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}
