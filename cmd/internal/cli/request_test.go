package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/nodes"
)

// The request `runs submit` builds from flags and -f, without a daemon.
func TestRunsSubmitRequest(t *testing.T) {
	apk := filepath.Join(t.TempDir(), "app.apk")
	if err := os.WriteFile(apk, []byte("PK"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := submitCmd{Device: "emulator-5554", Package: "com.example.app", APK: apk, SHA256: strings.Repeat("AB", 32),
		Activity: ".Main", PolicyVersion: 2, Mode: "FORCE_RESTART"}
	b, err := c.request()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"ensureDevice": map[string]any{"deviceConfiguration": map[string]any{"platformName": "android", "deviceName": "emulator-5554"}},
		"provisionApp": map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app",
			"apkStorageObjectReference": "file://" + apk, "expectedBuildSignatureSha256": strings.Repeat("ab", 32)}},
		"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app",
			"androidLaunchActivityName": ".Main"}, "launchAttachMode": "FORCE_RESTART"},
		"waitIdle":      map[string]any{"idleHeuristicsConfiguration": map[string]any{}},
		"policyVersion": float64(2),
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if !bytes.Equal(wb, gb) {
		t.Fatalf("request\n got %s\nwant %s", gb, wb)
	}

	// -f keeps the file's fields (numbers as written) and flags replace theirs.
	f := filepath.Join(t.TempDir(), "run.json")
	os.WriteFile(f, []byte(`{"ensureDevice":{"deviceConfiguration":{"deviceName":"a","bootTimeoutMillis":120000}},
		"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.x.y"}},"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.x.y"}},
		"waitIdle":{"idleHeuristicsConfiguration":{"minQuietMillis":500}}}`), 0o644)
	b, err = (submitCmd{File: f, Device: "b", APK: "https://h.example/app.apk?X-Amz-Signature=s"}).request()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"deviceName":"b"`, `"bootTimeoutMillis":120000`, `"minQuietMillis":500`, `"apkStorageObjectReference":"https://h.example/app.apk?X-Amz-Signature=s"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("request lacks %s: %s", s, b)
		}
	}

	// Refusals, each an invalid_request_error naming what is wrong.
	big := filepath.Join(t.TempDir(), "big.json")
	os.WriteFile(big, bytes.Repeat([]byte(" "), MaxRunFile+1), 0o644)
	for name, c := range map[string]submitCmd{
		"no device":   {Package: "com.example.app"},
		"no package":  {Device: "emulator-5554"},
		"missing apk": {Device: "e", Package: "com.example.app", APK: filepath.Join(t.TempDir(), "none.apk")},
		"apk is dir":  {Device: "e", Package: "com.example.app", APK: t.TempDir()},
		"huge file":   {File: big},
		"not object":  {File: writeTemp(t, "[1,2]")},
	} {
		_, err := c.request()
		var ae *agent.Error
		if err == nil || !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// submitCmd is `runs submit`'s flags as the command has them.
type submitCmd struct {
	File, Device, Package, APK, SHA256, Activity, Mode string
	PolicyVersion                                      int
}

func (c submitCmd) request() ([]byte, error) {
	return SubmitRequest(SubmitFlags{File: c.File, APK: c.APK, RequestFields: nodes.RequestFields{Device: c.Device,
		Package: c.Package, SHA256: c.SHA256, Activity: c.Activity, Mode: c.Mode, PolicyVersion: c.PolicyVersion}})
}

func writeTemp(t *testing.T, s string) string {
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
