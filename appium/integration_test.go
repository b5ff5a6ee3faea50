package appium_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestRealAppiumOnSimulator drives the real Appium 3.8.0 server with the real
// uiautomator2 driver (StartServer) against a simulated emulator registered with
// a real adb server on a port of its own: create a session with the agent's
// capabilities, probe it, attach from a second client, read the page source,
// delete it and probe again.
func TestRealAppiumOnSimulator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	adb := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, adb, simtest.Profile(t, "default"))
	adb.WaitState(t, emu.Serial(), "device", 10*time.Second)

	logFile := filepath.Join(t.TempDir(), "appium.log")
	srv, err := appium.StartServer(ctx, appium.ServerConfig{ADBServerPort: adb.Port, LogFile: logFile})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()

	c, err := appium.New(srv.URL, appium.Options{})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := appium.Capabilities(appium.CapsConfig{Serial: emu.Serial(), ADBPort: adb.Port})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s, err := c.CreateSession(ctx, caps)
	if err != nil {
		t.Fatalf("CreateSession: %v\nAppium log (adb calls, HTTP to the device, errors):\n%s", err, failureLines(srv))
	}
	t.Logf("session %s created in %v", s.ID, time.Since(start).Round(time.Millisecond))
	if s.Capabilities["udid"] != emu.Serial() {
		t.Errorf("returned capabilities: udid = %v, want %s", s.Capabilities["udid"], emu.Serial())
	}

	h, details, err := c.Probe(ctx, s.ID)
	if h != device.Healthy || err != nil {
		t.Errorf("Probe of the new session = %s %v %v\n%s", h, details, err, failureLines(srv))
	}

	// A second client (another daemon, or this one after a restart) attaches by id.
	c2, _ := appium.New(srv.URL, appium.Options{})
	got, err := c2.Attach(ctx, s.ID)
	if err != nil || got.ID != s.ID || got.Capabilities["udid"] != emu.Serial() {
		t.Errorf("Attach = %+v %v", got, err)
	}
	list, err := c2.ListSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID {
		t.Errorf("ListSessions = %+v %v", list, err)
	}

	src, err := c2.PageSource(ctx, s.ID)
	if err != nil || !strings.HasPrefix(src, "<?xml") || !strings.Contains(src, "<hierarchy") {
		t.Errorf("PageSource = %.200q %v", src, err)
	}
	if w, hgt, err := c2.WindowSize(ctx, s.ID); err != nil || w != 1080 || hgt != 2400 {
		t.Errorf("WindowSize = %d x %d %v (profile: 1080 x 2400)", w, hgt, err)
	}

	// `mobile: shell` works only because StartServer passes --allow-insecure uiautomator2:adb_shell.
	if out, err := c2.Shell(ctx, s.ID, "getprop", "ro.build.version.sdk"); err != nil || out != "34\n" {
		t.Errorf("Shell getprop = %q %v (profile default: API 34)", out, err)
	}
	if pkg, err := c2.CurrentPackage(ctx, s.ID); err != nil || pkg == "" {
		t.Errorf("CurrentPackage = %q %v", pkg, err)
	}

	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Errorf("DeleteSession: %v", err)
	}
	h, details, err = c2.Probe(ctx, s.ID)
	if h != device.Unhealthy || err != nil || details["code"] != "invalid session id" {
		t.Errorf("Probe after delete = %s %v %v", h, details, err)
	}
	if t.Failed() {
		t.Logf("Appium log:\n%s", failureLines(srv))
	}
}

// failureLines picks the Appium log lines that say which adb command or HTTP
// call was made and what failed.
func failureLines(srv *appium.Server) string {
	var out []string
	for _, l := range strings.Split(srv.LogTail(256<<10), "\n") {
		if strings.Contains(l, "Running '") || strings.Contains(l, "[HTTP]") || strings.Contains(l, "Proxying") ||
			strings.Contains(l, "rror") || strings.Contains(l, "fail") || strings.Contains(l, "Matched") {
			out = append(out, l)
		}
	}
	if len(out) > 200 {
		out = out[len(out)-200:]
	}
	return strings.Join(out, "\n")
}
