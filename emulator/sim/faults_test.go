package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

func launchFaulty(t *testing.T, srv *simtest.ADBServer, p android.Profile) *sim.Emulator {
	t.Helper()
	e, _ := simtest.Launch(t, srv, p)
	return e
}

// TestProfileFaultsThroughRealADB covers every fault a profile can inject, each
// seen the way a client sees it: through the real adb server.
func TestProfileFaultsThroughRealADB(t *testing.T) {
	srv := simtest.StartADBServer(t)
	apk := driverAPK(t, "io.appium.settings", "apks", "settings_apk-debug.apk")

	t.Run("offline for a duration", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "off", Faults: android.Faults{OfflineAfter: 300 * time.Millisecond, OfflineFor: 2 * time.Second}})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		srv.WaitState(t, e.Serial(), "offline", 5*time.Second)
		if _, errOut, code := srv.Run(t, "-s", e.Serial(), "shell", "getprop ro.build.version.sdk"); code == 0 || !strings.Contains(errOut, "offline") {
			t.Errorf("shell while offline: exit %d %q", code, errOut)
		}
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
	})
	t.Run("dropped connection", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "drop", Faults: android.Faults{DropConnectionAfter: 500 * time.Millisecond}})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		// logcat keeps its stream open until the connection goes.
		start := time.Now()
		srv.Run(t, "-s", e.Serial(), "logcat", "-v", "threadtime")
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("logcat outlived the dropped connection by %v", el)
		}
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		if out, _, code := srv.Run(t, "-s", e.Serial(), "shell", "echo", "back"); out != "back\n" || code != 0 {
			t.Errorf("after re-registering: %q exit %d", out, code)
		}
	})
	t.Run("slow replies", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "slow", Faults: android.Faults{SlowReplies: 500 * time.Millisecond}})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		start := time.Now()
		out, _, _ := srv.Run(t, "-s", e.Serial(), "shell", "getprop", "ro.build.version.sdk")
		if el := time.Since(start); el < 500*time.Millisecond || strings.TrimSpace(out) != "34" {
			t.Errorf("slow getprop: %q after %v", out, el)
		}
	})
	t.Run("install failure code", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "full", Faults: android.Faults{InstallFailure: "INSTALL_FAILED_INSUFFICIENT_STORAGE"}})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		out, errOut, code := srv.Run(t, "-s", e.Serial(), "install", apk)
		if code == 0 || !strings.Contains(out+errOut, "Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE") {
			t.Errorf("install: exit %d\n%s%s", code, out, errOut)
		}
		if out, _, _ := srv.Run(t, "-s", e.Serial(), "shell", "pm", "path", "io.appium.settings"); out != "" {
			t.Errorf("a failed install left the package behind: %q", out)
		}
	})
	t.Run("boot never completes", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "noboot", Faults: android.Faults{BootNeverCompletes: true}})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		out, _, _ := srv.Run(t, "-s", e.Serial(), "shell", "getprop sys.boot_completed; getprop init.svc.bootanim")
		if out != "\nrunning\n" {
			t.Errorf("boot props of a never-booting device: %q", out)
		}
	})
	t.Run("slow boot completes", func(t *testing.T) {
		e := launchFaulty(t, srv, android.Profile{Name: "slowboot", BootDuration: 1500 * time.Millisecond})
		srv.WaitState(t, e.Serial(), "device", 5*time.Second)
		if out, _, _ := srv.Run(t, "-s", e.Serial(), "shell", "getprop sys.boot_completed"); out != "\n" {
			t.Errorf("sys.boot_completed while booting: %q", out)
		}
		// Polled (the boot ends 1.5 s after launch, later under load).
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			out, _, _ := srv.Run(t, "-s", e.Serial(), "shell", "getprop sys.boot_completed")
			if out == "1\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sys.boot_completed 15 s after a 1.5 s boot: %q", out)
			}
		}
	})
}
