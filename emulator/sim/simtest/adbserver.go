// Package simtest starts what integration tests need around the simulated
// emulator: a real adb server on a port of its own (never 5037, emulator port
// scanning off) and simulated emulators registered with it.
package simtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ADBServer is a real adb server (Debian's adb 1.0.41) isolated on its own port.
type ADBServer struct {
	Port int
	Bin  string
}

// Addr is "127.0.0.1:<port>".
func (s *ADBServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Env is the environment that points adb clients (the CLI, appium-adb) at this
// server and turns the emulator port scan off.
func (s *ADBServer) Env() []string {
	return append(os.Environ(), "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(s.Port), "ADB_EMU=0")
}

// Command builds `adb -P <port> args…` with Env.
func (s *ADBServer) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, s.Bin, append([]string{"-P", strconv.Itoa(s.Port)}, args...)...)
	cmd.Env = s.Env()
	return cmd
}

// Run runs the adb CLI and returns stdout, stderr and the exit code.
func (s *ADBServer) Run(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := s.Command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("adb %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// Restart kills the adb server and starts it again on the same port: the new
// server knows no device until each registers again. The old server is
// known by its listening socket (/proc/net/tcp{,6}) and its process: Restart
// waits until that socket is gone, SIGKILLing the process after 5 s, and
// then starts a server. Waiting for the port to close is not enough: an adb
// client of the tests (appium-adb runs the adb CLI) may have started a new
// server on it meanwhile (TestFleetChaos waited 30 s for that in CI), and
// that one is as good as any.
func (s *ADBServer) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old := listenInodes(s.Port)
	pids := socketOwners(old)
	kctx, kcancel := context.WithTimeout(ctx, 10*time.Second)
	s.Command(kctx, "kill-server").Run()
	kcancel()
	for start, killed := time.Now(), false; ; {
		gone := true
		for ino := range listenInodes(s.Port) {
			if old[ino] {
				gone = false
			}
		}
		if gone {
			break
		}
		if !killed && time.Since(start) > 5*time.Second {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			killed = true
		}
		if ctx.Err() != nil {
			t.Fatalf("the old adb server (pids %v) still listens on %d", pids, s.Port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out []byte
	var err error
	for range 20 {
		if out, err = s.Command(ctx, "start-server").CombinedOutput(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("adb start-server: %v %s", err, out)
}

// listenInodes returns the inodes of the TCP sockets listening on port
// (any address, IPv4 and IPv6), from /proc/net/tcp and /proc/net/tcp6
// (proc(5): local_address is hex "ADDR:PORT", state 0A is LISTEN, the
// inode is the 10th field).
func listenInodes(port int) map[string]bool {
	out := map[string]bool{}
	suffix := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && strings.HasSuffix(fs[1], suffix) && fs[3] == "0A" {
				out[fs[9]] = true
			}
		}
	}
	return out
}

// socketOwners returns the pids holding any of the socket inodes (their
// /proc/<pid>/fd links read "socket:[inode]").
func socketOwners(inodes map[string]bool) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			link, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name())
			if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartADBServer starts an adb server on a free port and kills it when the test
// ends. It fails the test when adb is not installed: CI must install it.
func StartADBServer(t testing.TB) *ADBServer {
	t.Helper()
	bin, err := exec.LookPath("adb")
	if err != nil {
		t.Fatalf("adb is not installed (apt-get install adb): %v", err)
	}
	s := &ADBServer{Port: FreePort(t), Bin: bin}
	if out, _, code := s.Run(t, "start-server"); code != 0 {
		t.Fatalf("adb start-server: exit %d: %s", code, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Command(ctx, "kill-server").Run()
	})
	return s
}

// WaitState polls `adb get-state`-like listings until serial is in state
// ("device", "offline", or "" for absent) or the timeout passes.
func (s *ADBServer) WaitState(t testing.TB, serial, state string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		out, _, _ := s.Run(t, "devices")
		last = out
		got := ""
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == serial {
				got = f[1]
			}
		}
		if got == state {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not reach state %q within %v; last `adb devices`:\n%s", serial, state, timeout, last)
}

// String describes the server.
func (s *ADBServer) String() string { return fmt.Sprintf("adb server %s", s.Addr()) }
