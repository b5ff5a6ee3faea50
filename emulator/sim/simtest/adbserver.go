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
// server knows no device until each registers again.
func (s *ADBServer) Restart(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Command(ctx, "kill-server").Run()
	// Wait until the old server is gone: a start-server it still answered
	// would start nothing.
	for ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
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
