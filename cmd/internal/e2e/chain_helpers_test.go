package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
)

const appPkg = "com.example.app"

// launchDefault starts a simulated emulator with the default profile behind
// srv and waits until srv lists it as a device.
func launchDefault(t testing.TB, srv *simtest.ADBServer) (*sim.Emulator, *android.Device) {
	t.Helper()
	b, err := fixtures.Profile("default")
	if err != nil {
		t.Fatal(err)
	}
	prof, err := android.ParseProfile("default", b)
	if err != nil {
		t.Fatal(err)
	}
	emu, dev, err := sim.Launch(context.Background(), sim.LaunchConfig{ADBServer: srv.Addr(), Profile: prof, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	return emu, dev
}

func fixtureAPK(name string) string { return filepath.Join(repoRoot, "fixtures", "apks", name) }

var signerDigestRE = regexp.MustCompile(`(?m)^Signer #1 certificate SHA-256 digest: ([0-9a-f]{64})$`)

// signerDigest asks apksigner for the APK's signer certificate SHA-256.
func signerDigest(t testing.TB, apk string) string {
	t.Helper()
	out, err := exec.Command("apksigner", "verify", "--print-certs", apk).CombinedOutput()
	if err != nil {
		t.Fatalf("apksigner verify %s: %v\n%s", apk, err, out)
	}
	m := signerDigestRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("apksigner printed no signer digest:\n%s", out)
	}
	return string(m[1])
}

// independentChecksum recomputes an event checksum without the agent
// package: sha256(eventId|runId|sequence|kind|JCS(payload)), lowercase hex.
func independentChecksum(t testing.TB, e agent.Event) string {
	t.Helper()
	canon, err := jcs.Transform(e.Payload)
	if err != nil {
		t.Fatalf("event %d: payload not canonicalizable: %v", e.Sequence, err)
	}
	var b bytes.Buffer
	b.WriteString(e.EventID)
	b.WriteByte('|')
	b.WriteString(e.RunID)
	b.WriteByte('|')
	b.WriteString(jsonInt(e.Sequence))
	b.WriteByte('|')
	b.WriteString(e.Kind)
	b.WriteByte('|')
	b.Write(canon)
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// nodePayload is the part of node event payloads the tests read.
type nodePayload struct {
	NodeName                   string          `json:"nodeName"`
	StepOrdinal                int             `json:"stepOrdinal"`
	Attempt                    int             `json:"attempt"`
	NodeExecutionOutcomeStatus string          `json:"nodeExecutionOutcomeStatus"`
	ErrorID                    *string         `json:"errorId"`
	ErrorCode                  string          `json:"errorCode"`
	Output                     json.RawMessage `json:"output"`
	Text                       string          `json:"text"`
	DurationMillis             int64           `json:"durationMillis"`
}

func decodeNode(t testing.TB, e agent.Event) nodePayload {
	t.Helper()
	var p nodePayload
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatalf("event %d %s: %v", e.Sequence, e.Kind, err)
	}
	return p
}

// finishedOf returns the agent.node.finished payloads of node, in order.
func finishedOf(t testing.TB, evs []agent.Event, node string) []nodePayload {
	var out []nodePayload
	for _, e := range evs {
		if e.Kind == agent.KindNodeFinished {
			if p := decodeNode(t, e); p.NodeName == node {
				out = append(out, p)
			}
		}
	}
	return out
}

// lastOutput decodes the last finished output of node into v.
func lastOutput(t testing.TB, evs []agent.Event, node string, v any) {
	t.Helper()
	f := finishedOf(t, evs, node)
	if len(f) == 0 {
		t.Fatalf("no agent.node.finished for %s", node)
	}
	if err := json.Unmarshal(f[len(f)-1].Output, v); err != nil {
		t.Fatalf("%s output: %v", node, err)
	}
}

// deltaLines are the node's token_delta texts.
func deltaLines(t testing.TB, evs []agent.Event, node string) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == agent.KindNodeTokenDelta {
			if p := decodeNode(t, e); p.NodeName == node {
				out = append(out, p.Text)
			}
		}
	}
	return out
}
