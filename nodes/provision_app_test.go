package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	droid "github.com/screengraph/screengraph-agent/device/android"
	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

const (
	provSignerA = "d9077530c262a4f6142fe72ce18ee96204ee8a596bce314c8371e641b3ae5f81" // fixtures/keys/test-a.jks
	provSignerB = "0290f3a5d168bf7756e2f4e2c874a70dd97d9fbfbee525acf95b1cc3cb508bf8" // fixtures/keys/test-b.jks
	provPkg     = "com.example.app"
)

func provAPK(name string) string { return filepath.Join("..", "fixtures", "apks", name) }

// --- scripted fakes -------------------------------------------------------------

// provInstalled is the package as the fake package manager records it.
type provInstalled struct {
	vc       int64
	vn       string
	apk      []byte // base.apk bytes; nil: pull fails (like a preinstalled app without an APK)
	signers  []string
	updated  time.Time
	codePath string
}

// provInstallStep scripts one Install call: err is returned; land says whether
// the APK is installed anyway (an offline blip after the commit).
type provInstallStep struct {
	err  error
	land bool
}

// provDevice answers the shell commands ProvisionApp sends with outputs in the
// formats of real Android (dumpsys from the API 34 capture in
// fixtures/captures/dumpsys-package) and models pm install's checks.
type provDevice struct {
	mu       sync.Mutex
	pkg      string
	api      int
	app      *provInstalled
	steps    []provInstallStep
	installs []device.InstallOptions
	uninst   int
	pulls    int
	shells   []string
	clock    time.Time
	n        int
}

func (d *provDevice) Serial() string { return "emulator-5554" }

func (d *provDevice) State(context.Context) (string, error) { return "device", nil }

var provDumpsys = func() string {
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "captures", "dumpsys-package", "api34-emulator-adb-installed.txt"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func (d *provDevice) Shell(_ context.Context, cmd string) (device.ShellResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.shells = append(d.shells, cmd)
	// A `;` list with "echo MARKER $?" between its commands (ReadDeviceApp's),
	// run as sh would: each command's output, the marker with its status.
	sep := "; echo " + droid.ProvisionSplit + " $?; "
	if strings.Contains(cmd, sep) {
		var r device.ShellResult
		for i, c := range strings.Split(cmd, sep) {
			if i > 0 {
				r.Stdout += fmt.Sprintf("%s %d\n", droid.ProvisionSplit, r.ExitCode)
			}
			one := d.shellOne(c)
			r.Stdout += one.Stdout
			r.Stderr += one.Stderr
			r.ExitCode = one.ExitCode
		}
		return r, nil
	}
	return d.shellOne(cmd), nil
}

// shellOne answers one command of Shell.
func (d *provDevice) shellOne(cmd string) device.ShellResult {
	switch cmd {
	case "getprop ro.build.version.sdk":
		return device.ShellResult{Stdout: fmt.Sprintf("%d\n", d.api)}
	case "cmd package list packages --show-versioncode " + d.pkg:
		if d.app == nil {
			return device.ShellResult{}
		}
		return device.ShellResult{Stdout: fmt.Sprintf("package:%s versionCode:%d\n", d.pkg, d.app.vc)}
	case "pm path " + d.pkg:
		if d.app == nil {
			return device.ShellResult{ExitCode: 1}
		}
		return device.ShellResult{Stdout: "package:" + d.app.codePath + "/base.apk\n"}
	case "dumpsys package " + d.pkg:
		if d.app == nil {
			return device.ShellResult{Stdout: "Dexopt state:\n  Unable to find package: " + d.pkg + "\n"}
		}
		s := strings.ReplaceAll(provDumpsys, "com.example.foodies", d.pkg)
		s = strings.Replace(s, "versionCode=1 minSdk", fmt.Sprintf("versionCode=%d minSdk", d.app.vc), 1)
		s = strings.Replace(s, "versionName=1.0", "versionName="+d.app.vn, 1)
		s = strings.Replace(s, "lastUpdateTime=2025-05-22 04:17:19", "lastUpdateTime="+d.app.updated.Format("2006-01-02 15:04:05"), 1)
		s = regexp.MustCompile(`codePath=\S+`).ReplaceAllString(s, "codePath="+d.app.codePath)
		return device.ShellResult{Stdout: s}
	}
	return device.ShellResult{Stderr: "/system/bin/sh: unexpected: not found", ExitCode: 127}
}

func provInstallFailed(code string) error {
	return &agent.Error{ID: agent.ErrInstallFailed, Code: code, Msg: code}
}

func (d *provDevice) Install(_ context.Context, local string, opt device.InstallOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.installs = append(d.installs, opt)
	step := provInstallStep{}
	if len(d.steps) > 0 {
		step, d.steps = d.steps[0], d.steps[1:]
	}
	if step.err != nil && !step.land {
		return step.err
	}
	data, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	info, err := apk.Inspect(local, d.api)
	if err != nil {
		return provInstallFailed("INSTALL_PARSE_FAILED_NO_CERTIFICATES")
	}
	if opt.Progress != nil {
		opt.Progress((int64(len(data))+1)/2, int64(len(data))) // half, rounded up: "50%" for any size
		opt.Progress(int64(len(data)), int64(len(data)))
	}
	if d.app != nil {
		// PackageManagerService's order: replace, downgrade, signers.
		if !opt.Replace {
			return provInstallFailed("INSTALL_FAILED_ALREADY_EXISTS")
		}
		if info.VersionCode < d.app.vc && !opt.AllowDowngrade {
			return provInstallFailed("INSTALL_FAILED_VERSION_DOWNGRADE")
		}
		if !apk.SameSigners(info.SignerSHA256, d.app.signers) {
			return provInstallFailed("INSTALL_FAILED_UPDATE_INCOMPATIBLE")
		}
	}
	if info.TestOnly && !opt.AllowTestOnly {
		return provInstallFailed("INSTALL_FAILED_TEST_ONLY")
	}
	d.n++
	d.clock = d.clock.Add(time.Second)
	d.app = &provInstalled{vc: info.VersionCode, vn: info.VersionName, apk: data, signers: info.SignerSHA256,
		updated: d.clock, codePath: fmt.Sprintf("/data/app/~~install%d==/%s-x==", d.n, d.pkg)}
	return step.err
}

func (d *provDevice) Uninstall(_ context.Context, pkg string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.uninst++
	if d.app == nil {
		return &agent.Error{ID: agent.ErrInstallFailed, Code: "DELETE_FAILED_INTERNAL_ERROR"}
	}
	d.app = nil
	return nil
}

func (d *provDevice) Pull(_ context.Context, remote string, w io.Writer) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pulls++
	if d.app == nil || d.app.apk == nil || remote != d.app.codePath+"/base.apk" {
		return 0, agent.Errorf(agent.ErrProcess, "remote object '%s' does not exist", remote)
	}
	n, err := io.Copy(w, bytes.NewReader(d.app.apk))
	return n, err
}

