package main

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/screengraph/screengraph-agent/cmd/internal/chaintest"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

var setupOrder = []string{nodes.NodeEnsureDevice, nodes.NodeProvisionApp, nodes.NodeLaunchOrAttach, nodes.NodeWaitIdle}

// checkEvents checks a run's stored event stream: sequences 1..n without
// gaps, every checksum recomputed independently, agent.run.started first,
// node events nested started -> token_delta* -> finished, exactly one
// terminal event and it is last. It returns the node names of the
// started/finished pairs in order.
func checkEvents(t *testing.T, evs []agent.Event, terminal string) []string {
	t.Helper()
	if len(evs) < 2 {
		t.Fatalf("%d events", len(evs))
	}
	var pairs []string
	open := ""
	terminals := 0
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d (gap or disorder)", i, e.Sequence)
		}
		if got := chaintest.IndependentChecksum(t, e); got != e.Checksum {
			t.Errorf("sequence %d %s: stored checksum %s, recomputed %s", e.Sequence, e.Kind, e.Checksum, got)
		}
		if e.RunID != evs[0].RunID || e.Version != "1" || e.TenantID != "local" {
			t.Errorf("sequence %d: envelope %+v", e.Sequence, e)
		}
		if _, err := time.Parse(agent.TimestampLayout, e.TS); err != nil {
			t.Errorf("sequence %d: ts %q: %v", e.Sequence, e.TS, err)
		}
		switch e.Kind {
		case agent.KindRunStarted:
			if i != 0 {
				t.Errorf("agent.run.started at sequence %d", e.Sequence)
			}
		case agent.KindNodeStarted:
			p := decodeNode(t, e)
			if open != "" {
				t.Errorf("sequence %d: %s started while %s is open", e.Sequence, p.NodeName, open)
			}
			open = p.NodeName
		case agent.KindNodeTokenDelta:
			if p := decodeNode(t, e); p.NodeName != open {
				t.Errorf("sequence %d: token_delta of %s while %q is open", e.Sequence, p.NodeName, open)
			}
		case agent.KindNodeFinished:
			p := decodeNode(t, e)
			if p.NodeName != open {
				t.Errorf("sequence %d: %s finished while %q is open", e.Sequence, p.NodeName, open)
			}
			pairs = append(pairs, p.NodeName)
			open = ""
		case agent.KindRunFinished, agent.KindRunFailed, agent.KindRunCanceled:
			terminals++
			if e.Kind != terminal || i != len(evs)-1 {
				t.Errorf("terminal %s at sequence %d of %d, want %s last", e.Kind, e.Sequence, len(evs), terminal)
			}
		default:
			t.Errorf("sequence %d: unexpected kind %s", e.Sequence, e.Kind)
		}
	}
	if terminals != 1 || open != "" {
		t.Errorf("%d terminal events, node %q left open", terminals, open)
	}
	return pairs
}

