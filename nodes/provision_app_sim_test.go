package nodes_test

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/device/artifacts"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
	"github.com/screengraph/screengraph-agent/nodes"
)

const (
	keyA        = "d9077530c262a4f6142fe72ce18ee96204ee8a596bce314c8371e641b3ae5f81" // fixtures/keys/test-a.jks
	settingsKey = "05ee28fa5928913fcbda0b2534e1456966fdd97b08b65059261b17123adcb180" // apksigner verify --print-certs settings_apk-debug.apk
)

// countingDevice wraps the real ADB device and counts what changes or reads
// the installed app.
type countingDevice struct {
	device.Device
	installs, uninstalls, pulls atomic.Int32
}

func (c *countingDevice) Install(ctx context.Context, p string, o device.InstallOptions) error {
	c.installs.Add(1)
	return c.Device.Install(ctx, p, o)
}

func (c *countingDevice) Uninstall(ctx context.Context, pkg string) error {
	c.uninstalls.Add(1)
	return c.Device.Uninstall(ctx, pkg)
}

func (c *countingDevice) Pull(ctx context.Context, remote string, w io.Writer) (int64, error) {
	c.pulls.Add(1)
	return c.Device.Pull(ctx, remote, w)
}

func (c *countingDevice) counts() [3]int32 {
	return [3]int32{c.installs.Load(), c.uninstalls.Load(), c.pulls.Load()}
}

type simEnv struct {
	srv     *simtest.ADBServer
	fetcher *artifacts.Fetcher
	s3      *s3mem.Backend
	s3URL   string
}

