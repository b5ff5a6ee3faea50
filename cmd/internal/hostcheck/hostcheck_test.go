package hostcheck

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

func find(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

// A host with a real adb server (no device), the checkout's Appium, a data
// dir others can read, a port taken by another program, an unreachable
// Postgres, no SDK and no KVM: each check says so, with a fix.
func TestRunReportsEachCheck(t *testing.T) {
	srv := simtest.StartADBServer(t)
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	bin := filepath.Join(root, "tools", "node", "node_modules", ".bin", "appium")
	t.Setenv("APPIUM_HOME", filepath.Join(root, ".cache", "appium-home"))
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	free := simtest.FreePort(t)

	r := Run(context.Background(), Config{
		ADBServer: srv.Addr(), DataDir: data, AppiumBinary: bin,
		Listen: taken.Addr().String(), NATSListen: net.JoinHostPort("127.0.0.1", itoa(free)),
		DatabaseURL: "postgres://agent:s3cret@" + closedAddr + "/agent?connect_timeout=2",
		Env:         []string{"ANDROID_HOME=" + filepath.Join(t.TempDir(), "no-sdk"), "PATH=" + os.Getenv("PATH")},
		KVM:         filepath.Join(t.TempDir(), "no-kvm"),
	})
	want := map[string]string{
		"adb server": OK, "devices": Warn, "appium": OK, "uiautomator2 driver": OK, "android sdk": Warn,
		"emulator": Warn, "kvm": Warn, "data dir": Warn, "http port": Fail, "nats port": OK, "postgres": Fail,
	}
	for name, status := range want {
		c := find(t, r, name)
		if c.Status != status {
			t.Errorf("%s: %s, want %s: %s", name, c.Status, status, c.Detail)
		}
		if c.Status != OK && c.Fix == "" {
			t.Errorf("%s: %s without a fix", name, c.Status)
		}
	}
	if c := find(t, r, "appium"); !strings.Contains(c.Detail, appium.PinnedAppium) {
		t.Errorf("appium: %s", c.Detail)
	}
	if c := find(t, r, "uiautomator2 driver"); !strings.Contains(c.Detail, appium.PinnedUiAutomator2) {
		t.Errorf("driver: %s", c.Detail)
	}
	if !r.Failed() {
		t.Error("Failed() = false")
	}
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), "s3cret") || !strings.HasPrefix(string(b), `{"checks":[{"name":`) {
		t.Errorf("report: %s", b)
	}

	// A data dir of mode 0700 and free ports: those checks pass.
	if err := os.Chmod(data, 0o700); err != nil {
		t.Fatal(err)
	}
	taken.Close()
	r = Run(context.Background(), Config{ADBServer: srv.Addr(), DataDir: data, AppiumBinary: bin, Listen: taken.Addr().String()})
	for _, name := range []string{"data dir", "http port"} {
		if c := find(t, r, name); c.Status != OK {
			t.Errorf("%s: %+v", name, c)
		}
	}
}

// The adb server is down: a fail naming the address and how to start it.
func TestRunADBServerDown(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", itoa(simtest.FreePort(t)))
	r := Run(context.Background(), Config{ADBServer: addr, DataDir: t.TempDir(), AppiumBinary: filepath.Join(t.TempDir(), "none")})
	c := find(t, r, "adb server")
	if c.Status != Fail || !strings.Contains(c.Detail, addr) || !strings.Contains(c.Fix, "start-server") {
		t.Errorf("%+v", c)
	}
	if c := find(t, r, "appium"); c.Status != Fail || !strings.Contains(c.Fix, "setup appium") {
		t.Errorf("%+v", c)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
