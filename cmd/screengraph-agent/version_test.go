package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/cmd/internal/hostcheck"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// checkoutAppium is the checkout's Appium (tools/setup.sh) and its home.
func checkoutAppium(t testing.TB) (bin, home string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(root, "tools", "node", "node_modules", ".bin", "appium")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("run tools/setup.sh first: %v", err)
	}
	return bin, filepath.Join(root, ".cache", "appium-home")
}

// runOutside runs the agent binary in a directory outside the checkout with
// env (and HOME in a scratch dir) and returns stdout, stderr and the exit code.
func runOutside(t testing.TB, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "APPIUM_HOME="}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// From a directory outside the checkout, `version` finds the adb server, an
// Appium on PATH and its driver through APPIUM_HOME; without them it says
// where it looked. `--version` prints the same text.
func TestVersionOutsideCheckout(t *testing.T) {
	bin := buildAgent(t)
	srv := simtest.StartADBServer(t)
	appiumBin, home := checkoutAppium(t)
	pathDir := t.TempDir()
	if err := os.Symlink(appiumBin, filepath.Join(pathDir, "appium")); err != nil {
		t.Fatal(err)
	}
	sysPath := os.Getenv("PATH")

	out, stderr, code := runOutside(t, bin, []string{"PATH=" + pathDir + ":" + sysPath, "APPIUM_HOME=" + home},
		"version", "--output", "json", "--adb-server", srv.Addr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v hostcheck.Versions
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go1.") || v.ADBServer.Version == "" || v.ADBServer.Error != "" {
		t.Errorf("version %+v", v)
	}
	if v.Appium.Version != appium.PinnedAppium || !strings.Contains(v.Appium.Where, "PATH") {
		t.Errorf("appium %+v", v.Appium)
	}
	if v.UiAutomator2.Version != appium.PinnedUiAutomator2 {
		t.Errorf("uiautomator2 %+v", v.UiAutomator2)
	}

	// Nothing on PATH, no APPIUM_HOME, an empty data dir: the places tried.
	data := t.TempDir()
	out, stderr, code = runOutside(t, bin, []string{"PATH=" + sysPath}, "--version")
	if code != 0 || !strings.HasPrefix(out, "screengraph-agent ") || !strings.Contains(out, "appium:       not found") {
		t.Errorf("--version: exit %d\n%s%s", code, out, stderr)
	}
	out, _, _ = runOutside(t, bin, []string{"PATH=" + sysPath}, "version", "--output", "json", "--data-dir", data)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"not inside a checkout", "appium on PATH", filepath.Join(data, "appium"), "setup appium"} {
		if !strings.Contains(v.Appium.Error, want) {
			t.Errorf("appium error lacks %q: %s", want, v.Appium.Error)
		}
	}
}