func newSimEnv(t *testing.T) *simEnv {
	t.Helper()
	srv := simtest.StartADBServer(t)
	be := s3mem.New()
	hs := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(hs.Close)
	if err := be.CreateBucket("builds"); err != nil {
		t.Fatal(err)
	}
	f, err := artifacts.New(artifacts.Options{CacheDir: t.TempDir(), S3: artifacts.S3Options{Endpoint: hs.URL,
		Region: "us-east-1", AccessKeyID: "test", SecretAccessKey: "test", PathStyle: true, MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &simEnv{srv: srv, fetcher: f, s3: be, s3URL: hs.URL}
}

// launch starts a simulated emulator with the default profile (com.example.app
// versionCode 1 preinstalled, signed with key A), changed by edit.
func (e *simEnv) launch(t *testing.T, edit func(*android.Profile)) *countingDevice {
	t.Helper()
	b, err := fixtures.Profile("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := android.ParseProfile("default", b)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&p)
	}
	em, _, err := sim.Launch(context.Background(), sim.LaunchConfig{ADBServer: e.srv.Addr(), Profile: p, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	e.srv.WaitState(t, em.Serial(), "device", 10*time.Second)
	return &countingDevice{Device: adbdevice.NewADBDevice(adb.New(e.srv.Addr()), em.Serial())}
}

func (e *simEnv) provision(t *testing.T, dev device.Device, cache nodes.VerificationCache, policy nodes.InstallationPolicy, pkg, ref, expected string) (nodes.ProvisionAppOutput, error, []string) {
	t.Helper()
	var lines []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := nodes.ProvisionApp(ctx, nodes.ProvisionAppInput{RunID: "01JTEST",
		ApplicationUnderTestDescriptor: nodes.ApplicationUnderTestDescriptor{AndroidPackageID: pkg,
			APKStorageObjectReference: ref, ExpectedBuildSignatureSHA256: expected},
		InstallationPolicy: policy},
		nodes.Ports{Device: dev, Progress: func(l string) { lines = append(lines, l) }},
		nodes.ProvisionDeps{Artifacts: e.fetcher, Verifications: cache, TempDir: t.TempDir()})
	return out, err, lines
}

// installedVersion asks the device through the adb CLI, independently of the node.
func (e *simEnv) installedVersion(t *testing.T, dev device.Device, pkg string) string {
	t.Helper()
	out, _, _ := e.srv.Run(t, "-s", dev.Serial(), "shell", "cmd", "package", "list", "packages", "--show-versioncode", pkg)
	return strings.TrimSpace(out)
}

func fixtureRef(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "fixtures", "apks", name))
	if err != nil {
		t.Fatal(err)
	}
	return "file://" + p
}

func wantOutcome(t *testing.T, out nodes.ProvisionAppOutput, presence string, vc int64, vn, sig string) {
	t.Helper()
	o := out.ApplicationProvisioningOutcome
	if o == nil || o.AppPresenceStatus != presence || o.SignatureValidationStatus != sig ||
		(vc > 0 && (o.InstalledVersionCode == nil || *o.InstalledVersionCode != vc || *o.InstalledVersionName != vn)) {
		t.Fatalf("outcome %+v, want %s %d %q %s", o, presence, vc, vn, sig)
	}
}

func wantErrID(t *testing.T, err error, id agent.ErrorID, code string) *agent.Error {
	t.Helper()
	e := agent.Classify(err)
	if e == nil || e.ID != id || (code != "" && e.Code != code) || e.Retryable {
		t.Fatalf("err %v, want %s %s not retryable", err, id, code)
	}
	return e
}

// TestProvisionAppThroughRealADB drives ProvisionApp against simulated
// emulators through the real adb server, with artifacts from disk and from an
// in-process S3 (gofakes3).
func TestProvisionAppThroughRealADB(t *testing.T) {
	env := newSimEnv(t)
	v2, err := os.ReadFile(filepath.Join("..", "fixtures", "apks", "demo-v2.apk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.s3.PutObject("builds", "app/demo-v2.apk", map[string]string{}, bytes.NewReader(v2), int64(len(v2)), nil); err != nil {
		t.Fatal(err)
	}
	const pkg = "com.example.app"

	t.Run("s3 demo-v2 over the preinstalled v1, then nothing changed", func(t *testing.T) {
		dev := env.launch(t, nil)
		cache := &nodes.MemoryVerifications{}
		ref := "s3://builds/app/demo-v2.apk"
		out, err, lines := env.provision(t, dev, cache, nodes.ReinstallIfDifferent, pkg, ref, keyA)
		if err != nil {
			t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
		}
		t.Logf("first run:\n%s", strings.Join(lines, "\n"))
		wantOutcome(t, out, nodes.AppPresent, 2, "2.0", nodes.SignatureMatched)
		if c := dev.counts(); c != [3]int32{1, 0, 1} {
			// The preinstalled v1 has no base.apk to pull: one failed pull, then the update.
			t.Errorf("installs/uninstalls/pulls %v, want [1 0 1]", c)
		}
		if got := env.installedVersion(t, dev, pkg); got != "package:com.example.app versionCode:2" {
			t.Errorf("device says %q", got)
		}
		if !hasLine(lines, "download "+ref+": 100%") || !hasLine(lines, "push com.example.app: 100%") {
			t.Errorf("progress lines: %q", lines)
		}
		// Second run, nothing changed: SAME, MATCHED, no pull, no install.
		out, err, lines = env.provision(t, dev, cache, nodes.ReinstallIfDifferent, pkg, ref, keyA)
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, out, nodes.AppPresent, 2, "2.0", nodes.SignatureMatched)
		if c := dev.counts(); c != [3]int32{1, 0, 1} {
			t.Errorf("second run touched the device: %v", c)
		}
		if !hasLine(lines, "install state SAME") || !hasLine(lines, "from the cache") {
			t.Errorf("lines %q", lines)
		}
		// A fresh verification cache: the installed base.apk is pulled through
		// the real adb sync protocol and verified.
		out, err, _ = env.provision(t, dev, &nodes.MemoryVerifications{}, nodes.InstallIfMissing, pkg, ref, keyA)
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, out, nodes.AppPresent, 2, "2.0", nodes.SignatureMatched)
		if c := dev.counts(); c != [3]int32{1, 0, 2} {
			t.Errorf("fresh cache: %v, want one more pull", c)
		}
	})

	t.Run("io.appium.settings", func(t *testing.T) {
		p := filepath.Join("..", ".cache", "appium-home", "node_modules", "appium-uiautomator2-driver",
			"node_modules", "io.appium.settings", "apks", "settings_apk-debug.apk")
		abs, _ := filepath.Abs(p)
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("%s missing: run tools/setup.sh", abs)
		}
		dev := env.launch(t, nil)
		out, err, lines := env.provision(t, dev, nil, nodes.InstallIfMissing, "io.appium.settings", "file://"+abs, settingsKey)
		if err != nil {
			t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
		}
		wantOutcome(t, out, nodes.AppPresent, 191, "8.0.9", nodes.SignatureMatched)
		// Without a cache the rerun pulls the 3 MB base.apk back and verifies it.
		out, err, _ = env.provision(t, dev, nil, nodes.InstallIfMissing, "io.appium.settings", "file://"+abs, settingsKey)
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, out, nodes.AppPresent, 191, "8.0.9", nodes.SignatureMatched)
		if c := dev.counts(); c != [3]int32{1, 0, 1} {
			t.Errorf("installs/uninstalls/pulls %v, want [1 0 1]", c)
		}
	})

	t.Run("signed with another key by apksigner", func(t *testing.T) {
		if _, err := exec.LookPath("apksigner"); err != nil {
			t.Fatal("apksigner is not installed (apt-get install apksigner)")
		}
		resigned := filepath.Join(t.TempDir(), "demo-v2-resigned.apk")
		keys, _ := filepath.Abs(filepath.Join("..", "fixtures", "keys"))
		// Passwords and alias as in fixtures/apks/build.sh.
		cmd := exec.Command("apksigner", "sign", "--ks", filepath.Join(keys, "test-b.jks"), "--ks-pass", "pass:android",
			"--key-pass", "pass:android", "--ks-key-alias", "test", "--out", resigned, filepath.Join("..", "fixtures", "apks", "demo-v2.apk"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apksigner: %v\n%s", err, out)
		}
		dev := env.launch(t, nil)
		for _, pol := range []nodes.InstallationPolicy{nodes.InstallIfMissing, nodes.ReinstallIfDifferent, nodes.AlwaysReinstall} {
			out, err, _ := env.provision(t, dev, nil, pol, pkg, "file://"+resigned, keyA)
			wantErrID(t, err, agent.ErrSignatureMismatch, "")
			wantOutcome(t, out, nodes.AppPresent, 1, "1.0", nodes.SignatureUnverified)
		}
		if c := dev.counts(); c[0] != 0 || c[1] != 0 {
			t.Errorf("installs/uninstalls %v: the device was touched", c)
		}
		if got := env.installedVersion(t, dev, pkg); got != "package:com.example.app versionCode:1" {
			t.Errorf("device says %q", got)
		}
	})

	t.Run("downgrade refused", func(t *testing.T) {
		dev := env.launch(t, nil)
		if _, err, _ := env.provision(t, dev, nil, nodes.InstallIfMissing, pkg, fixtureRef(t, "demo-v2.apk"), keyA); err != nil {
			t.Fatal(err)
		}
		for _, pol := range []nodes.InstallationPolicy{nodes.InstallIfMissing, nodes.ReinstallIfDifferent} {
			out, err, _ := env.provision(t, dev, nil, pol, pkg, fixtureRef(t, "demo-v1.apk"), keyA)
			wantErrID(t, err, agent.ErrVersionDowngrade, "")
			wantOutcome(t, out, nodes.AppPresent, 2, "2.0", nodes.SignatureMatched)
		}
		if c := dev.counts(); c[0] != 1 || c[1] != 0 {
			t.Errorf("installs/uninstalls %v, want only the first install", c)
		}
		// ALWAYS_REINSTALL is the way down: uninstall + install.
		out, err, _ := env.provision(t, dev, nil, nodes.AlwaysReinstall, pkg, fixtureRef(t, "demo-v1.apk"), keyA)
		if err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, out, nodes.AppPresent, 1, "1.0", nodes.SignatureMatched)
		if got := env.installedVersion(t, dev, pkg); got != "package:com.example.app versionCode:1" {
			t.Errorf("device says %q", got)
		}
	})

	t.Run("install failure fault", func(t *testing.T) {
		for _, code := range []string{"INSTALL_FAILED_INSUFFICIENT_STORAGE", "INSTALL_FAILED_NO_MATCHING_ABIS"} {
			dev := env.launch(t, func(p *android.Profile) { p.Faults.InstallFailure = code })
			out, err, _ := env.provision(t, dev, nil, nodes.ReinstallIfDifferent, pkg, fixtureRef(t, "demo-v2.apk"), keyA)
			wantErrID(t, err, agent.ErrInstallFailed, code)
			if !strings.Contains(*out.HumanReadableFailureSummary, code) {
				t.Errorf("summary %q", *out.HumanReadableFailureSummary)
			}
			// The preinstalled build (installed from demo-v1.apk, key A) was verified
			// before the failed update, and is still what the device runs.
			wantOutcome(t, out, nodes.AppPresent, 1, "1.0", nodes.SignatureMatched)
		}
	})

	t.Run("not installed and NEVER_INSTALL", func(t *testing.T) {
		dev := env.launch(t, func(p *android.Profile) { p.Preinstalled = nil })
		out, err, _ := env.provision(t, dev, nil, nodes.NeverInstall, pkg, "", keyA)
		wantErrID(t, err, agent.ErrInvalidRequest, nodes.NotInstalledCode)
		wantOutcome(t, out, nodes.AppAbsent, 0, "", nodes.SignatureUnverified)
	})
}

func hasLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
