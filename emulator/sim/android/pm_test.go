package android

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/fixtures"
)

const (
	signerA = "d9077530c262a4f6142fe72ce18ee96204ee8a596bce314c8371e641b3ae5f81" // fixtures/keys/test-a.jks
	signerB = "0290f3a5d168bf7756e2f4e2c874a70dd97d9fbfbee525acf95b1cc3cb508bf8" // fixtures/keys/test-b.jks
)

func readAPK(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("APK not available: %v", err)
	}
	return b
}

func appiumAPK(t testing.TB, name string) []byte {
	base := ".cache/appium-home/node_modules/appium-uiautomator2-driver/node_modules/"
	return readAPK(t, base+name)
}

// push writes an APK where adb push would put it and installs it with pm.
func pmInstallBytes(t testing.TB, d *Device, data []byte, flags string) (string, int) {
	t.Helper()
	if err := d.WriteFile("/data/local/tmp/app.apk", data, 0o100644, d.now()); err != nil {
		t.Fatal(err)
	}
	out, _, st := sh(t, d, "pm install "+flags+" /data/local/tmp/app.apk")
	return out, st
}

func TestInstallRealAppiumAPKs(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	settings := appiumAPK(t, "io.appium.settings/apks/settings_apk-debug.apk")
	// `adb install` streams: cmd package install -S SIZE with the APK on stdin.
	var o bytes.Buffer
	st := d.Shell(context.Background(), fmt.Sprintf("cmd package install -r -g -S %d", len(settings)), bytes.NewReader(settings), &o, new(bytes.Buffer))
	if st != 0 || o.String() != "Success\n" {
		t.Fatalf("streamed install: %d %q", st, o.String())
	}
	// aapt dump badging: versionCode='191' versionName='8.0.9', launchable io.appium.settings.Settings.
	out, _, _ := sh(t, d, "cmd package list packages --show-versioncode io.appium.settings")
	if out != "package:io.appium.settings versionCode:191\n" {
		t.Errorf("list: %q", out)
	}
	p, _ := d.packageInfo("io.appium.settings")
	if p.VersionName != "8.0.9" || p.Launcher != "io.appium.settings.Settings" || p.MinSDK != 26 || p.TargetSDK != 35 || len(p.SignerSHA256) != 1 {
		t.Errorf("parsed: %+v", p)
	}
	if !p.Granted["android.permission.ACCESS_FINE_LOCATION"] {
		t.Errorf("-g must grant requested permissions: %v", p.Granted)
	}
	// pm path, then pulling that path returns the exact APK bytes.
	out, _, st = sh(t, d, "pm path io.appium.settings")
	if st != 0 || !regexp.MustCompile(`^package:/data/app/~~[A-Za-z0-9_-]{22}==/io\.appium\.settings-[A-Za-z0-9_-]{22}==/base\.apk\n$`).MatchString(out) {
		t.Fatalf("pm path: %d %q", st, out)
	}
	pulled, err := d.ReadFile(strings.TrimSpace(strings.TrimPrefix(out, "package:")))
	if err != nil || !bytes.Equal(pulled, settings) {
		t.Fatalf("pull of base.apk: err=%v equal=%v", err, bytes.Equal(pulled, settings))
	}

	server := appiumAPK(t, "appium-uiautomator2-server/apks/appium-uiautomator2-server-v10.6.6.apk")
	if out, st := pmInstallBytes(t, d, server, "-r"); st != 0 || out != "Success\n" {
		t.Fatalf("server: %d %q", st, out)
	}
	test := appiumAPK(t, "appium-uiautomator2-server/apks/appium-uiautomator2-server-debug-androidTest.apk")
	if out, st := pmInstallBytes(t, d, test, "-r -t"); st != 0 {
		t.Fatalf("test apk: %d %q", st, out)
	}
	out, _, _ = sh(t, d, "pm list instrumentation")
	if out != "instrumentation:io.appium.uiautomator2.server.test/androidx.test.runner.AndroidJUnitRunner (target=io.appium.uiautomator2.server)\n" {
		t.Errorf("instrumentation: %q", out)
	}
	if got := d.instrumentations(); len(got) != 1 || got[0].TargetPackage != "io.appium.uiautomator2.server" {
		t.Errorf("instrumentations(): %+v", got)
	}
	out, _, _ = sh(t, d, "pm list packages -3")
	if out != "package:io.appium.settings\npackage:io.appium.uiautomator2.server\npackage:io.appium.uiautomator2.server.test\n" {
		t.Errorf("-3: %q", out)
	}
}

