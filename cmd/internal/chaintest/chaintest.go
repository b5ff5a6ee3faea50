// Package chaintest holds the test helpers of setup chains that the main
// package's in-process tests (cmd/screengraph-agent) and the end-to-end
// tests (cmd/internal/e2e) share: a simulated emulator behind a test's adb
// server, the fixture APKs and their signer digests, and readers of the
// node events a chain commits. It is imported by tests only.
package chaintest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// AppPkg is the package of the demo app (fixtures/apks/demo-v*.apk).
const AppPkg = "com.example.app"

// LaunchDefault starts a simulated emulator with the default profile behind
// srv, closed when the test ends, and waits until srv lists it as a device.
func LaunchDefault(t testing.TB, srv *simtest.ADBServer) (*sim.Emulator, *android.Device) {
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

// FixtureAPK is the path of fixtures/apks/name, relative to the test's
// working directory (go test runs a package's tests in its directory):
// the repository's root is the nearest directory above it with a go.mod.
// It panics outside the repository, where no test of it runs.
func FixtureAPK(name string) string {
	rel := "."
	for i := 0; i < 8; i++ {
		if _, err := os.Stat(filepath.Join(rel, "go.mod")); err == nil {
			return filepath.Join(rel, "fixtures", "apks", name)
		}
		rel = filepath.Join(rel, "..")
	}
	panic("chaintest: no go.mod above the working directory")
}

var signerDigestRE = regexp.MustCompile(`(?m)^Signer #1 certificate SHA-256 digest: ([0-9a-f]{64})$`)

// SignerDigest asks apksigner for the APK's signer certificate SHA-256
// (lowercase hex).
func SignerDigest(t testing.TB, apk string) string {
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

// IndependentChecksum recomputes an event checksum without the agent
// package: sha256(eventId|runId|sequence|kind|JCS(payload)), lowercase hex.
func IndependentChecksum(t testing.TB, e agent.Event) string {
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
	b.WriteString(strconv.FormatInt(e.Sequence, 10))
	b.WriteByte('|')
	b.WriteString(e.Kind)
	b.WriteByte('|')
	b.Write(canon)
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:])
}

// NodePayload is the part of node event payloads the tests read.
type NodePayload struct {
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

// DecodeNode decodes a node event's payload.
func DecodeNode(t testing.TB, e agent.Event) NodePayload {
	t.Helper()
	var p NodePayload
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatalf("event %d %s: %v", e.Sequence, e.Kind, err)
	}
	return p
}

// FinishedOf returns the agent.node.finished payloads of node, in order.
func FinishedOf(t testing.TB, evs []agent.Event, node string) []NodePayload {
	var out []NodePayload
	for _, e := range evs {
		if e.Kind == agent.KindNodeFinished {
			if p := DecodeNode(t, e); p.NodeName == node {
				out = append(out, p)
			}
		}
	}
	return out
}

// LastOutput decodes the last finished output of node into v.
func LastOutput(t testing.TB, evs []agent.Event, node string, v any) {
	t.Helper()
	f := FinishedOf(t, evs, node)
	if len(f) == 0 {
		t.Fatalf("no agent.node.finished for %s", node)
	}
	if err := json.Unmarshal(f[len(f)-1].Output, v); err != nil {
		t.Fatalf("%s output: %v", node, err)
	}
}

// DeltaLines are the node's token_delta texts, in order.
func DeltaLines(t testing.TB, evs []agent.Event, node string) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == agent.KindNodeTokenDelta {
			if p := DecodeNode(t, e); p.NodeName == node {
				out = append(out, p.Text)
			}
		}
	}
	return out
}

// CheckRunRefused checks the agent error format printed by `run --output
// json` for a failure before the chain: success false, one error with
// errorID, a message containing each of msgParts, every node not_executed.
func CheckRunRefused(t testing.TB, raw string, errorID agent.ErrorID, msgParts ...string) {
	t.Helper()
	var out struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Errors  []struct {
			Category string `json:"category"`
			ErrorID  string `json:"error_id"`
			Message  string `json:"message"`
			NodeID   string `json:"node_id"`
		} `json:"errors"`
		Execution struct {
			Steps []struct {
				NodeID string `json:"node_id"`
				Status string `json:"status"`
			} `json:"steps"`
		} `json:"execution"`
		Checkpoint struct {
			CompletedNodes []string `json:"completed_nodes"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, raw)
	}
	if out.Success == nil || *out.Success {
		t.Errorf("success = %v, want false:\n%s", out.Success, raw)
	}
	if len(out.Errors) != 1 {
		t.Fatalf("errors: %d entries, want 1:\n%s", len(out.Errors), raw)
	}
	e := out.Errors[0]
	if e.ErrorID != string(errorID) {
		t.Errorf("error_id %q, want %q:\n%s", e.ErrorID, errorID, raw)
	}
	if e.Category == "" || out.Error == "" {
		t.Errorf("no category or error:\n%s", raw)
	}
	for _, p := range msgParts {
		if !strings.Contains(e.Message, p) {
			t.Errorf("message %q does not name %q", e.Message, p)
		}
	}
	if len(out.Execution.Steps) != 4 {
		t.Errorf("execution.steps: %d, want the 4 setup nodes", len(out.Execution.Steps))
	}
	for _, s := range out.Execution.Steps {
		if s.Status != "not_executed" {
			t.Errorf("step %s is %s, want not_executed", s.NodeID, s.Status)
		}
	}
	if len(out.Checkpoint.CompletedNodes) != 0 {
		t.Errorf("completed nodes %v", out.Checkpoint.CompletedNodes)
	}
}

// NoRunStored opens the data dir's store (which also proves the failed host
// released it) and checks that no run row was written.
func NoRunStored(t testing.TB, dataDir string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("store of the failed run: %v", err)
	}
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Errorf("the failed run left %d run rows: %+v", len(runs), runs)
	}
}

// AgentPkg is the binary under test; go build resolves it from any working
// directory inside the module.
const AgentPkg = "github.com/screengraph/screengraph-agent/cmd/screengraph-agent"

// The tests that run the real binary (SIGKILL needs a process of its own;
// exit codes, stderr) build it once per test process.
var agentBin struct {
	once sync.Once
	path string
	err  error
}

// BuildAgent builds the screengraph-agent binary once per test process
// (into a temporary directory) and returns its path.
func BuildAgent(t testing.TB) string {
	t.Helper()
	agentBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "screengraph-agent-bin-")
		if err != nil {
			agentBin.err = err
			return
		}
		p := filepath.Join(dir, "screengraph-agent")
		out, err := exec.Command("go", "build", "-o", p, AgentPkg).CombinedOutput()
		if err != nil {
			agentBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		agentBin.path = p
	})
	if agentBin.err != nil {
		t.Fatal(agentBin.err)
	}
	return agentBin.path
}