func runEvents(t *testing.T, st agent.Store, runID string) []agent.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), agent.Admin(), runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkJetStream reads the run's subjects from the data dir's JetStream with
// an ordered consumer and compares with the stored events: each once (by
// eventId, Nats-Msg-Id = eventId), in sequence order, on its subject.
func checkJetStream(t *testing.T, js jetstream.JetStream, evs []agent.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := natsbus.StreamConfig(); !slices.Equal(info.Config.Subjects, want.Subjects) || info.Config.Duplicates != want.Duplicates {
		t.Errorf("stream config %v dup %v, want %v %v", info.Config.Subjects, info.Config.Duplicates, want.Subjects, want.Duplicates)
	}
	runID := evs[0].RunID
	cons, err := js.OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{snapshots.Subject("local", runID, "")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for len(got) < len(evs) {
		batch, err := cons.Fetch(len(evs)-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			got = append(got, m)
			n++
		}
		if n == 0 {
			break
		}
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) || ci.NumPending != 0 {
		t.Fatalf("JetStream delivered %d messages (+%d pending) for run %s, store has %d events", len(got), ci.NumPending, runID, len(evs))
	}
	seen := map[string]bool{}
	for i, m := range got {
		var e agent.Event
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want := evs[i]
		if seen[e.EventID] {
			t.Errorf("eventId %s delivered twice", e.EventID)
		}
		seen[e.EventID] = true
		if e.EventID != want.EventID || e.Sequence != want.Sequence || e.Checksum != want.Checksum || string(e.Payload) != string(want.Payload) {
			t.Errorf("message %d is sequence %d %s, store has sequence %d %s", i, e.Sequence, e.EventID, want.Sequence, want.EventID)
		}
		if id := m.Headers().Get(nats.MsgIdHdr); id != e.EventID {
			t.Errorf("sequence %d: Nats-Msg-Id %q, eventId %s", e.Sequence, id, e.EventID)
		}
		if m.Subject() != snapshots.Subject("local", runID, e.Kind) {
			t.Errorf("sequence %d: subject %s", e.Sequence, m.Subject())
		}
	}
}

type provisionOut struct {
	nodes.ProvisionAppOutput
}

func sessionOf(t *testing.T, evs []agent.Event) string {
	t.Helper()
	var ed nodes.EnsureDeviceOutput
	chaintest.LastOutput(t, evs, nodes.NodeEnsureDevice, &ed)
	if ed.DeviceRuntimeContext == nil || ed.DeviceRuntimeContext.DriverSessionID == "" {
		t.Fatalf("EnsureDevice output without a session: %+v", ed)
	}
	return ed.DeviceRuntimeContext.DriverSessionID
}

// TestChainEventsAndNATS runs the setup chain twice through the `run`
// command (embedded store, in-process JetStream, local Appium, real adb
// server, simulated emulator) on demo-v2.apk and checks the event stream in
// the store and on JetStream, then the warm second run.
func TestChainEventsAndNATS(t *testing.T) {
	env := newChainEnv(t)
	apk := fixtureAPK("demo-v2.apk")
	sha := signerDigest(t, apk)
	c := env.runCmd(apk, sha)

	first := runCLI(t, c)
	if first.Err != nil {
		t.Fatalf("run: %v\n%s", first.Err, first.Raw)
	}
	if first.Out["success"] != true || first.Out["status"] != string(agent.RunFinished) {
		t.Fatalf("run printed %s", first.Raw)
	}
	vc1, lut1 := env.dumpsysPackage(t)
	second := runCLI(t, c)
	if second.Err != nil {
		t.Fatalf("second run: %v\n%s", second.Err, second.Raw)
	}
	vc2, lut2 := env.dumpsysPackage(t)

	st := env.openStore(t)
	defer st.Close()
	id1, id2 := first.Out["runId"].(string), second.Out["runId"].(string)
	var all [][]agent.Event
	for _, id := range []string{id1, id2} {
		r, err := st.GetRun(context.Background(), agent.Admin(), id)
		if err != nil || r.Status != agent.RunFinished || r.Serial != env.serial {
			t.Fatalf("run %s: %+v %v", id, r, err)
		}
		evs := runEvents(t, st, id)
		if pairs := checkEvents(t, evs, agent.KindRunFinished); !slices.Equal(pairs, setupOrder) {
			t.Errorf("run %s node pairs %v, want %v", id, pairs, setupOrder)
		}
		all = append(all, evs)
	}

	// First run: v2 installed over the preinstalled v1.
	var p1, p2 nodes.ProvisionAppOutput
	chaintest.LastOutput(t, all[0], nodes.NodeProvisionApp, &p1)
	if o := p1.ApplicationProvisioningOutcome; o == nil || *o.InstalledVersionCode != 2 || o.SignatureValidationStatus != nodes.SignatureMatched {
		t.Errorf("first ProvisionApp outcome %+v", o)
	}
	if !anyContains(chaintest.DeltaLines(t, all[0], nodes.NodeProvisionApp), "installing com.example.app versionCode 2") {
		t.Errorf("first run did not install: %q", chaintest.DeltaLines(t, all[0], nodes.NodeProvisionApp))
	}
	// Second run: same session, SAME + MATCHED, nothing installed.
	if s1, s2 := sessionOf(t, all[0]), sessionOf(t, all[1]); s1 != s2 {
		t.Errorf("driverSessionId %s then %s: not reused", s1, s2)
	}
	if !anyContains(chaintest.DeltaLines(t, all[1], nodes.NodeEnsureDevice), "reusing Appium session") {
		t.Errorf("EnsureDevice lines %q", chaintest.DeltaLines(t, all[1], nodes.NodeEnsureDevice))
	}
	chaintest.LastOutput(t, all[1], nodes.NodeProvisionApp, &p2)
	if o := p2.ApplicationProvisioningOutcome; o == nil || o.AppPresenceStatus != nodes.AppPresent || *o.InstalledVersionCode != 2 ||
		o.SignatureValidationStatus != nodes.SignatureMatched {
		t.Errorf("second ProvisionApp outcome %+v", o)
	}
	lines := chaintest.DeltaLines(t, all[1], nodes.NodeProvisionApp)
	if !anyContains(lines, "install state SAME") || anyContains(lines, "installing ") {
		t.Errorf("second ProvisionApp lines %q", lines)
	}
	if vc1 != "2" || vc2 != "2" || lut1 != lut2 {
		t.Errorf("device: versionCode %s -> %s, lastUpdateTime %q -> %q (want 2, unchanged)", vc1, vc2, lut1, lut2)
	}
	t.Logf("first run: %v ms in the engine (%v with set-up, Appium start included); second run: %v ms (%v with set-up); %d and %d events",
		first.Out["tookMillis"], first.Took.Round(time.Millisecond), second.Out["tookMillis"], second.Took.Round(time.Millisecond), len(all[0]), len(all[1]))

	// JetStream: the relay published every event of both runs, once each, in order.
	for _, evs := range all {
		checkStream(t, env.dataDir, evs)
	}
}

// TestChainSignatureMismatchNothingInstalled: demo-v2 re-signed in the test
// with key B while the request expects key A: the run FAILS in ProvisionApp
// with signature_mismatch before anything is installed.
func TestChainSignatureMismatchNothingInstalled(t *testing.T) {
	slow(t, "a chain through Appium to a signature mismatch")
	env := newChainEnv(t)
	orig := fixtureAPK("demo-v2.apk")
	keyA := signerDigest(t, orig)
	resigned := filepath.Join(t.TempDir(), "demo-v2-resigned.apk")
	keys, _ := filepath.Abs(filepath.Join("..", "..", "fixtures", "keys"))
	// Passwords and alias as in fixtures/apks/build.sh.
	cmd := exec.Command("apksigner", "sign", "--ks", filepath.Join(keys, "test-b.jks"), "--ks-pass", "pass:android",
		"--key-pass", "pass:android", "--ks-key-alias", "test", "--out", resigned, orig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apksigner sign: %v\n%s", err, out)
	}
	if keyB := signerDigest(t, resigned); keyB == keyA {
		t.Fatalf("re-signing kept signer %s", keyA)
	}
	vcBefore, lutBefore := env.dumpsysPackage(t)

	res := runCLI(t, env.runCmd(resigned, keyA))
	var ee cli.ExitError
	if !errors.As(res.Err, &ee) || ee.Code != 2 {
		t.Fatalf("run returned %v, want exit code 2\n%s", res.Err, res.Raw)
	}
	// The CLI's JSON is the agent error format.
	if res.Out["status"] != string(agent.RunFailed) || res.Out["success"] != false {
		t.Fatalf("printed %s", res.Raw)
	}
	errs, _ := res.Out["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("errors %v", res.Out["errors"])
	}
	e0 := errs[0].(map[string]any)
	if e0["error_id"] != string(agent.ErrSignatureMismatch) || e0["node_id"] != nodes.NodeProvisionApp || e0["category"] != agent.CategoryAPIValidation {
		t.Errorf("errors[0] %v", e0)
	}
	if cp := res.Out["checkpoint"].(map[string]any); cp["failed_node"] != nodes.NodeProvisionApp {
		t.Errorf("checkpoint %v", cp)
	}

	st := env.openStore(t)
	defer st.Close()
	runID := res.Out["runId"].(string)
	r, err := st.GetRun(context.Background(), agent.Admin(), runID)
	if err != nil || r.Status != agent.RunFailed {
		t.Fatalf("run row %+v %v", r, err)
	}
	evs := runEvents(t, st, runID)
	if pairs := checkEvents(t, evs, agent.KindRunFailed); !slices.Equal(pairs, setupOrder[:2]) {
		t.Errorf("node pairs %v", pairs)
	}
	var pa nodes.ProvisionAppOutput
	chaintest.LastOutput(t, evs, nodes.NodeProvisionApp, &pa)
	if pa.ErrorID == nil || *pa.ErrorID != agent.ErrSignatureMismatch || pa.NodeExecutionOutcomeStatus != nodes.OutcomeFailure ||
		pa.Retryable == nil || *pa.Retryable {
		t.Errorf("ProvisionApp output common %+v", pa.Common)
	}
	if o := pa.ApplicationProvisioningOutcome; o == nil || *o.InstalledVersionCode != 1 {
		t.Errorf("outcome %+v, want the preinstalled versionCode 1", o)
	}
	if lines := chaintest.DeltaLines(t, evs, nodes.NodeProvisionApp); anyContains(lines, "installing ") || anyContains(lines, "uninstalling ") {
		t.Errorf("ProvisionApp touched the device: %q", lines)
	}
	// The agent error report built from the store's latest snapshot.
	sn, err := st.LatestSnapshot(context.Background(), agent.Admin(), runID)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := agent.DecodeRunState(sn)
	if err != nil {
		t.Fatal(err)
	}
	g, err := nodes.NewSetupGraph(nodes.SetupDeps{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := agent.NewErrorReport(g, rs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Errors) != 1 || rep.Errors[0].Context["error_id"] != string(agent.ErrSignatureMismatch) || rep.Errors[0].NodeID != nodes.NodeProvisionApp ||
		!strings.Contains(rep.Errors[0].Message, keyA) {
		t.Errorf("error report %+v", rep)
	}
	if steps := rep.Execution.Steps; len(steps) != 4 || steps[0].Status != agent.StepCompleted || steps[1].Status != agent.StepFailed ||
		steps[2].Status != agent.StepNotExecuted {
		t.Errorf("execution steps %+v", steps)
	}
	// The device, read through adb: still the preinstalled build.
	vc, lut := env.dumpsysPackage(t)
	if vc != "1" || vc != vcBefore || lut != lutBefore {
		t.Errorf("device versionCode %s -> %s, lastUpdateTime %q -> %q", vcBefore, vc, lutBefore, lut)
	}
	if out, _, _ := env.srv.Run(t, "-s", env.serial, "shell", "cmd", "package", "list", "packages", "--show-versioncode", appPkg); strings.TrimSpace(out) != "package:com.example.app versionCode:1" {
		t.Errorf("package list says %q", out)
	}
}

// TestChainDeviceOfflineRetriedByPolicy takes the emulator offline for 1.5 s
// (Emulator.SetOffline) during the chain, under a policy (YAML file, version
// 7) that retries device_offline for ProvisionApp every 300 ms:
//
//   - run A: offline at ProvisionApp's first progress line (after its device
//     reads). ProvisionApp waits the install's device_offline out itself
//     (OfflineGrace, one attempt).
//   - run B: offline at EnsureDevice's last line, so ProvisionApp's first
//     device read fails: the engine retries ProvisionApp by the policy.
//
// Each run must FINISH. A third run without a fault must finish too.
func TestChainDeviceOfflineRetriedByPolicy(t *testing.T) {
	slow(t, "chains through Appium with the device offline, retried")
	env := newChainEnv(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(`version: 7
nodeRetries:
  ProvisionApp:
    maxAttempts: 8
    initialBackoff: 300ms
    maxBackoff: 300ms
    multiplier: 1
    retryOn: [device_offline, timeout, network_error]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		trigger func(node, line string) bool
		back    chan struct{}
	)
	// The device goes offline synchronously inside the node's progress
	// callback, so the node's next device call meets it; it comes back 1.5 s later.
	progress := func(node, line string) {
		mu.Lock()
		fire := trigger != nil && trigger(node, line)
		if fire {
			trigger = nil
		}
		ch := back
		mu.Unlock()
		if !fire {
			return
		}
		t.Logf("fault: %s offline at %s line %q", env.serial, node, line)
		env.emu.SetOffline(true)
		time.AfterFunc(1500*time.Millisecond, func() { env.emu.SetOffline(false); close(ch) })
	}
	h := env.openTestHost(t, pol, progress)
	defer h.Close(context.Background())
	if v := h.Policies.Current().PolicyVersion; v != 7 {
		t.Fatalf("policy version %d in force", v)
	}
	apk := fixtureAPK("demo-v2.apk")
	c := env.runCmd(apk, signerDigest(t, apk))
	run := func(name string, when func(node, line string) bool) []agent.Event {
		mu.Lock()
		trigger, back = when, make(chan struct{})
		ch := back
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		runID, status, took, err := submit(ctx, h, c)
		if err != nil {
			t.Fatal(err)
		}
		if when != nil {
			<-ch
		}
		evs := runEvents(t, h.Store, runID)
		checkEvents(t, evs, map[agent.RunStatus]string{agent.RunFinished: agent.KindRunFinished, agent.RunFailed: agent.KindRunFailed}[status])
		for _, f := range chaintest.FinishedOf(t, evs, nodes.NodeProvisionApp) {
			id := "-"
			if f.ErrorID != nil {
				id = *f.ErrorID
			}
			t.Logf("run %s: ProvisionApp attempt %d %s %s (%d ms)", name, f.Attempt, f.NodeExecutionOutcomeStatus, id, f.DurationMillis)
		}
		t.Logf("run %s: %s in %v", name, status, took.Round(time.Millisecond))
		if status != agent.RunFinished {
			rs, _ := h.Store.LatestSnapshot(ctx, agent.Admin(), runID)
			st, _ := agent.DecodeRunState(rs)
			rep, _ := agent.NewErrorReport(h.Graph, st)
			t.Errorf("run %s: status %s, want FINISHED: %s", name, status, rep.Error)
		}
		return evs
	}

	// A: the install meets the offline device and waits it out in the node.
	evs := run("A", func(node, _ string) bool { return node == nodes.NodeProvisionApp })
	fa := chaintest.FinishedOf(t, evs, nodes.NodeProvisionApp)
	if len(fa) != 1 || fa[0].NodeExecutionOutcomeStatus != string(agent.OutcomeSuccess) ||
		!anyContains(chaintest.DeltaLines(t, evs, nodes.NodeProvisionApp), "waiting up to") {
		t.Errorf("run A: ProvisionApp attempts %+v, lines %q", fa, chaintest.DeltaLines(t, evs, nodes.NodeProvisionApp))
	}
	if vc, _ := env.dumpsysPackage(t); vc != "2" {
		t.Errorf("after run A the device has versionCode %s", vc)
	}

	// B: ProvisionApp's first read fails fast; the policy retries it.
	evs = run("B", func(node, line string) bool {
		return node == nodes.NodeEnsureDevice && (strings.Contains(line, " ready on ") || strings.Contains(line, "reusing Appium session"))
	})
	fb := chaintest.FinishedOf(t, evs, nodes.NodeProvisionApp)
	if len(fb) < 2 || fb[0].ErrorID == nil || (*fb[0].ErrorID != string(agent.ErrDeviceOffline) && *fb[0].ErrorID != string(agent.ErrTimeout)) ||
		fb[len(fb)-1].NodeExecutionOutcomeStatus != string(agent.OutcomeSuccess) {
		t.Errorf("run B: ProvisionApp attempts %+v, want >= 2, the first device_offline/timeout, the last SUCCESS", fb)
	}
	starts := 0
	for _, e := range evs {
		if e.Kind == agent.KindNodeStarted && decodeNode(t, e).NodeName == nodes.NodeProvisionApp {
			starts++
		}
	}
	if starts != len(fb) {
		t.Errorf("run B: %d ProvisionApp started events, %d finished", starts, len(fb))
	}
	for _, f := range fb[:len(fb)-1] {
		var p struct {
			RetryBackoffMillis *int64 `json:"retryBackoffMillis"`
		}
		for _, e := range evs {
			if e.Kind == agent.KindNodeFinished {
				if d := decodeNode(t, e); d.NodeName == nodes.NodeProvisionApp && d.Attempt == f.Attempt {
					json.Unmarshal(e.Payload, &p)
				}
			}
		}
		if p.RetryBackoffMillis == nil || *p.RetryBackoffMillis != 300 {
			t.Errorf("run B: attempt %d retryBackoffMillis %v, want 300 (policy v7)", f.Attempt, p.RetryBackoffMillis)
		}
	}

	// C: no fault. EnsureDevice's REUSE_OR_CREATE must not keep a session
	// whose UiAutomator2 instrumentation died with the connection.
	evs = run("C", nil)
	sid := sessionOf(t, evs)
	health, details, err := h.Driver.Probe(context.Background(), sid)
	t.Logf("run C reused session %s; Probe now says %s %v (err %v)", sid, health, details["reason"], err)
}

// TestChainModesAndErrors runs the `run` command through a table of modes
// and failures on one simulated emulator with one local Appium (the data
// dir's, reused by every run). Cases depend on their predecessors' device
// state, so they run in order.
func TestChainModesAndErrors(t *testing.T) {
	slow(t, "chains through Appium in every install and launch mode")
	env := newChainEnv(t)
	v2, v1 := fixtureAPK("demo-v2.apk"), fixtureAPK("demo-v1.apk")
	keyA := signerDigest(t, v2)
	pid := func() string {
		out, _, _ := env.srv.Run(t, "-s", env.serial, "shell", "pidof", appPkg)
		return strings.TrimSpace(out)
	}
	var lastSession, pidBefore string
	type tc struct {
		name      string
		apk       string
		activity  string
		input     map[string]any
		before    func(t *testing.T)
		wantErr   agent.ErrorID // "" = FINISHED
		wantNode  string
		check     func(t *testing.T, evs []agent.Event, res cliResult)
		refusedAt string // a JSON path: the request is refused before a run row exists
	}
	idle := func(v any) map[string]any {
		return map[string]any{"idleHeuristicsConfiguration": map[string]any{"maxWaitMillis": v}}
	}
	cases := []tc{
		{name: "baseline installs v2", apk: v2},
		{name: "downgrade refused under INSTALL_IF_MISSING", apk: v1, wantErr: agent.ErrVersionDowngrade, wantNode: nodes.NodeProvisionApp,
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				if vc, _ := env.dumpsysPackage(t); vc != "2" {
					t.Errorf("versionCode %s after a refused downgrade", vc)
				}
			}},
		// With the app in front LAUNCH_OR_ATTACH attaches without looking at
		// the activity name, so the app goes to the background first (HOME).
		{name: "missing activity", apk: v2, activity: "com.example.app.NoSuch", wantErr: agent.ErrActivityNotFound, wantNode: nodes.NodeLaunchOrAttach,
			before: func(t *testing.T) {
				if _, _, code := env.srv.Run(t, "-s", env.serial, "shell", "input", "keyevent", "3"); code != 0 {
					t.Fatalf("input keyevent 3: exit %d", code)
				}
			}},
		{name: "never-idle SpinnerActivity", apk: v2, activity: "com.example.app.SpinnerActivity",
			input:   map[string]any{"launchOrAttach": map[string]any{"launchAttachMode": "FORCE_RESTART"}, "waitIdle": idle(1500)},
			wantErr: agent.ErrIdleTimeout, wantNode: nodes.NodeWaitIdle,
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				var start, end time.Time
				for _, e := range evs {
					if e.Kind != agent.KindNodeStarted && e.Kind != agent.KindNodeFinished {
						continue
					}
					if decodeNode(t, e).NodeName != nodes.NodeWaitIdle {
						continue
					}
					ts, _ := time.Parse(agent.TimestampLayout, e.TS)
					if e.Kind == agent.KindNodeStarted {
						start = ts
					} else {
						end = ts
					}
				}
				d := end.Sub(start)
				t.Logf("WaitIdle idle_timeout after %v (maxWaitMillis 1500)", d)
				if d < 1500*time.Millisecond || d > 3000*time.Millisecond {
					t.Errorf("WaitIdle took %v, want within [1.5 s, 3 s]", d)
				}
			}},
		{name: "FORCE_RESTART with the app in front", apk: v2,
			input:  map[string]any{"launchOrAttach": map[string]any{"launchAttachMode": "FORCE_RESTART"}},
			before: func(t *testing.T) { pidBefore = pid() },
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				if p := pid(); p == "" || p == pidBefore {
					t.Errorf("FORCE_RESTART: pid %q -> %q", pidBefore, p)
				}
			}},
		{name: "ATTACH_ONLY with the app in front", apk: v2,
			input:  map[string]any{"launchOrAttach": map[string]any{"launchAttachMode": "ATTACH_ONLY"}},
			before: func(t *testing.T) { pidBefore = pid() },
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				var lo nodes.LaunchOrAttachOutput
				chaintest.LastOutput(t, evs, nodes.NodeLaunchOrAttach, &lo)
				if fc := lo.ApplicationForegroundContext; fc == nil || fc.CurrentActivityName != "com.example.app.HomeActivity" {
					t.Errorf("foreground %+v", fc)
				}
				if p := pid(); p != pidBefore {
					t.Errorf("ATTACH_ONLY: pid %q -> %q", pidBefore, p)
				}
			}},
		{name: "CREATE_NEW gives a new session", apk: v2,
			input: map[string]any{"ensureDevice": map[string]any{"driverReusePolicy": "CREATE_NEW"}},
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				if s := sessionOf(t, evs); s == lastSession {
					t.Errorf("CREATE_NEW kept session %s", s)
				}
			}},
		{name: "coercible input", apk: v2,
			input: map[string]any{"waitIdle": idle("5000"), "launchOrAttach": map[string]any{"launchAttachMode": "force_restart"}},
			check: func(t *testing.T, evs []agent.Event, _ cliResult) {
				if l := chaintest.DeltaLines(t, evs, nodes.NodeWaitIdle); !anyContains(l, "within 5s") {
					t.Errorf("WaitIdle did not run with maxWaitMillis 5000: %q", l)
				}
				if l := chaintest.DeltaLines(t, evs, nodes.NodeLaunchOrAttach); !anyContains(l, "am start-activity -W -S ") {
					t.Errorf("LaunchOrAttach did not force-restart: %q", l)
				}
			}},
		{name: "impossible input", apk: v2, input: map[string]any{"waitIdle": idle("soon")},
			refusedAt: "/idleHeuristicsConfiguration/maxWaitMillis"},
	}
	for _, k := range cases {
		ok := t.Run(k.name, func(t *testing.T) {
			c := env.runCmd(k.apk, keyA)
			c.Activity = k.activity
			if k.input != nil {
				c.Input = writeJSON(t, t.TempDir(), "input.json", k.input)
			}
			if k.before != nil {
				k.before(t)
			}
			countRuns := func() int {
				st := env.openStore(t)
				defer st.Close()
				runs, err := st.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				return len(runs)
			}
			nBefore := countRuns()
			res := runCLI(t, c)
			if k.refusedAt != "" {
				if res.Err == nil || !strings.Contains(res.Err.Error(), k.refusedAt) {
					t.Fatalf("run returned %v, want a refusal naming %s", res.Err, k.refusedAt)
				}
				errs, _ := res.Out["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["error_id"] != string(agent.ErrInvalidRequest) ||
					!strings.Contains(errs[0].(map[string]any)["message"].(string), k.refusedAt) {
					t.Errorf("printed %s", res.Raw)
				}
				if n := countRuns(); n != nBefore {
					t.Errorf("runs %d -> %d: a refused request wrote a run row", nBefore, n)
				}
				t.Logf("refused: %v", res.Err)
				return
			}
			runID, _ := res.Out["runId"].(string)
			if runID == "" {
				t.Fatalf("run returned %v and printed %s", res.Err, res.Raw)
			}
			st := env.openStore(t)
			defer st.Close()
			r, err := st.GetRun(context.Background(), agent.Admin(), runID)
			if err != nil {
				t.Fatal(err)
			}
			evs := runEvents(t, st, runID)
			if k.wantErr == "" {
				if res.Err != nil || r.Status != agent.RunFinished {
					t.Fatalf("status %s, err %v\n%s", r.Status, res.Err, res.Raw)
				}
				if pairs := checkEvents(t, evs, agent.KindRunFinished); !slices.Equal(pairs, setupOrder) {
					t.Errorf("node pairs %v", pairs)
				}
			} else {
				if r.Status != agent.RunFailed || res.Err == nil {
					t.Fatalf("status %s, err %v, want FAILED with %s\n%s", r.Status, res.Err, k.wantErr, res.Raw)
				}
				checkEvents(t, evs, agent.KindRunFailed)
				f := chaintest.FinishedOf(t, evs, k.wantNode)
				if len(f) == 0 || f[len(f)-1].ErrorID == nil || *f[len(f)-1].ErrorID != string(k.wantErr) {
					t.Errorf("%s finished %+v, want errorId %s", k.wantNode, f, k.wantErr)
				}
				errs, _ := res.Out["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["error_id"] != string(k.wantErr) || errs[0].(map[string]any)["node_id"] != k.wantNode {
					t.Errorf("error report %s", res.Raw)
				}
			}
			if k.check != nil {
				k.check(t, evs, res)
			}
			if len(chaintest.FinishedOf(t, evs, nodes.NodeEnsureDevice)) > 0 {
				lastSession = sessionOf(t, evs)
			}
			t.Logf("%s in %v", r.Status, res.Took.Round(time.Millisecond))
		})
		if !ok && k.name == "baseline installs v2" {
			t.FailNow()
		}
	}
}