// provDeviceWith returns a device with the given fixture installed (as if
// from its APK) or claiming versionCode vc with the fixture's bytes.
func provDeviceWith(t *testing.T, fixture string, vc int64) *provDevice {
	t.Helper()
	d := &provDevice{pkg: provPkg, api: 34, clock: time.Date(2025, 5, 22, 4, 17, 19, 0, time.UTC)}
	if fixture == "" {
		return d
	}
	data, err := os.ReadFile(provAPK(fixture))
	if err != nil {
		t.Fatal(err)
	}
	info, err := apk.Inspect(provAPK(fixture), 34)
	if err != nil {
		t.Fatal(err)
	}
	if vc == 0 {
		vc = info.VersionCode
	}
	d.app = &provInstalled{vc: vc, vn: info.VersionName, apk: data, signers: info.SignerSHA256, updated: d.clock,
		codePath: "/data/app/~~pre==/" + provPkg + "-pre=="}
	return d
}

// provFetcher serves refs "fixture:NAME" from fixtures/apks and inspects with
// the real apk.Inspect.
type provFetcher struct {
	fetches  int
	inspects int
	err      error
}

func (f *provFetcher) Fetch(_ context.Context, ref string, progress func(done, total int64)) (apk.Artifact, error) {
	f.fetches++
	if f.err != nil {
		return apk.Artifact{}, f.err
	}
	p := provAPK(strings.TrimPrefix(ref, "fixture:"))
	st, err := os.Stat(p)
	if err != nil {
		return apk.Artifact{}, agent.Wrap(agent.ErrArtifactUnavailable, err, "%s", ref)
	}
	if progress != nil {
		progress(st.Size(), st.Size())
	}
	return apk.Artifact{Ref: ref, Path: p, SHA256: "test", Size: st.Size()}, nil
}

