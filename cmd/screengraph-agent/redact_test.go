package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"github.com/screengraph/screengraph-agent/cmd/internal/chaintest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/nodes"
)

// captureOutput runs fn with os.Stdout and os.Stderr captured, and returns
// what both received.
func captureOutput(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = w, w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&buf, r); close(done) }()
	ferr := fn()
	os.Stdout, os.Stderr = oldOut, oldErr
	w.Close()
	<-done
	return buf.String(), ferr
}

// TestRunRedactsArtifactCredentials runs the chain (real adb server,
// simulated emulator, local Appium) with an https apkStorageObjectReference
// carrying URL userinfo and presigned-URL query parameters, served by a TLS
// server the process trusts through SSL_CERT_FILE. ProvisionApp downloads and
// installs it, logging the reference in its progress lines. No secret may
// appear in any stored event (token_delta lines, outputs), in the run's CLI
// output (stdout + stderr: live progress lines, logs, the JSON report) nor in
// `runs list/show/events/inspect` (json and text); the stored run input keeps
// them (resume needs the real reference).
func TestRunRedactsArtifactCredentials(t *testing.T) {
	slow(t, "a chain through Appium and the runs commands")
	env := newChainEnv(t)
	apk := fixtureAPK("demo-v2.apk")
	sha := signerDigest(t, apk)
	var gotAuth string
	hs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		http.ServeFile(w, r, apk)
	}))
	defer hs.Close()
	// crypto/x509 reads SSL_CERT_FILE when it first loads the system roots;
	// no earlier test of this package verifies a certificate.
	pemFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", pemFile)
	secrets := []string{"s3cr3tPa55", "AKIAIOSFODNN7EXAMPLE", "FwoGZXIvYXdzSESSIONTOKEN", "deadbeefSIGNATURE", "tok3nValue", "azSasSig", "cfSignature"}
	ref := strings.Replace(hs.URL, "https://", "https://builder:s3cr3tPa55@", 1) + "/builds/app.apk" +
		"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20250101%2Fus-east-1%2Fs3%2Faws4_request" +
		"&X-Amz-Date=20250101T000000Z&X-Amz-Security-Token=FwoGZXIvYXdzSESSIONTOKEN&X-Amz-SignedHeaders=host" +
		"&X-Amz-Signature=deadbeefSIGNATURE&token=tok3nValue&sig=azSasSig&Signature=cfSignature"
	c := env.runCmd(ref, sha)
	c.Output = "text" // text prints the progress lines live on stderr

	var runErr error
	out, _ := captureOutput(t, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		runErr = c.Run(ctx, &Globals{LogLevel: "debug"})
		return runErr
	})
	if runErr != nil || !strings.Contains(out, "FINISHED") {
		t.Fatalf("run: %v\n%s", runErr, out)
	}
	if gotAuth == "" {
		t.Error("the download did not use the reference's credentials")
	}
	noSecret := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %q:\n%s", where, s, text)
			}
		}
	}
	noSecret("run output", out)
	if !strings.Contains(out, "X-Amz-Date=20250101T000000Z") || !strings.Contains(out, agent.Redacted) {
		t.Errorf("run output should keep the readable part of the reference:\n%s", out)
	}

	// The same request again with --output json (the report's outputs).
	c.Output = "json"
	out, _ = captureOutput(t, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		runErr = c.Run(ctx, &Globals{LogLevel: "debug"})
		return runErr
	})
	if runErr != nil {
		t.Fatalf("second run: %v\n%s", runErr, out)
	}
	noSecret("second run output (json)", out)

	st := env.openStore(t)
	runs, err := st.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{Limit: 2})
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %v %v", runs, err)
	}
	run := runs[1] // the first run: it downloaded the APK
	if runs[0].CreatedAt.Before(runs[1].CreatedAt) {
		run = runs[0]
	}
	if !strings.Contains(string(run.Input), "s3cr3tPa55") || !strings.Contains(string(run.Input), "deadbeefSIGNATURE") {
		t.Errorf("stored input was redacted (resume needs it): %s", run.Input)
	}
	evs := runEvents(t, st, run.RunID)
	sawRef := false
	for _, e := range evs {
		noSecret("event "+e.Kind, string(e.Payload))
		sawRef = sawRef || strings.Contains(string(e.Payload), "/builds/app.apk")
		if err := agent.VerifyChecksum(e); err != nil {
			t.Error(err)
		}
	}
	if !sawRef {
		t.Error("no event names the (redacted) reference: the test proves nothing")
	}
	lines := chaintest.DeltaLines(t, evs, nodes.NodeProvisionApp)
	if !anyContains(lines, "downloaded") || !anyContains(lines, "X-Amz-Signature="+agent.Redacted) {
		t.Errorf("ProvisionApp lines do not show the redacted reference: %q", lines)
	}
	st.Close()

	ctx := context.Background()
	sf := storeFlags{DataDir: env.dataDir}
	for _, format := range []string{"json", "text"} {
		o := outputFlag{Output: format}
		for name, cmd := range map[string]interface{ Run(context.Context) error }{
			"runs list":    &runsListCmd{storeFlags: sf, outputFlag: o, Limit: 5},
			"runs show":    &runsShowCmd{storeFlags: sf, outputFlag: o, RunID: run.RunID},
			"runs events":  &runsEventsCmd{storeFlags: sf, outputFlag: o, RunID: run.RunID},
			"runs inspect": &runsInspectCmd{storeFlags: sf, outputFlag: o, RunID: run.RunID, Step: -1},
		} {
			text, err := captureOutput(t, func() error { return cmd.Run(ctx) })
			if err != nil {
				t.Errorf("%s --output %s: %v", name, format, err)
			}
			noSecret(name+" --output "+format, text)
			if format == "json" && !json.Valid([]byte(text)) {
				t.Errorf("%s --output json printed no JSON:\n%s", name, text)
			}
		}
	}
}