func TestInstallUpdateDowngradeSigner(t *testing.T) {
	d, clk := newTestDevice(t, Profile{})
	v1, v2 := readAPK(t, "fixtures/apks/demo-v1.apk"), readAPK(t, "fixtures/apks/demo-v2.apk")
	if out, st := pmInstallBytes(t, d, v1, ""); st != 0 || out != "Success\n" {
		t.Fatalf("v1: %d %q", st, out)
	}
	first, _ := d.packageInfo("com.example.app")
	if first.SignerSHA256[0] != signerA || first.UID < 10000 || first.Launcher != "com.example.app.HomeActivity" {
		t.Fatalf("v1 record: %+v", first)
	}
	clk.Advance(60e9)
	if out, st := pmInstallBytes(t, d, v2, "-r"); st != 0 || out != "Success\n" {
		t.Fatalf("v2: %d %q", st, out)
	}
	second, _ := d.packageInfo("com.example.app")
	if second.UID != first.UID || !second.FirstInstallTime.Equal(first.FirstInstallTime) || !second.LastUpdateTime.After(first.LastUpdateTime) || second.CodePath == first.CodePath {
		t.Errorf("update must keep uid and firstInstallTime, move lastUpdateTime and codePath: %+v", second)
	}
	if _, err := d.ReadFile(first.CodePath + "/base.apk"); err == nil {
		t.Errorf("old base.apk still readable after update")
	}
	// Downgrade: real text (fixtures/captures/adb-install/failure-version-downgrade.txt).
	out, st := pmInstallBytes(t, d, v1, "-r")
	if st != 1 || out != "Failure [INSTALL_FAILED_VERSION_DOWNGRADE: Downgrade detected: Update version code 1 is older than current 2]\n" {
		t.Errorf("downgrade: %d %q", st, out)
	}
	capture, err := os.ReadFile(filepath.Join(repoRoot(t), "fixtures/captures/adb-install/failure-version-downgrade.txt"))
	if err == nil {
		norm := regexp.MustCompile(`\d+`)
		line := regexp.MustCompile(`Failure \[.*\]`).FindString(string(capture))
		if norm.ReplaceAllString(line, "N") != norm.ReplaceAllString(strings.TrimSpace(out), "N") {
			t.Errorf("downgrade line differs from the capture:\n%s\n%s", line, out)
		}
	}
	if out, st := pmInstallBytes(t, d, v1, "-r -d"); st != 0 || out != "Success\n" {
		t.Errorf("-d downgrade: %d %q", st, out)
	}
	// Signer change.
	keyB := readAPK(t, "fixtures/apks/demo-v2-keyb.apk")
	out, st = pmInstallBytes(t, d, keyB, "-r")
	if st != 1 || out != "Failure [INSTALL_FAILED_UPDATE_INCOMPATIBLE: Existing package com.example.app signatures do not match newer version; ignoring!]\n" {
		t.Errorf("signer change: %d %q", st, out)
	}
	if out, _, _ := sh(t, d, "pm uninstall com.example.app"); out != "Success\n" {
		t.Errorf("uninstall: %q", out)
	}
	if out, st := pmInstallBytes(t, d, keyB, ""); st != 0 {
		t.Fatalf("key B after uninstall: %d %q", st, out)
	}
	p, _ := d.packageInfo("com.example.app")
	if p.SignerSHA256[0] != signerB || p.UID == first.UID {
		t.Errorf("fresh install must take a new uid and the new signer: %+v", p)
	}
	if out, st := pmInstallBytes(t, d, v2, "-R"); st != 1 || !strings.HasPrefix(out, "Failure [INSTALL_FAILED_ALREADY_EXISTS") {
		t.Errorf("-R: %d %q", st, out)
	}
}

