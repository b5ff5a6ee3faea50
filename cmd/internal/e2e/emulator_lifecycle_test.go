package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// buildEmulatorCLI builds this command into a temp dir (the tests run it as a
// separate process, as a user would).
func buildEmulatorCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "screengraph-agent")
	if out, err := exec.Command("go", "build", "-o", bin, agentPkg).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestEmulatorListStartStopCLI drives `screengraph-agent emulator
// list|start|stop --output json` with `screengraph-agent emulator sim` in
// place of the SDK's emulator binary ($SCREENGRAPH_EMULATOR) and the real adb
// server: the started emulator outlives the CLI, `list` names its AVD, `stop`
// removes it from `adb devices`, and a second stop is device_not_found in the
// agent error format.
func TestEmulatorListStartStopCLI(t *testing.T) {
	bin := buildEmulatorCLI(t)
	srv := simtest.StartADBServer(t)
	home, avdHome, data := t.TempDir(), t.TempDir(), t.TempDir()
	simtest.CreateAVD(t, avdHome, simtest.AVD{Name: "Pixel_7", Profile: "quickboot"})
	env := append(srv.EmulatorEnv(home, avdHome), "SCREENGRAPH_EMULATOR="+bin+" emulator sim", "ANDROID_SDK_ROOT=", "ANDROID_HOME=")
	cli := func(args ...string) (map[string]any, string, int) {
		t.Helper()
		c := exec.Command(bin, append(append([]string{"emulator"}, args...), "--data-dir", data, "--output", "json")...)
		c.Env = env
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("emulator %s: not JSON (%v):\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return v, errb.String(), code
	}

	v, _, code := cli("list")
	if code != 0 || !strings.Contains(emuJSON(v["avds"]), `"name":"Pixel_7","running":[]`) {
		t.Fatalf("list before start: %d %v", code, v)
	}
	v, stderr, code := cli("start", "Pixel_7", "--timeout", "1m")
	if code != 0 || v["avd"] != "Pixel_7" || v["bootMode"] != "COLD" || !strings.HasPrefix(v["serial"].(string), "emulator-") {
		t.Fatalf("start: %d %v\n%s", code, v, stderr)
	}
	serial := v["serial"].(string)
	if !strings.Contains(stderr, "-avd Pixel_7 -port") || !strings.Contains(stderr, "-no-window -no-audio -no-boot-anim -no-snapshot-save") {
		t.Errorf("start progress:\n%s", stderr)
	}
	srv.WaitState(t, serial, "device", 5*time.Second) // it outlived the CLI
	v, _, _ = cli("list")
	if !strings.Contains(emuJSON(v["avds"]), `"running":["`+serial+`"]`) || !strings.Contains(emuJSON(v["emulators"]), `"avd":"Pixel_7"`) {
		t.Errorf("list while running: %v", v)
	}
	if v, _, code = cli("stop", serial); code != 0 || v["stopped"] != true {
		t.Fatalf("stop: %d %v", code, v)
	}
	if out, _, _ := srv.Run(t, "devices"); strings.Contains(out, serial) {
		t.Errorf("%s still listed:\n%s", serial, out)
	}
	v, _, code = cli("stop", serial)
	if code != 1 || v["success"] != false || !strings.Contains(emuJSON(v["errors"]), `"error_id":"device_not_found"`) {
		t.Errorf("second stop: %d %v", code, v)
	}
	v, _, code = cli("start", "NoSuchAVD")
	if code != 1 || !strings.Contains(emuJSON(v["errors"]), `"error_code":"AVD_UNKNOWN"`) {
		t.Errorf("unknown AVD: %d %v", code, v)
	}
}

func emuJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
