package appium

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/screengraph/screengraph-agent/agent"
)

func TestCapabilities(t *testing.T) {
	caps, err := Capabilities(CapsConfig{Serial: "emulator-5556", ADBPort: 15037, SystemPort: 8301, NewCommandTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"platformName":                  "Android",
		"appium:automationName":         "UiAutomator2",
		"appium:udid":                   "emulator-5556",
		"appium:suppressKillServer":     true,
		"appium:adbPort":                15037,
		"appium:systemPort":             8301,
		"appium:noReset":                true,
		"appium:newCommandTimeout":      90,
		"appium:skipLogcatCapture":      true,
		"appium:disableWindowAnimation": true,
		"appium:skipUnlock":             true,
		"appium:autoLaunch":             false,
	}
	if d := cmp.Diff(want, caps); d != "" {
		t.Errorf("caps (-want +got):\n%s", d)
	}

	caps, _ = Capabilities(CapsConfig{Serial: "R58M12345", SkipServerInstallation: true, Extra: map[string]any{"appium:noReset": false}})
	if caps["appium:skipServerInstallation"] != true || caps["appium:noReset"] != false || caps["appium:adbPort"] != 5037 ||
		caps["appium:newCommandTimeout"] != int(DefaultNewCommandTimeout/time.Second) {
		t.Errorf("defaults/extra: %v", caps)
	}
	if p, _ := caps["appium:systemPort"].(int); p <= 0 {
		t.Errorf("no systemPort chosen: %v", caps)
	}

	var e *agent.Error
	if _, err := Capabilities(CapsConfig{}); !errors.As(err, &e) || e.ID != agent.ErrInvalidRequest {
		t.Errorf("empty serial: %v", err)
	}
	if _, err := Capabilities(CapsConfig{Serial: "x", ADBPort: 70000}); err == nil {
		t.Error("adb port 70000 accepted")
	}
}

func TestSystemPort(t *testing.T) {
	// Emulators map onto the driver's 8200-8299 range by console port, when free.
	for serial, want := range map[string]int{"emulator-5554": 8200, "emulator-5556": 8201, "emulator-5752": 8299} {
		if !portFree(want) {
			t.Logf("port %d busy on this host; skipping %s", want, serial)
			continue
		}
		if got, err := SystemPort(serial); err != nil || got != want {
			t.Errorf("SystemPort(%s) = %d %v, want %d", serial, got, err, want)
		}
	}
	// A busy mapped port falls back to a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:8202")
	if err == nil {
		defer ln.Close()
		if got, _ := SystemPort("emulator-5558"); got == 8202 || got == 0 {
			t.Errorf("SystemPort for a busy mapped port = %d", got)
		}
	}
	// Out-of-range console ports and USB serials get an OS-chosen free port.
	for _, serial := range []string{"emulator-5754", "emulator-40001", "R58M12345", "127.0.0.1:5555"} {
		got, err := SystemPort(serial)
		if err != nil || (got >= systemPortFirst && got <= systemPortLast) || got == 0 {
			t.Errorf("SystemPort(%s) = %d %v", serial, got, err)
		}
		if !portFree(got) {
			t.Errorf("SystemPort(%s) = %s is not free", serial, strconv.Itoa(got))
		}
	}
}