func TestInstallFailures(t *testing.T) {
	tests := []struct {
		name    string
		profile Profile
		apk     string
		flags   string
		want    string
	}{
		{"test-only without -t", Profile{}, "fixtures/apks/demo-testonly.apk", "", "Failure [INSTALL_FAILED_TEST_ONLY: Failed to install test-only apk. Did you forget to add -t?]\n"},
		{"test-only API 30", Profile{APILevel: 30}, "fixtures/apks/demo-testonly.apk", "", "Failure [INSTALL_FAILED_TEST_ONLY: installPackageLI]\n"},
		{"test-only with -t", Profile{}, "fixtures/apks/demo-testonly.apk", "-t", "Success\n"},
		{"not an APK", Profile{}, "fixtures/apks/not-an-apk.apk", "", "Failure [INSTALL_PARSE_FAILED_NOT_APK: Failed to parse /data/app/vmdlN.tmp/0.apk: Failed to load asset path /data/app/vmdlN.tmp/0.apk]\n"},
		{"insufficient storage", Profile{FreeStorageBytes: 12000}, "fixtures/apks/demo-v1.apk", "", "Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n"},
		{"injected fault", Profile{Faults: Faults{InstallFailure: "INSTALL_FAILED_INSUFFICIENT_STORAGE"}}, "fixtures/apks/demo-v1.apk", "", "Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n"},
	}
	vmdl := regexp.MustCompile(`vmdl\d+`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newTestDevice(t, tc.profile)
			out, st := pmInstallBytes(t, d, readAPK(t, tc.apk), tc.flags)
			if got := vmdl.ReplaceAllString(out, "vmdlN"); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if (st == 0) != strings.HasPrefix(tc.want, "Success") {
				t.Errorf("status %d", st)
			}
		})
	}
	d, _ := newTestDevice(t, Profile{})
	if _, e, st := sh(t, d, "pm install /data/local/tmp/missing.apk"); st != 255 || !strings.HasPrefix(e, "Error: Unable to open file: /data/local/tmp/missing.apk\n") {
		t.Errorf("missing file: %d %q", st, e)
	}
	if out, _, st := sh(t, d, "pm uninstall com.nope"); st != 1 || out != "Failure [DELETE_FAILED_INTERNAL_ERROR]\n" {
		t.Errorf("uninstall unknown: %d %q", st, out)
	}
	if out, _, st := sh(t, d, "pm path com.nope"); st != 1 || out != "" {
		t.Errorf("path unknown: %d %q", st, out)
	}
}

