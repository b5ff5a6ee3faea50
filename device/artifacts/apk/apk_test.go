package apk

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

const (
	keyA = "d9077530c262a4f6142fe72ce18ee96204ee8a596bce314c8371e641b3ae5f81" // fixtures/keys/test-a.jks
	keyB = "0290f3a5d168bf7756e2f4e2c874a70dd97d9fbfbee525acf95b1cc3cb508bf8" // fixtures/keys/test-b.jks
)

func fixture(name string) string { return filepath.Join("..", "..", "..", "fixtures", "apks", name) }

// SettingsAPK is the real io.appium.settings APK shipped with the uiautomator2 driver.
func settingsAPK(t *testing.T) string {
	p := filepath.Join("..", "..", "..", ".cache", "appium-home", "node_modules", "appium-uiautomator2-driver",
		"node_modules", "io.appium.settings", "apks", "settings_apk-debug.apk")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("io.appium.settings APK not installed (run make setup): %v", err)
	}
	return p
}

var apksignerDigestRe = regexp.MustCompile(`(?m)^Signer #\d+ certificate SHA-256 digest: ([0-9a-f]{64})$`)

// apksignerDigests runs the real `apksigner verify --print-certs` and returns its digests.
func apksignerDigests(t *testing.T, path string, args ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("apksigner"); err != nil {
		t.Fatal("apksigner not installed")
	}
	out, err := exec.Command("apksigner", append(append([]string{"verify", "--print-certs"}, args...), path)...).CombinedOutput()
	if err != nil {
		t.Fatalf("apksigner verify %s: %v\n%s", path, err, out)
	}
	var ds []string
	for _, m := range apksignerDigestRe.FindAllStringSubmatch(string(out), -1) {
		ds = append(ds, m[1])
	}
	if len(ds) == 0 {
		t.Fatalf("apksigner printed no digest:\n%s", out)
	}
	return ds
}

var badgingRe = regexp.MustCompile(`package: name='([^']+)' versionCode='(\d+)' versionName='([^']*)'`)

// aapt2Badging runs the real `aapt2 dump badging` and returns "pkg vc vn" and the launchable activity.
func aapt2Badging(t *testing.T, path string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("aapt2"); err != nil {
		t.Fatal("aapt2 not installed")
	}
	out, err := exec.Command("aapt2", "dump", "badging", path).CombinedOutput()
	if err != nil {
		t.Fatalf("aapt2 dump badging: %v\n%s", err, out)
	}
	m := badgingRe.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no package line:\n%s", out)
	}
	l := regexp.MustCompile(`launchable-activity: name='([^']+)'`).FindStringSubmatch(string(out))
	launch := ""
	if l != nil {
		launch = l[1]
	}
	return m[1] + " " + m[2] + " " + m[3], launch
}

func TestInspectAgreesWithAapt2AndApksigner(t *testing.T) {
	cases := []struct {
		path     string
		testOnly bool
		signer   string
	}{
		{fixture("demo-v1.apk"), false, keyA},
		{fixture("demo-v2.apk"), false, keyA},
		{fixture("demo-v2-keyb.apk"), false, keyB},
		{fixture("demo-testonly.apk"), true, keyA},
		{settingsAPK(t), false, "05ee28fa5928913fcbda0b2534e1456966fdd97b08b65059261b17123adcb180"},
	}
	for _, c := range cases {
		t.Run(filepath.Base(c.path), func(t *testing.T) {
			info, err := Inspect(c.path, 34)
			if err != nil {
				t.Fatal(err)
			}
			want, launch := aapt2Badging(t, c.path)
			if got := info.Package + " " + itoa(info.VersionCode) + " " + info.VersionName; got != want {
				t.Errorf("identity %q, aapt2 says %q", got, want)
			}
			if info.LauncherActivity != launch {
				t.Errorf("launcher %q, aapt2 says %q", info.LauncherActivity, launch)
			}
			if info.TestOnly != c.testOnly {
				t.Errorf("testOnly %v", info.TestOnly)
			}
			ds := apksignerDigests(t, c.path)
			if !SameSigners(info.SignerSHA256, ds) || info.SignerSHA256[0] != c.signer {
				t.Errorf("signers %v, apksigner %v, want %s", info.SignerSHA256, ds, c.signer)
			}
			// Whole-range verification agrees too.
			all, err := Inspect(c.path, 0)
			if err != nil || !SameSigners(all.SignerSHA256, ds) {
				t.Errorf("Inspect(.., 0) = %v, %v", all.SignerSHA256, err)
			}
		})
	}
}

func TestInspectV2OnlyBelowMinSdkStillReadsSigner(t *testing.T) {
	// settings_apk-debug.apk is v2-only (apksigner: v1 false, v2 true): a plain
	// Verify of the whole range works, and so does a single device level.
	info, err := Inspect(settingsAPK(t), 29)
	if err != nil {
		t.Fatal(err)
	}
	if info.SigningScheme != 2 {
		t.Errorf("scheme %d, want 2", info.SigningScheme)
	}
}

func TestInspectNotAnAPK(t *testing.T) {
	_, err := Inspect(fixture("not-an-apk.apk"), 34)
	assertCode(t, err, CodeNotAPK)
	if !IsInvalidAPK(err) {
		t.Error("IsInvalidAPK false")
	}
}

