package e2e

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// A bad flag or command: the error and the closest name first, then one line
// pointing at the command's --help, exit 2; no usage dump before it. No
// command at all prints the overview (exit 0).
func TestBadFlagErrorFirst(t *testing.T) {
	bin := buildAgent(t)
	for _, c := range []struct {
		args       []string
		first, cmd string
	}{
		{[]string{"runs", "list", "--limt", "3"}, `screengraph-agent: error: unknown flag --limt, did you mean "--limit"?`, "screengraph-agent runs list"},
		{[]string{"runs", "lst"}, `screengraph-agent: error: unexpected argument lst, did you mean "list"?`, "screengraph-agent runs"},
		{[]string{"runs", "show", "R1", "--outpt", "json"}, `screengraph-agent: error: unknown flag --outpt, did you mean "--output"?`, "screengraph-agent runs show"},
	} {
		cmd := exec.Command(bin, c.args...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit 2\n%s", c.args, err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 || lines[0] != c.first || lines[1] != "Run '"+c.cmd+" --help' for usage." {
			t.Errorf("%v printed:\n%s", c.args, out)
		}
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage: screengraph-agent <command>") {
		t.Errorf("no command: %v\n%s", err, out)
	}
}

// The runs commands read a local store, never create one: with no daemon and
// no agent.db they say which store they looked for instead of printing an
// empty table.
func TestRunsListNoStore(t *testing.T) {
	bin := buildAgent(t)
	data := filepath.Join(t.TempDir(), "sg-data")
	for _, args := range [][]string{{"runs", "list"}, {"runs", "show", "01J0000000000000000000000A"}, {"runs", "events", "01J0000000000000000000000A"}} {
		out, err := exec.Command(bin, append(args, "--data-dir", data)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no local store at "+filepath.Join(data, "agent.db")) {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the runs commands created %s (stat: %v)", data, err)
	}
}

// serve that cannot listen (a busy --listen) exits with the error and
// leaves no Appium server behind: the local one it started is stopped.
func TestServeBusyListenStopsItsAppium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Appium server")
	}
	srv := simtest.StartADBServer(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := t.TempDir()
	root, _ := filepath.Abs(repoRoot)
	cmd := exec.Command(buildAgent(t), "serve", "--data-dir", data, "--listen", busy.Addr().String(),
		"--nats-listen", "127.0.0.1:"+strconv.Itoa(simtest.FreePort(t)), "--adb-server", srv.Addr())
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(srv.Port), "ADB_EMU=0",
		"APPIUM_HOME="+filepath.Join(root, ".cache", "appium-home"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--listen "+busy.Addr().String()) {
		t.Fatalf("serve on a busy port: %v\n%s", err, out)
	}
	// A detached Appium writes to data/appium.log as its stdout: no
	// process may still hold that file open.
	logPath := filepath.Join(data, "appium.log")
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("serve started no local Appium (%v)\n%s", err, out)
	}
	if pids := holding(t, logPath); len(pids) > 0 {
		for _, pid := range pids {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("processes %v (the local Appium serve started) still run", pids)
	}
	if _, err := os.Stat(appium.LocalStateFile(data)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the local Appium's state file is left: %v", err)
	}
}

// holding lists the pids of processes with path open (/proc/*/fd).
func holding(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if target, err := os.Readlink(fd); err == nil && target == path {
			if pid, err := strconv.Atoi(strings.Split(fd, "/")[2]); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
