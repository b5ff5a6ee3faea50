package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"github.com/screengraph/screengraph-agent/cmd/internal/chaintest"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// The chain helpers shared with cmd/internal/e2e (cmd/internal/chaintest)
// that this package's tests and benchmarks name.
const appPkg = chaintest.AppPkg

var (
	fixtureAPK   = chaintest.FixtureAPK
	signerDigest = chaintest.SignerDigest
	decodeNode   = chaintest.DecodeNode
)

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
	emu, dev := chaintest.LaunchDefault(t, srv)
	e := &chainEnv{srv: srv, emu: emu, dev: dev, serial: emu.Serial(), dataDir: t.TempDir()}
	// Cleanups run last-in first-out: Appium stops before the adb server dies.
	t.Cleanup(func() {
		if _, err := appium.StopLocal(e.dataDir); err != nil {
			t.Errorf("stop local Appium: %v", err)
		}
	})
	return e
}

// launchEmulator starts one more default-profile emulator behind the env's adb
// server and returns its serial.
func (e *chainEnv) launchEmulator(t testing.TB) string {
	emu, _ := chaintest.LaunchDefault(t, e.srv)
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