func TestInstallSessions(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	v1 := readAPK(t, "fixtures/apks/demo-v1.apk")
	out, _, _ := sh(t, d, "pm install-create -r -t")
	m := regexp.MustCompile(`^Success: created install session \[(\d+)\]\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("install-create: %q", out)
	}
	var o bytes.Buffer
	d.Shell(context.Background(), fmt.Sprintf("pm install-write -S %d %s base.apk -", len(v1), m[1]), bytes.NewReader(v1), &o, new(bytes.Buffer))
	if o.String() != fmt.Sprintf("Success: streamed %d bytes\n", len(v1)) {
		t.Fatalf("install-write: %q", o.String())
	}
	if out, _, st := sh(t, d, "pm install-commit "+m[1]); st != 0 || out != "Success\n" {
		t.Fatalf("install-commit: %d %q", st, out)
	}
}

func TestPmListAndDumpsysPackage(t *testing.T) {
	d, clk := newTestDevice(t, Profile{})
	pmInstallBytes(t, d, readAPK(t, "fixtures/apks/demo-v1.apk"), "")
	clk.Advance(3e9)
	pmInstallBytes(t, d, readAPK(t, "fixtures/apks/demo-v2.apk"), "")
	p, _ := d.packageInfo("com.example.app")
	out, _, _ := sh(t, d, "pm list packages -f -3 --show-versioncode example")
	if want := "package:" + p.CodePath + "/base.apk=com.example.app versionCode:2\n"; out != want {
		t.Errorf("list -f: %q, want %q", out, want)
	}
	if out, _, _ := sh(t, d, "pm list packages -s android"); !strings.Contains(out, "package:android\n") || strings.Contains(out, "com.example.app") {
		t.Errorf("list -s: %q", out)
	}
	if out, _, _ := sh(t, d, "cmd package resolve-activity --brief com.example.app"); out != "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=false\ncom.example.app/.HomeActivity\n" {
		t.Errorf("resolve-activity: %q", out)
	}
	dump, _, _ := sh(t, d, "dumpsys package com.example.app")
	for _, want := range []string{
		"Packages:\n  Package [com.example.app] (",
		fmt.Sprintf("    userId=%d\n", p.UID),
		"    codePath=" + p.CodePath + "\n",
		"    versionCode=2 minSdk=24 targetSdk=34\n",
		"    versionName=2.0\n",
		"    firstInstallTime=2024-05-06 07:08:09\n",
		"    lastUpdateTime=2024-05-06 07:08:12\n",
		"    User 0: ceDataInode=",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("dumpsys package lacks %q:\n%s", want, dump)
		}
	}
	// The fields of the package block come in the order of the real capture.
	capture, err := os.ReadFile(filepath.Join(repoRoot(t), "fixtures/captures/dumpsys-package/api30plus-wearos-updated-system-app.txt"))
	if err != nil {
		t.Fatal(err)
	}
	keys := func(s string) []string {
		block := s[strings.Index(s, "Packages:\n"):]
		if i := strings.Index(block, "\n\n"); i > 0 {
			block = block[:i]
		}
		var ks []string
		for _, l := range strings.Split(block, "\n") {
			if m := regexp.MustCompile(`^    ([A-Za-z ]+?)[=:]`).FindStringSubmatch(l); m != nil {
				ks = append(ks, m[1])
			}
		}
		return ks
	}
	real := keys(string(capture))
	pos := map[string]int{}
	for i, k := range real {
		if _, ok := pos[k]; !ok {
			pos[k] = i
		}
	}
	last := -1
	for _, k := range keys(dump) {
		i, ok := pos[k]
		if !ok {
			t.Errorf("field %q is not in the capture's package block", k)
			continue
		}
		if i < last {
			t.Errorf("field %q out of the capture's order", k)
		}
		last = i
	}
	if out, _, _ := sh(t, d, "pm grant com.example.app android.permission.CAMERA && dumpsys package com.example.app | grep CAMERA"); out != "        android.permission.CAMERA: granted=true\n" {
		t.Errorf("grant: %q", out)
	}
	if _, e, st := sh(t, d, "pm grant com.nope android.permission.CAMERA"); st != 255 || !strings.Contains(e, "Unknown package: com.nope") {
		t.Errorf("grant unknown: %d %q", st, e)
	}
	if out, _, _ := sh(t, d, "pm clear com.example.app"); out != "Success\n" {
		t.Errorf("clear: %q", out)
	}
}

func TestJavaSignatureHash(t *testing.T) {
	// Arrays.hashCode(new byte[]{1,2,-1}) = ((31+1)*31+2)*31-1 = 30813 = 0x785d.
	if got := javaSignatureHash([]byte{1, 2, 0xff}); got != "785d" {
		t.Errorf("got %s", got)
	}
}

// A 1 MB APK whose resource table (read whole before the manifest) inflates to 1 GiB (honest or lying headers) is
// refused by the package manager before it reaches memory.
func TestInstallRefusesZipBomb(t *testing.T) {
	for _, declared := range []int64{1 << 30, 1000} {
		var b bytes.Buffer
		if err := fixtures.ZipBomb(&b, "resources.arsc", 1<<30, declared); err != nil {
			t.Fatal(err)
		}
		d, _ := newTestDevice(t, Profile{})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, st := pmInstallBytes(t, d, b.Bytes(), "")
		runtime.ReadMemStats(&after)
		t.Logf("declared %d: %q, allocated %d MiB", declared, out, (after.TotalAlloc-before.TotalAlloc)>>20)
		if st == 0 || !strings.HasPrefix(out, "Failure [INSTALL_PARSE_FAILED_BAD_MANIFEST: Failed to parse ") {
			t.Errorf("declared %d: %d %q", declared, st, out)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("declared %d: install allocated %d MiB", declared, grew>>20)
		}
	}
}
