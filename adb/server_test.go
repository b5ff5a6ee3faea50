package adb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The integration tests share one real adb server per test binary, on a free
// port, with the emulator scan off (ADB_EMU=0); TestMain kills it at the end.
var (
	srvOnce sync.Once
	srvPort int
	srvErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srvPort != 0 {
		_ = adbCmd(srvPort, "kill-server").Run()
	}
	os.Exit(code)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func adbCmd(port int, args ...string) *exec.Cmd {
	cmd := exec.Command("adb", append([]string{"-P", strconv.Itoa(port)}, args...)...)
	cmd.Env = append(os.Environ(), "ADB_EMU=0", "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(port))
	return cmd
}

// adbServer returns a client of the shared isolated adb server.
func adbServer(t testing.TB) *Client {
	t.Helper()
	if _, err := exec.LookPath("adb"); err != nil {
		t.Fatal("adb not installed")
	}
	srvOnce.Do(func() {
		srvPort = freePort(t)
		out, err := adbCmd(srvPort, "start-server").CombinedOutput()
		if err != nil {
			srvErr = fmt.Errorf("adb start-server: %v: %s", err, out)
		}
	})
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	return New("127.0.0.1:" + strconv.Itoa(srvPort))
}

// silentListener accepts TCP connections and never answers: a device that never
// completes the handshake (adb marks it offline) or a hung server.
func silentListener(t testing.TB) (port int) {
	t.Helper()
	port, _ = silentListenerAccepts(t)
	return port
}

// silentListenerAccepts is silentListener that also tells each connection
// it accepted (a buffered signal; one is kept when nobody takes it).
func silentListenerAccepts(t testing.TB) (port int, accepted <-chan struct{}) {
	t.Helper()
	acc := make(chan struct{}, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case acc <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().(*net.TCPAddr).Port, acc
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
