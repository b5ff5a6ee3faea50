package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/fixtures"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

const appPkg = "com.example.app"

// slow skips t under go test -short, saying why it is slow: chains through
// a real Appium. go test -short ./... keeps one chain here
// (TestChainEventsAndNATS); make test runs everything.
func slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow under -short (" + why + "); make test runs it")
	}
}

// chainEnv is one test's world: its own adb server, one simulated emulator
// with the default profile, and its own data dir. The data dir's local Appium
// (started by the first run) is stopped when the test ends.
type chainEnv struct {
	srv     *simtest.ADBServer
	emu     *sim.Emulator
	dev     *android.Device
	serial  string
	dataDir string
}

func newChainEnv(t testing.TB) *chainEnv {
	t.Helper()
	srv := simtest.StartADBServer(t)
	emu, dev := launchDefault(t, srv)
	e := &chainEnv{srv: srv, emu: emu, dev: dev, serial: emu.Serial(), dataDir: t.TempDir()}
	// Cleanups run last-in first-out: Appium stops before the adb server dies.
	t.Cleanup(func() {
		if _, err := appium.StopLocal(e.dataDir); err != nil {
			t.Errorf("stop local Appium: %v", err)
		}
	})
	return e
}

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

// launchEmulator starts one more default-profile emulator behind the env's adb
// server and returns its serial.
func (e *chainEnv) launchEmulator(t testing.TB) string {
	emu, _ := launchDefault(t, e.srv)
	return emu.Serial()
}

// runCmd is the `run` command as kong would fill it for these flags
// (defaults of Tenant and Output included).
func (e *chainEnv) runCmd(apk, sha string) runCmd {
	c := runCmd{ADBServer: e.srv.Addr(), Serial: e.serial, Package: appPkg, APK: apk, SHA256: sha,
		Tenant: "local", Output: "json"}
	c.DataDir = e.dataDir
	return c
}

// cliResult is what `run --output json` printed and returned.
type cliResult struct {
	Out  map[string]any
	Raw  string
	Err  error
	Took time.Duration
}

var stdoutMu sync.Mutex

// runCLI runs the `run` command's Run with stdout captured (it prints its
// JSON report there).
func runCLI(t testing.TB, c runCmd) cliResult {
	t.Helper()
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&buf, r); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	start := time.Now()
	runErr := c.Run(ctx, &Globals{LogLevel: "warn"})
	took := time.Since(start)
	cancel()
	os.Stdout = old
	w.Close()
	<-done
	res := cliResult{Raw: buf.String(), Err: runErr, Took: took}
	if s := strings.TrimSpace(res.Raw); s != "" {
		if err := json.Unmarshal([]byte(s), &res.Out); err != nil {
			t.Fatalf("run printed no JSON object: %v\n%s", err, res.Raw)
		}
	}
	return res
}

// openStore opens the data dir's embedded store (no host may be open on it).
func (e *chainEnv) openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(e.dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openTestHost opens the single-host assembly on the env's data dir;
// AppiumURL "" starts (or reuses) the data dir's local Appium.
func (e *chainEnv) openTestHost(t testing.TB, policyFile string, progress func(node, line string)) *agentd.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := agentd.OpenHost(ctx, agentd.HostConfig{DataDir: e.dataDir, ADBServer: e.srv.Addr(), PolicyFile: policyFile,
		Log: zerolog.Nop(), Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// submit runs c's request on an open host the way runCmd.Run does: request,
// DecodeSetup (refusal before any write), CreateRun, engine.Run, relay drain.
func submit(ctx context.Context, h *agentd.Host, c runCmd) (runID string, status agent.RunStatus, took time.Duration, err error) {
	req, err := c.request()
	if err != nil {
		return "", "", 0, err
	}
	run := agent.Run{RunID: ulid.MustNew(ulid.Now(), rand.Reader).String(), TenantID: c.Tenant, ProjectID: c.Project,
		Status: agent.RunPending, Graph: nodes.SetupGraphName}
	inputs, err := nodes.DecodeSetup(run, req)
	if err != nil {
		return "", "", 0, err
	}
	run.Serial = inputs.EnsureDevice.DeviceConfiguration.DeviceName
	run.Input, _ = json.Marshal(req)
	run.PolicyVersion = h.Policies.Current().PolicyVersion
	if err := h.Store.CreateRun(ctx, run); err != nil {
		return "", "", 0, err
	}
	start := time.Now()
	status, err = h.Engine.Run(ctx, run.RunID, h.Graph)
	took = time.Since(start)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	h.Relay.Drain(dctx)
	cancel()
	return run.RunID, status, took, err
}

// writeJSON writes v to a file in dir and returns its path.
func writeJSON(t testing.TB, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fixtureAPK(name string) string { return filepath.Join("..", "..", "fixtures", "apks", name) }

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

func anyContains(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// dumpsysPackage reads versionCode and lastUpdateTime of the app through the
// adb CLI, independently of the agent's parsers.
func (e *chainEnv) dumpsysPackage(t testing.TB) (versionCode, lastUpdate string) {
	t.Helper()
	out, _, code := e.srv.Run(t, "-s", e.serial, "shell", "dumpsys", "package", appPkg)
	if code != 0 {
		t.Fatalf("dumpsys package: exit %d\n%s", code, out)
	}
	if m := regexp.MustCompile(`versionCode=(\d+)`).FindStringSubmatch(out); m != nil {
		versionCode = m[1]
	}
	if m := regexp.MustCompile(`lastUpdateTime=([0-9: -]+)`).FindStringSubmatch(out); m != nil {
		lastUpdate = strings.TrimSpace(m[1])
	}
	if versionCode == "" || lastUpdate == "" {
		t.Fatalf("dumpsys package %s: no versionCode/lastUpdateTime:\n%s", appPkg, out)
	}
	return versionCode, lastUpdate
}
