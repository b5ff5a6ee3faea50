package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// `runs submit --follow` against the real serve binary on a simulated
// emulator with the real Appium: a run that finishes prints each node's
// start and end and exits 0; a run whose APK's signer is not the expected
// one prints the failure's error id and exits 1; a daemon that is not there
// exits 2 with the agent error format under --output json.
func TestRunsSubmitFollow(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: serve, Appium and a simulated emulator")
	}
	srv := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "default"))
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	d := startDaemon(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	submit := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(d.bin, append([]string{"runs", "submit", "--server", d.URL(), "--device", emu.Serial(),
			"--package", appPkg, "--apk", apk}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), code
	}

	out, code := submit("--sha256", sha, "--follow")
	t.Logf("runs submit --follow:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, node := range []string{"EnsureDevice", "ProvisionApp", "LaunchOrAttach", "WaitIdle"} {
		if !strings.Contains(out, node+strings.Repeat(" ", 15-len(node))+" started") || !strings.Contains(out, node+strings.Repeat(" ", 15-len(node))+" SUCCESS in") {
			t.Errorf("no start and SUCCESS line of %s:\n%s", node, out)
		}
	}
	if !strings.Contains(out, "run FINISHED") {
		t.Errorf("no final status:\n%s", out)
	}

	out, code = submit("--sha256", strings.Repeat("0", 64), "--follow")
	if code != 1 || !strings.Contains(out, "run FAILED at ProvisionApp: signature_mismatch") {
		t.Fatalf("exit %d, want 1 and the failure:\n%s", code, out)
	}

	// Without --follow: the run id alone.
	out, code = submit("--sha256", sha)
	if code != 0 || len(strings.TrimSpace(out)) != 26 {
		t.Fatalf("exit %d, want a run id: %q", code, out)
	}
	d.waitStatus(t, []string{strings.TrimSpace(out)}, 3*time.Minute, agent.RunFinished)

	// runs show of a FAILED run: each node attempt with its outcome and
	// duration, then the error report; through the daemon and from the
	// local store alike.
	out, code = submit("--sha256", strings.Repeat("1", 64))
	failed := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	d.waitStatus(t, []string{failed}, 3*time.Minute, agent.RunFailed)
	for _, where := range [][]string{{"--server", d.URL()}, {"--data-dir", d.dataDir}} {
		b, err := exec.Command(d.bin, append([]string{"runs", "show", failed}, where...)...).CombinedOutput()
		show := string(b)
		if err != nil || !strings.Contains(show, "status FAILED") || !strings.Contains(show, "node EnsureDevice ") ||
			!strings.Contains(show, "SUCCESS") || !strings.Contains(show, "node ProvisionApp ") || !strings.Contains(show, "signature_mismatch") ||
			!strings.Contains(show, "error report:") || !strings.Contains(show, `"failed_node": "ProvisionApp"`) || !strings.Contains(show, "took ") {
			t.Errorf("runs show %v: %v\n%s", where, err, show)
		}
	}

	// No daemon: exit 2, the agent error format.
	cmd := exec.Command(d.bin, "runs", "submit", "--server", "http://127.0.0.1:"+strconv.Itoa(simtest.FreePort(t)), "--device", "e",
		"--package", appPkg, "--output", "json")
	b, err := cmd.Output()
	var body agent.ErrorReport
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || json.Unmarshal(b, &body) != nil || body.Success || body.Error == "" {
		t.Fatalf("no daemon: %v %s", err, b)
	}
}

// runs submit --follow on a device still booting (the slow-boot profile,
// 20 s): the boot wait's lines are printed while it waits, each with the
// time since the run started, not all at EnsureDevice's end.
func TestRunsSubmitFollowSlowBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: serve, Appium and a simulated emulator booting for 20 s")
	}
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "slow-boot"))
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	cmd := exec.Command(d.bin, "runs", "submit", "--server", d.URL(), "--device", emu.Serial(), "--package", appPkg,
		"--apk", apk, "--sha256", signerDigest(t, apk), "--follow")
	out, err := cmd.CombinedOutput()
	t.Logf("runs submit --follow:\n%s", out)
	if err != nil {
		t.Fatalf("exit: %v", err)
	}
	// The elapsed seconds printed on the boot wait's lines: live, they
	// climb through the 20 s boot; committed at the node's end they would
	// all read the same.
	seen := map[int]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "EnsureDevice") || !strings.Contains(line, "to boot") {
			continue
		}
		var sec float64
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%fs", &sec); err == nil {
			seen[int(sec)] = true
		}
	}
	if len(seen) < 10 {
		t.Errorf("the boot wait's lines were printed at %d distinct seconds, want at least 10 of the 20 s boot", len(seen))
	}
}