func (f *provFetcher) Inspect(path string, apiLevel int) (apk.Info, error) {
	f.inspects++
	return apk.Inspect(path, apiLevel)
}

type provisionCase struct {
	policy    InstallationPolicy
	installed string // fixture installed on the device, "" none
	vc        int64  // override the installed versionCode (0 = the fixture's)
	artifact  string // fixture the ref points at
	expected  string
}

func runProvision(t *testing.T, c provisionCase, d *provDevice, f *provFetcher, cache VerificationCache) (ProvisionAppOutput, error, []string) {
	t.Helper()
	var lines []string
	in := ProvisionAppInput{RunID: "01J", ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{
		AndroidPackageID: provPkg, APKStorageObjectReference: "fixture:" + c.artifact, ExpectedBuildSignatureSHA256: c.expected},
		InstallationPolicy: c.policy}
	if c.artifact == "" {
		in.ApplicationUnderTestDescriptor.APKStorageObjectReference = ""
	}
	p := Ports{Device: d, Progress: func(l string) { lines = append(lines, l) },
		Sleep: func(context.Context, time.Duration) error { return nil }}
	out, err := ProvisionApp(context.Background(), in, p, ProvisionDeps{Artifacts: f, Verifications: cache, TempDir: t.TempDir()})
	return out, err, lines
}

