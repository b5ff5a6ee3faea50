package appium

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// CapsConfig describes the one device a session is for.
type CapsConfig struct {
	// Serial is the adb serial (e.g. "emulator-5554"); required.
	Serial string
	// ADBPort is the port of the adb server the device is attached to; 0 means 5037.
	ADBPort int
	// SystemPort is the host port forwarded to the on-device UiAutomator2 server
	// (device port 6790); 0 means SystemPort(Serial).
	SystemPort int
	// NewCommandTimeout is how long Appium keeps an idle session; 0 means
	// DefaultNewCommandTimeout. Appium counts whole seconds.
	NewCommandTimeout time.Duration
	// SkipServerInstallation skips installing the UiAutomator2 server APKs: set
	// only when the caller knows the right versions are on the device (a warm
	// device whose previous session this daemon created).
	SkipServerInstallation bool
	// Extra capabilities, added last (names must carry the "appium:" prefix
	// unless W3C-standard); they may override the ones above.
	Extra map[string]any
}

// DefaultNewCommandTimeout keeps a reused session alive across the gaps between
// nodes and between runs (Appium's own default is 60 s, shorter than a paused run).
const DefaultNewCommandTimeout = 10 * time.Minute

// Capabilities is the capability set the agent uses on a shared host (the
// alwaysMatch object of POST /session). Each entry, and why:
//
//	platformName                Android           W3C standard; selects the platform
//	appium:automationName       UiAutomator2      the driver installed in APPIUM_HOME
//	appium:udid                 Serial            pins the session to this device, never "the first one"
//	appium:suppressKillServer   true              never kill/restart the adb server other runs share
//	appium:adbPort              ADBPort           the adb server the daemon uses, not the default one
//	appium:systemPort           per device        a fixed host port per device, so parallel sessions never race for 8200-8299
//	appium:noReset              true              the agent's ProvisionApp owns install/clear; Appium must not reset app data
//	appium:newCommandTimeout    seconds           a reused session must outlive the idle gaps between nodes
//	appium:skipLogcatCapture    true              no long-lived `adb logcat` stream per session on the shared adb server
//	appium:disableWindowAnimation true            instrumentation runs with --no-window-animation: steadier idle detection
//	appium:skipUnlock           true              EnsureDevice checks the device itself; skip the driver's lock screen dance
//	appium:autoLaunch           false             the agent launches the app itself (LaunchOrAttach)
//	appium:skipServerInstallation (when told)     skip reinstalling the UiAutomator2 server APKs on a warm device
//
// Errors: invalid_request_error when Serial is empty or a port is out of range.
func Capabilities(cfg CapsConfig) (map[string]any, error) {
	if cfg.Serial == "" {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "appium: capabilities need a device serial")
	}
	adbPort := cfg.ADBPort
	if adbPort == 0 {
		adbPort = 5037
	}
	if adbPort < 1 || adbPort > 65535 {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "appium: adb server port %d out of range", adbPort)
	}
	sysPort := cfg.SystemPort
	if sysPort == 0 {
		p, err := SystemPort(cfg.Serial)
		if err != nil {
			return nil, err
		}
		sysPort = p
	}
	if sysPort < 1 || sysPort > 65535 {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "appium: systemPort %d out of range", sysPort)
	}
	nct := cfg.NewCommandTimeout
	if nct <= 0 {
		nct = DefaultNewCommandTimeout
	}
	caps := map[string]any{
		"platformName":                  "Android",
		"appium:automationName":         "UiAutomator2",
		"appium:udid":                   cfg.Serial,
		"appium:suppressKillServer":     true,
		"appium:adbPort":                adbPort,
		"appium:systemPort":             sysPort,
		"appium:noReset":                true,
		"appium:newCommandTimeout":      int(nct / time.Second),
		"appium:skipLogcatCapture":      true,
		"appium:disableWindowAnimation": true,
		"appium:skipUnlock":             true,
		"appium:autoLaunch":             false,
	}
	if cfg.SkipServerInstallation {
		caps["appium:skipServerInstallation"] = true
	}
	for k, v := range cfg.Extra {
		caps[k] = v
	}
	return caps, nil
}

// The uiautomator2 driver picks a free port in 8200-8299 itself
// (appium-uiautomator2-driver lib/uiautomator2-server/session.ts DEVICE_PORT_RANGE),
// guarded only inside one Appium process.
const (
	systemPortFirst = 8200
	systemPortLast  = 8299
)

var emulatorSerial = regexp.MustCompile(`^emulator-(\d+)$`)

// SystemPort chooses the appium:systemPort for serial. An emulator
// ("emulator-<console port>", console ports 5554, 5556, … 5752) gets
// 8200 + (port-5554)/2: the same port every time, distinct per emulator, in the
// driver's own range, so two Appium servers on one host never pick the same one.
// Other serials (USB devices, emulators with other console ports, the simulator
// on test ports) get a port the OS reports free now; a clash later is possible
// but detected by the driver's `adb forward`. Errors: internal_error when no
// port can be had.
func SystemPort(serial string) (int, error) {
	if m := emulatorSerial.FindStringSubmatch(serial); m != nil {
		console, _ := strconv.Atoi(m[1])
		if console >= 5554 && console%2 == 0 {
			if p := systemPortFirst + (console-5554)/2; p <= systemPortLast && portFree(p) {
				return p, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, agent.Wrap(agent.ErrInternal, err, "appium: choose a systemPort for %s", serial)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func portFree(p int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