func TestInspectTamperedAndUnsigned(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(fixture("demo-v2.apk"))
	if err != nil {
		t.Fatal(err)
	}
	// Tampered: change the last-modified time in the first entry's local file
	// header (offset 10). Zip readers use the central directory copy and the CRC
	// stays right, but the v2/v3 content digests cover every local header.
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte(nil), data...)
	if !bytes.HasPrefix(tampered, []byte("PK\x03\x04")) {
		t.Fatal("demo-v2.apk does not start with a local file header")
	}
	tampered[10] ^= 0x01
	tp := filepath.Join(dir, "tampered.apk")
	os.WriteFile(tp, tampered, 0o644)
	_, err = Inspect(tp, 34)
	assertCode(t, err, CodeBadSignature)
	if _, err := exec.LookPath("apksigner"); err == nil {
		if out, err := exec.Command("apksigner", "verify", tp).CombinedOutput(); err == nil {
			t.Errorf("apksigner accepts the tampered APK:\n%s", out)
		}
	}

	// Unsigned: the same entries re-zipped without a signing block.
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		if strings.HasPrefix(f.Name, "META-INF/") {
			continue
		}
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		r, _ := f.Open()
		io.Copy(w, r)
		r.Close()
	}
	zw.Close()
	up := filepath.Join(dir, "unsigned.apk")
	os.WriteFile(up, buf.Bytes(), 0o644)
	info, err := Inspect(up, 34)
	assertCode(t, err, CodeBadSignature)
	if info.Package != "com.example.app" {
		t.Errorf("manifest still read: %q", info.Package)
	}
}

// TestInspectKeyRotation signs demo-v2 with a v3 proof-of-rotation lineage
// A -> B using the real apksigner and checks the signer per API level against
// apksigner's own answer for that range.
func TestInspectKeyRotation(t *testing.T) {
	if _, err := exec.LookPath("apksigner"); err != nil {
		t.Fatal("apksigner not installed")
	}
	dir := t.TempDir()
	keys := filepath.Join("..", "..", "..", "fixtures", "keys")
	signer := func(jks string) []string {
		// Passwords and alias: fixtures/apks/build.sh.
		return []string{"--ks", filepath.Join(keys, jks), "--ks-pass", "pass:android", "--key-pass", "pass:android", "--ks-key-alias", "test"}
	}
	lineage := filepath.Join(dir, "lineage")
	run := func(args ...string) {
		if out, err := exec.Command("apksigner", args...).CombinedOutput(); err != nil {
			t.Fatalf("apksigner %v: %v\n%s", args, err, out)
		}
	}
	run(append(append(append([]string{"rotate", "--out", lineage, "--old-signer"}, signer("test-a.jks")...), "--new-signer"), signer("test-b.jks")...)...)
	out := filepath.Join(dir, "rotated.apk")
	args := append([]string{"sign"}, signer("test-a.jks")...)
	args = append(append(args, "--next-signer"), signer("test-b.jks")...)
	run(append(args, "--lineage", lineage, "--out", out, fixture("demo-v2.apk"))...)

	for _, c := range []struct {
		api  int
		want string
		args []string
	}{
		{34, keyB, nil},
		{28, keyB, []string{"--min-sdk-version", "28"}},
		{27, keyA, []string{"--max-sdk-version", "27"}},
		{24, keyA, []string{"--max-sdk-version", "24"}},
	} {
		info, err := Inspect(out, c.api)
		if err != nil {
			t.Fatalf("API %d: %v", c.api, err)
		}
		ds := apksignerDigests(t, out, c.args...)
		if len(info.SignerSHA256) != 1 || info.SignerSHA256[0] != c.want || ds[0] != c.want {
			t.Errorf("API %d: Inspect %v, apksigner %v, want %s", c.api, info.SignerSHA256, ds, c.want)
		}
	}
}

func TestNormalizeDigestAndSameSigners(t *testing.T) {
	d, ok := NormalizeDigest(" D9:07:75:30:C2:62:A4:F6:14:2F:E7:2C:E1:8E:E9:62:04:EE:8A:59:6B:CE:31:4C:83:71:E6:41:B3:AE:5F:81 ")
	if !ok || d != keyA {
		t.Errorf("NormalizeDigest = %q, %v", d, ok)
	}
	if _, ok := NormalizeDigest("ab12"); ok {
		t.Error("short digest accepted")
	}
	if _, ok := NormalizeDigest(strings.Repeat("zz", 32)); ok {
		t.Error("non-hex accepted")
	}
	if !SameSigners([]string{keyA, keyB}, []string{keyB, strings.ToUpper(keyA)}) {
		t.Error("order/case should not matter")
	}
	if SameSigners(nil, nil) || SameSigners([]string{keyA}, []string{keyA, keyB}) || SameSigners([]string{keyA}, []string{keyB}) {
		t.Error("different sets reported same")
	}
}

func assertCode(t *testing.T, err error, code string) {
	t.Helper()
	e := agent.Classify(err)
	if e == nil || e.ID != agent.ErrArtifactUnavailable || e.Code != code || e.Retryable {
		t.Fatalf("err = %v, want artifact_unavailable %s not retryable", err, code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