// TestProvisionDecisionTable runs every policy against every installed state.
func TestProvisionDecisionTable(t *testing.T) {
	type want struct {
		errID      agent.ErrorID
		installs   int
		uninstalls int
		finalVC    int64 // 0 = absent
		sig        string
		fetched    bool
	}
	cases := []struct {
		name string
		c    provisionCase
		w    want
	}{
		{"IIM/not-installed", provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, want{"", 1, 0, 2, SignatureMatched, true}},
		{"IIM/older", provisionCase{InstallIfMissing, "demo-v1.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 0, 2, SignatureMatched, true}},
		{"IIM/same", provisionCase{InstallIfMissing, "demo-v2.apk", 0, "demo-v2.apk", provSignerA}, want{"", 0, 0, 2, SignatureMatched, true}},
		{"IIM/same-other-signer", provisionCase{InstallIfMissing, "demo-v2-keyb.apk", 0, "demo-v2.apk", provSignerA}, want{agent.ErrSignatureMismatch, 0, 0, 2, SignatureMismatched, true}},
		{"IIM/same-other-signer-no-expected", provisionCase{InstallIfMissing, "demo-v2-keyb.apk", 0, "demo-v2.apk", ""}, want{agent.ErrSignatureMismatch, 0, 0, 2, SignatureUnverified, true}},
		{"IIM/newer", provisionCase{InstallIfMissing, "demo-v2.apk", 0, "demo-v1.apk", provSignerA}, want{agent.ErrVersionDowngrade, 0, 0, 2, SignatureMatched, true}},
		{"RID/not-installed", provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, want{"", 1, 0, 2, SignatureMatched, true}},
		{"RID/older", provisionCase{ReinstallIfDifferent, "demo-v1.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 0, 2, SignatureMatched, true}},
		{"RID/same", provisionCase{ReinstallIfDifferent, "demo-v2.apk", 0, "demo-v2.apk", provSignerA}, want{"", 0, 0, 2, SignatureMatched, true}},
		{"RID/same-other-signer", provisionCase{ReinstallIfDifferent, "demo-v2-keyb.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 1, 2, SignatureMatched, true}},
		{"RID/newer", provisionCase{ReinstallIfDifferent, "demo-v2.apk", 0, "demo-v1.apk", provSignerA}, want{agent.ErrVersionDowngrade, 0, 0, 2, SignatureMatched, true}},
		{"AR/not-installed", provisionCase{AlwaysReinstall, "", 0, "demo-v2.apk", provSignerA}, want{"", 1, 0, 2, SignatureMatched, true}},
		{"AR/older", provisionCase{AlwaysReinstall, "demo-v1.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 1, 2, SignatureMatched, true}},
		{"AR/same", provisionCase{AlwaysReinstall, "demo-v2.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 1, 2, SignatureMatched, true}},
		{"AR/same-other-signer", provisionCase{AlwaysReinstall, "demo-v2-keyb.apk", 0, "demo-v2.apk", provSignerA}, want{"", 1, 1, 2, SignatureMatched, true}},
		{"AR/newer", provisionCase{AlwaysReinstall, "demo-v2.apk", 0, "demo-v1.apk", provSignerA}, want{"", 1, 1, 1, SignatureMatched, true}},
		{"NI/not-installed", provisionCase{NeverInstall, "", 0, "", provSignerA}, want{agent.ErrInvalidRequest, 0, 0, 0, SignatureUnverified, false}},
		{"NI/present", provisionCase{NeverInstall, "demo-v1.apk", 0, "", provSignerA}, want{"", 0, 0, 1, SignatureMatched, false}},
		{"NI/present-with-ref", provisionCase{NeverInstall, "demo-v1.apk", 0, "demo-v2.apk", provSignerA}, want{"", 0, 0, 1, SignatureMatched, false}},
		{"NI/other-signer", provisionCase{NeverInstall, "demo-v2-keyb.apk", 0, "", provSignerA}, want{agent.ErrSignatureMismatch, 0, 0, 2, SignatureMismatched, false}},
		{"NI/no-expected", provisionCase{NeverInstall, "demo-v1.apk", 0, "", ""}, want{"", 0, 0, 1, SignatureUnverified, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := provDeviceWith(t, tc.c.installed, tc.c.vc)
			f := &provFetcher{}
			out, err, lines := runProvision(t, tc.c, d, f, &MemoryVerifications{})
			e := agent.Classify(err)
			switch {
			case tc.w.errID == "" && err != nil:
				t.Fatalf("err %v\n%s", err, strings.Join(lines, "\n"))
			case tc.w.errID != "" && (e == nil || e.ID != tc.w.errID):
				t.Fatalf("err %v, want %s", err, tc.w.errID)
			}
			if e != nil && e.Retryable {
				t.Errorf("%s reported retryable", e.ID)
			}
			if len(d.installs) != tc.w.installs || d.uninst != tc.w.uninstalls {
				t.Errorf("installs %d uninstalls %d, want %d %d", len(d.installs), d.uninst, tc.w.installs, tc.w.uninstalls)
			}
			if (f.fetches > 0) != tc.w.fetched {
				t.Errorf("fetches %d", f.fetches)
			}
			o := out.ApplicationProvisioningOutcome
			if o == nil {
				t.Fatal("no outcome")
			}
			if tc.w.finalVC == 0 {
				if o.AppPresenceStatus != AppAbsent || o.InstalledVersionCode != nil {
					t.Errorf("outcome %+v, want ABSENT", o)
				}
			} else if o.AppPresenceStatus != AppPresent || o.InstalledVersionCode == nil || *o.InstalledVersionCode != tc.w.finalVC {
				t.Errorf("outcome %+v, want PRESENT versionCode %d", o, tc.w.finalVC)
			}
			if o.SignatureValidationStatus != tc.w.sig {
				t.Errorf("signatureValidationStatus %s, want %s", o.SignatureValidationStatus, tc.w.sig)
			}
			// The node's Common says the same as err.
			if (err != nil) != out.Failed() || (err != nil && *out.ErrorID != e.ID) {
				t.Errorf("common %+v vs err %v", out.Common, err)
			}
			for _, opt := range d.installs {
				if opt.AllowDowngrade {
					t.Error("never installs with -d")
				}
			}
			// The output satisfies its schema.
			raw := provJSON(t, out)
			if _, err := ValidateOutput(NodeProvisionApp, raw, ModeStrict); err != nil {
				t.Errorf("output schema: %v\n%s", err, raw)
			}
		})
	}
}

func TestProvisionArtifactSignedByAnotherKeyInstallsNothing(t *testing.T) {
	for _, pol := range []InstallationPolicy{InstallIfMissing, ReinstallIfDifferent, AlwaysReinstall} {
		for _, installed := range []string{"", "demo-v1.apk"} {
			d := provDeviceWith(t, installed, 0)
			out, err, _ := runProvision(t, provisionCase{pol, installed, 0, "demo-v2-keyb.apk", provSignerA}, d, &provFetcher{}, nil)
			e := agent.Classify(err)
			if e == nil || e.ID != agent.ErrSignatureMismatch || e.Retryable {
				t.Fatalf("%s/%q: err %v", pol, installed, err)
			}
			if len(d.installs) != 0 || d.uninst != 0 || d.pulls != 0 {
				t.Errorf("%s/%q: device touched: %d installs %d uninstalls %d pulls", pol, installed, len(d.installs), d.uninst, d.pulls)
			}
			if !strings.Contains(e.Msg, provSignerB) || !strings.Contains(e.Msg, "nothing installed") {
				t.Errorf("message %q", e.Msg)
			}
			if installed == "" && out.ApplicationProvisioningOutcome.AppPresenceStatus != AppAbsent {
				t.Errorf("outcome %+v", out.ApplicationProvisioningOutcome)
			}
		}
	}
}

func TestProvisionVerificationCacheSkipsPull(t *testing.T) {
	d := provDeviceWith(t, "demo-v2.apk", 0)
	cache := &MemoryVerifications{}
	c := provisionCase{ReinstallIfDifferent, "demo-v2.apk", 0, "demo-v2.apk", provSignerA}
	if _, err, _ := runProvision(t, c, d, &provFetcher{}, cache); err != nil || d.pulls != 1 {
		t.Fatalf("first run: %v, pulls %d", err, d.pulls)
	}
	out, err, lines := runProvision(t, c, d, &provFetcher{}, cache)
	if err != nil || d.pulls != 1 || len(d.installs) != 0 {
		t.Fatalf("second run: %v, pulls %d installs %d", err, d.pulls, len(d.installs))
	}
	if out.ApplicationProvisioningOutcome.SignatureValidationStatus != SignatureMatched || !provHasLine(lines, "verification cache") {
		t.Errorf("outcome %+v lines %q", out.ApplicationProvisioningOutcome, lines)
	}
	// Someone reinstalls the same version with key B: lastUpdateTime and
	// codePath change, so the cache does not answer and the pull finds B.
	keyb, _ := os.ReadFile(provAPK("demo-v2-keyb.apk"))
	d.app = &provInstalled{vc: 2, vn: "2.0", apk: keyb, signers: []string{provSignerB}, updated: d.clock.Add(time.Hour), codePath: "/data/app/~~other==/x"}
	_, err, _ = runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, cache)
	if e := agent.Classify(err); e == nil || e.ID != agent.ErrSignatureMismatch || d.pulls != 2 {
		t.Errorf("after a change: %v, pulls %d", err, d.pulls)
	}
	// An install records the new build's signer: the next run pulls nothing.
	d2 := provDeviceWith(t, "", 0)
	cache2 := &MemoryVerifications{}
	runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, d2, &provFetcher{}, cache2)
	runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, d2, &provFetcher{}, cache2)
	if len(d2.installs) != 1 || d2.pulls != 0 {
		t.Errorf("install then rerun: installs %d pulls %d", len(d2.installs), d2.pulls)
	}
}

func TestProvisionInstallFailures(t *testing.T) {
	t.Run("insufficient-storage", func(t *testing.T) {
		d := provDeviceWith(t, "", 0)
		d.steps = []provInstallStep{{err: provInstallFailed("INSTALL_FAILED_INSUFFICIENT_STORAGE")}}
		out, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, &provFetcher{}, nil)
		e := agent.Classify(err)
		if e == nil || e.ID != agent.ErrInstallFailed || e.Code != "INSTALL_FAILED_INSUFFICIENT_STORAGE" || e.Retryable {
			t.Fatalf("err %v", err)
		}
		if !strings.Contains(*out.HumanReadableFailureSummary, "INSTALL_FAILED_INSUFFICIENT_STORAGE") ||
			!strings.Contains(*out.HumanReadableFailureSummary, "free space") {
			t.Errorf("summary %q", *out.HumanReadableFailureSummary)
		}
		if out.ApplicationProvisioningOutcome.AppPresenceStatus != AppAbsent {
			t.Errorf("outcome %+v", out.ApplicationProvisioningOutcome)
		}
	})
	t.Run("other-code", func(t *testing.T) {
		d := provDeviceWith(t, "", 0)
		d.steps = []provInstallStep{{err: provInstallFailed("INSTALL_FAILED_NO_MATCHING_ABIS")}}
		_, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, &provFetcher{}, nil)
		if e := agent.Classify(err); e == nil || e.ID != agent.ErrInstallFailed || e.Code != "INSTALL_FAILED_NO_MATCHING_ABIS" {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("already-exists-is-success", func(t *testing.T) {
		d := provDeviceWith(t, "", 0)
		d.steps = []provInstallStep{{err: provInstallFailed("INSTALL_FAILED_ALREADY_EXISTS"), land: true}}
		out, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
		if err != nil || *out.ApplicationProvisioningOutcome.InstalledVersionCode != 2 {
			t.Fatalf("err %v outcome %+v", err, out.ApplicationProvisioningOutcome)
		}
	})
	t.Run("offline-after-commit", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		d.steps = []provInstallStep{{err: agent.Errorf(agent.ErrDeviceOffline, "device offline"), land: true}}
		_, err, lines := runProvision(t, provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
		if err != nil || len(d.installs) != 1 || !provHasLine(lines, "landed") {
			t.Fatalf("err %v installs %d lines %q", err, len(d.installs), lines)
		}
	})
	t.Run("offline-before-commit-retried-once", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		d.steps = []provInstallStep{{err: agent.Errorf(agent.ErrDeviceOffline, "device offline")}}
		_, err, _ := runProvision(t, provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
		if err != nil || len(d.installs) != 2 {
			t.Fatalf("err %v installs %d", err, len(d.installs))
		}
	})
	t.Run("offline-twice-fails", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		off := agent.Errorf(agent.ErrDeviceOffline, "device offline")
		off.Retryable = true
		d.steps = []provInstallStep{{err: off}, {err: off}, {err: off}}
		_, err, _ := runProvision(t, provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
		if e := agent.Classify(err); e == nil || e.ID != agent.ErrDeviceOffline || !e.Retryable || len(d.installs) != 2 {
			t.Fatalf("err %v installs %d", err, len(d.installs))
		}
	})
	t.Run("uninstalled-then-install-fails-reports-absent", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v2-keyb.apk", 0)
		d.steps = []provInstallStep{{err: provInstallFailed("INSTALL_FAILED_INSUFFICIENT_STORAGE")}}
		out, err, _ := runProvision(t, provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
		if e := agent.Classify(err); e == nil || e.Code != "INSTALL_FAILED_INSUFFICIENT_STORAGE" || d.uninst != 1 {
			t.Fatalf("err %v uninstalls %d", err, d.uninst)
		}
		if o := out.ApplicationProvisioningOutcome; o.AppPresenceStatus != AppAbsent {
			t.Errorf("outcome %+v: the uninstall must be reported", o)
		}
	})
	t.Run("pm-downgrade-refusal", func(t *testing.T) {
		// The device's state changed between the read and the install.
		d := provDeviceWith(t, "demo-v1.apk", 0)
		d.steps = []provInstallStep{{err: provInstallFailed("INSTALL_FAILED_VERSION_DOWNGRADE")}}
		_, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, &provFetcher{}, nil)
		if e := agent.Classify(err); e == nil || e.ID != agent.ErrVersionDowngrade || e.Code != "INSTALL_FAILED_VERSION_DOWNGRADE" {
			t.Fatalf("err %v", err)
		}
	})
}

func TestProvisionUnknownInstalledSigner(t *testing.T) {
	// Installed v1 signed with key B whose base.apk cannot be pulled.
	mk := func() *provDevice {
		d := provDeviceWith(t, "demo-v2-keyb.apk", 1)
		d.app.apk = nil
		return d
	}
	d := mk()
	out, err, _ := runProvision(t, provisionCase{NeverInstall, "", 0, "", provSignerA}, d, &provFetcher{}, nil)
	if err != nil || out.ApplicationProvisioningOutcome.SignatureValidationStatus != SignatureUnverified {
		t.Fatalf("NEVER_INSTALL: %v %+v", err, out.ApplicationProvisioningOutcome)
	}
	// REINSTALL_IF_DIFFERENT updates; pm refuses the signer change; uninstall + install.
	d = mk()
	out, err, _ = runProvision(t, provisionCase{ReinstallIfDifferent, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
	if err != nil || len(d.installs) != 2 || d.uninst != 1 || out.ApplicationProvisioningOutcome.SignatureValidationStatus != SignatureMatched {
		t.Fatalf("RID: %v installs %d uninstalls %d %+v", err, len(d.installs), d.uninst, out.ApplicationProvisioningOutcome)
	}
	// INSTALL_IF_MISSING tries the update and reports pm's refusal.
	d = mk()
	_, err, _ = runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", provSignerA}, d, &provFetcher{}, nil)
	if e := agent.Classify(err); e == nil || e.Code != "INSTALL_FAILED_UPDATE_INCOMPATIBLE" || d.uninst != 0 {
		t.Fatalf("IIM: %v uninstalls %d", err, d.uninst)
	}
}

func TestProvisionInvalidInputs(t *testing.T) {
	for name, c := range map[string]ProvisionAppInput{
		"no-package":    {ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{APKStorageObjectReference: "fixture:demo-v2.apk"}},
		"bad-digest":    {ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{AndroidPackageID: provPkg, APKStorageObjectReference: "fixture:demo-v2.apk", ExpectedBuildSignatureSHA256: "ab12"}},
		"no-ref":        {ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{AndroidPackageID: provPkg}, InstallationPolicy: ReinstallIfDifferent},
		"bad-policy":    {ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{AndroidPackageID: provPkg, APKStorageObjectReference: "fixture:demo-v2.apk"}, InstallationPolicy: "SOMETIMES"},
		"wrong-package": {ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{AndroidPackageID: provPkg, APKStorageObjectReference: "fixture:demo-testonly.apk"}},
	} {
		d := provDeviceWith(t, "", 0)
		out, err := ProvisionApp(context.Background(), c, Ports{Device: d}, ProvisionDeps{Artifacts: &provFetcher{}})
		if e := agent.Classify(err); e == nil || e.ID != agent.ErrInvalidRequest || e.Retryable || len(d.installs) != 0 {
			t.Errorf("%s: err %v installs %d", name, err, len(d.installs))
		}
		if !out.Failed() {
			t.Errorf("%s: common %+v", name, out.Common)
		}
	}
	// Keytool's colon form of the digest is accepted.
	d := provDeviceWith(t, "", 0)
	colon := strings.ToUpper(regexp.MustCompile(`(..)`).ReplaceAllString(provSignerA, "$1:"))
	_, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", strings.TrimSuffix(colon, ":")}, d, &provFetcher{}, nil)
	if err != nil {
		t.Errorf("colon digest: %v", err)
	}
}

func TestProvisionTestOnlyAndProgress(t *testing.T) {
	d := provDeviceWith(t, "", 0)
	d.pkg = "com.example.testonly"
	in := ProvisionAppInput{RunID: "01J", ApplicationUnderTestDescriptor: ApplicationUnderTestDescriptor{
		AndroidPackageID: d.pkg, APKStorageObjectReference: "fixture:demo-testonly.apk"}}
	out, err := ProvisionApp(context.Background(), in, Ports{Device: d}, ProvisionDeps{Artifacts: &provFetcher{}})
	if err != nil || len(d.installs) != 1 || !d.installs[0].AllowTestOnly || *out.ApplicationProvisioningOutcome.InstalledVersionCode != 1 {
		t.Fatalf("test-only: %v %+v", err, d.installs)
	}
	// Progress lines for the download and the push.
	d = provDeviceWith(t, "", 0)
	_, err, lines := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, &provFetcher{}, nil)
	if err != nil || !provHasLine(lines, "download fixture:demo-v2.apk: 100%") || !provHasLine(lines, "push com.example.app: 50%") {
		t.Errorf("err %v lines %q", err, lines)
	}
	if d.installs[0].AllowTestOnly {
		t.Error("-t for a regular APK")
	}
	// A device the state cannot be read from fails as a process error.
	d = provDeviceWith(t, "", 0)
	d.pkg = "other"
	_, err, _ = runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, &provFetcher{}, nil)
	if e := agent.Classify(err); e == nil || e.ID != agent.ErrProcess {
		t.Fatalf("err %v", err)
	}
}

func TestProvisionArtifactUnavailable(t *testing.T) {
	d := provDeviceWith(t, "demo-v1.apk", 0)
	f := &provFetcher{err: &agent.Error{ID: agent.ErrArtifactUnavailable, Retryable: true, Msg: "HTTP 503"}}
	out, err, _ := runProvision(t, provisionCase{InstallIfMissing, "", 0, "demo-v2.apk", ""}, d, f, nil)
	if e := agent.Classify(err); e == nil || e.ID != agent.ErrArtifactUnavailable || !e.Retryable || !*out.Retryable {
		t.Fatalf("err %v", err)
	}
	if o := out.ApplicationProvisioningOutcome; o == nil || *o.InstalledVersionCode != 1 {
		t.Errorf("outcome %+v", o)
	}
}

func provHasLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func provJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The spec's example input (screengraph-nodes.md §2) decodes through the schema.
func TestProvisionAppSpecInputDecodes(t *testing.T) {
	raw := []byte(`{
  "runId": "01J...",
  "tenantId": "01T...",
  "projectId": "01P...",
  "deviceRuntimeContext": { "driverSessionId": "b6f7..." },
  "applicationUnderTestDescriptor": {
    "androidPackageId": "com.example.app",
    "apkStorageObjectReference": "s3://bucket/builds/app-1.2.3.apk",
    "expectedBuildSignatureSha256": "ab12..."
  },
  "installationPolicy": "install_if_missing"
}`)
	var in ProvisionAppInput
	if _, err := DecodeInput(NodeProvisionApp, raw, ModeCoerce, &in); err != nil {
		t.Fatal(err)
	}
	if in.InstallationPolicy != InstallIfMissing || in.ApplicationUnderTestDescriptor.APKStorageObjectReference != "s3://bucket/builds/app-1.2.3.apk" {
		t.Errorf("decoded %+v", in)
	}
	// "ab12..." is the spec's placeholder, not a digest: the node refuses it
	// before touching the device.
	d := provDeviceWith(t, "", 0)
	_, err := ProvisionApp(context.Background(), in, Ports{Device: d}, ProvisionDeps{Artifacts: &provFetcher{}})
	if e := agent.Classify(err); e == nil || e.ID != agent.ErrInvalidRequest || len(d.shells) != 0 {
		t.Errorf("err %v shells %q", err, d.shells)
	}
}

// TestReadDeviceAppOneShell: the API level and the installed state come from
// one shell on API >= 28, each part judged as its own command would be; API
// < 28 and output not of the asked shape fall back to one command each.
func TestReadDeviceAppOneShell(t *testing.T) {
	ctx := context.Background()
	t.Run("present, api 34: one shell", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		lvl, a, err := droid.ReadDeviceApp(ctx, d, provPkg)
		if err != nil || lvl != 34 || !a.Present || a.VersionCode != 1 || a.VersionName != "1.0" || a.CodePath != d.app.codePath || a.LastUpdateTime.IsZero() {
			t.Fatalf("%d %+v %v", lvl, a, err)
		}
		if len(d.shells) != 1 {
			t.Errorf("shells %q, want one", d.shells)
		}
		// The same as the three commands on their own.
		lvl2, err := droid.APILevel(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		b, err := droid.ReadInstalledApp(ctx, d, provPkg, lvl2)
		if err != nil || lvl2 != lvl || b != a {
			t.Errorf("separate commands: %d %+v %v", lvl2, b, err)
		}
	})
	t.Run("absent", func(t *testing.T) {
		d := provDeviceWith(t, "", 0)
		lvl, a, err := droid.ReadDeviceApp(ctx, d, provPkg)
		if err != nil || lvl != 34 || a != (InstalledApp{}) || len(d.shells) != 1 {
			t.Fatalf("%d %+v %v %q", lvl, a, err, d.shells)
		}
	})
	t.Run("api 27: pm path and dumpsys on their own", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		d.api = 27
		lvl, a, err := droid.ReadDeviceApp(ctx, d, provPkg)
		if err != nil || lvl != 27 || !a.Present || a.VersionCode != 1 {
			t.Fatalf("%d %+v %v", lvl, a, err)
		}
		if len(d.shells) != 3 || d.shells[1] != "pm path "+provPkg || d.shells[2] != "dumpsys package "+provPkg {
			t.Errorf("shells %q", d.shells)
		}
	})
	t.Run("a failing part is process_error naming its command", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		d.pkg = "com.example.other" // the list and dumpsys commands are "not found" (127)
		_, _, err := droid.ReadDeviceApp(ctx, d, provPkg)
		e := agent.Classify(err)
		if e == nil || e.ID != agent.ErrProcess || !strings.Contains(e.Msg, "`cmd package list packages --show-versioncode "+provPkg+"` exited 127") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("output without the markers: one command each", func(t *testing.T) {
		d := provDeviceWith(t, "demo-v1.apk", 0)
		od := &overrideShell{provDevice: d, first: "34\n"}
		lvl, a, err := droid.ReadDeviceApp(ctx, od, provPkg)
		if err != nil || lvl != 34 || !a.Present || a.VersionCode != 1 {
			t.Fatalf("%d %+v %v", lvl, a, err)
		}
		if len(d.shells) != 4 {
			t.Errorf("shells %q, want the combined one then 3", d.shells)
		}
	})
}

// overrideShell answers the first shell with first (and records it), then
// lets provDevice answer.
type overrideShell struct {
	*provDevice
	first string
	done  bool
}

func (o *overrideShell) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	if !o.done {
		o.done = true
		o.provDevice.shells = append(o.provDevice.shells, cmd)
		return device.ShellResult{Stdout: o.first}, nil
	}
	return o.provDevice.Shell(ctx, cmd)
}
