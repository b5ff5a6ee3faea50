package simtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildSDK  string
	buildErr  error
)

// BuildEmulator builds the simulated emulator (emulator/sim/cmd/emulator) as
// <sdk>/emulator/emulator, where the Android SDK keeps the real one, and
// returns <sdk>: point ANDROID_SDK_ROOT / ANDROID_HOME (or the lifecycle
// code's emulator path) at it. It is built once per test process, into a
// directory left in the system temp dir (the binary is shared by tests).
func BuildEmulator(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		sdk, err := os.MkdirTemp("", "simsdk-")
		if err != nil {
			buildErr = err
			return
		}
		out := filepath.Join(sdk, "emulator", "emulator")
		cmd := exec.Command("go", "build", "-o", out, "./emulator/sim/cmd/emulator")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./emulator/sim/cmd/emulator: %v\n%s", err, b)
			return
		}
		buildSDK = sdk
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildSDK
}

// AVD describes an AVD for CreateAVD.
type AVD struct {
	Name string
	// APILevel goes into image.sysdir.1 and target (34 when zero).
	APILevel int
	// Profile is the simulator profile (config.ini screengraph.simProfile): a
	// shipped profile's name or a file path; "" means "default".
	Profile string
	// Config are extra config.ini lines (key -> value), e.g. hw.lcd.density.
	Config map[string]string
}

// CreateAVD writes an AVD under avdHome the way `avdmanager create avd` lays
// it out: <avdHome>/<name>.ini (path=, path.rel=, target=) and
// <avdHome>/<name>.avd/config.ini. It returns the .avd directory.
func CreateAVD(t testing.TB, avdHome string, a AVD) string {
	t.Helper()
	api := a.APILevel
	if api == 0 {
		api = 34
	}
	dir := filepath.Join(avdHome, a.Name+".avd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf("avd.ini.encoding=UTF-8\npath=%s\npath.rel=avd/%s.avd\ntarget=android-%d\n", dir, a.Name, api)
	if err := os.WriteFile(filepath.Join(avdHome, a.Name+".ini"), []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "AvdId=%s\navd.ini.displayname=%s\nabi.type=x86_64\nhw.cpu.arch=x86_64\n", a.Name, strings.ReplaceAll(a.Name, "_", " "))
	fmt.Fprintf(&b, "image.sysdir.1=system-images/android-%d/google_apis/x86_64/\ntag.id=google_apis\n", api)
	if a.Profile != "" {
		fmt.Fprintf(&b, "screengraph.simProfile=%s\n", a.Profile)
	}
	for k, v := range a.Config {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.ini"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// EmulatorEnv is the environment to run the simulated emulator binary with:
// HOME (console token file, ~/.android), ANDROID_AVD_HOME, and the adb
// server's port with the emulator port scan off.
func (s *ADBServer) EmulatorEnv(home, avdHome string) []string {
	env := []string{}
	for _, kv := range s.Env() {
		if strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "ANDROID_AVD_HOME=") {
			continue
		}
		env = append(env, kv)
	}
	// Emulators booted by the lifecycle code take console ports above 20000
	// (a range per test process), never the 5554.. a developer's emulators use.
	base := 20000 + (os.Getpid()%400)*100
	return append(env, "HOME="+home, "ANDROID_AVD_HOME="+avdHome,
		fmt.Sprintf("SCREENGRAPH_EMULATOR_PORTS=%d-%d", base, base+98))
}
