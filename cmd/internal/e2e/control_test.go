package e2e

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// gatedAPKs serves the demo APK over HTTPS; a GET of /gate/NAME.apk is
// reported on Fetched and held until Release(NAME), so a test knows that
// ProvisionApp is in flight and decides when it ends.
type gatedAPKs struct {
	srv     *httptest.Server
	apk     []byte
	fetched chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
}

func newGatedAPKs(t *testing.T, apkPath string) *gatedAPKs {
	b, err := os.ReadFile(apkPath)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedAPKs{apk: b, fetched: make(chan string, 16), gates: map[string]chan struct{}{}}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/gate/"), ".apk")
		g.fetched <- name
		select {
		case <-g.gate(name):
		case <-time.After(2 * time.Minute):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/vnd.android.package-archive")
		w.Write(g.apk)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gatedAPKs) gate(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[name] == nil {
		g.gates[name] = make(chan struct{})
	}
	return g.gates[name]
}

func (g *gatedAPKs) URL(name string) string { return g.srv.URL + "/gate/" + name + ".apk" }

func (g *gatedAPKs) Release(name string) { close(g.gate(name)) }

// CertFile writes the server's certificate as PEM for SSL_CERT_FILE.
func (g *gatedAPKs) CertFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
	if err := os.WriteFile(p, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *gatedAPKs) waitFetch(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-g.fetched:
		if got != name {
			t.Fatalf("fetched %s, want %s", got, name)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never fetched", name)
	}
}

func kindsOf(evs []agent.Event) []string {
	var out []string
	for _, e := range evs {
		k := strings.TrimPrefix(e.Kind, "agent.")
		if e.Kind == agent.KindNodeFinished || e.Kind == agent.KindNodeStarted {
			var p struct {
				NodeName string `json:"nodeName"`
			}
			json.Unmarshal(e.Payload, &p)
			k += ":" + p.NodeName
		}
		if e.Kind != agent.KindNodeTokenDelta {
			out = append(out, k)
		}
	}
	return out
}

func count(evs []agent.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// cli runs the agent binary against the daemon and returns stdout and the exit code.
func (d *daemon) cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(d.bin, append(args, "--server", d.URL(), "--output", "json")...)
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return string(out), code
}

// TestServeControl: control through HTTP, NATS and the CLI alike. Each run's
// ProvisionApp is held in flight (its APK download waits for the test): a
// pause arriving then takes effect at the next boundary (PAUSED, with
// agent.run.paused, nothing else runs), resume finishes the run, cancel ends
// it with exactly one agent.run.canceled, a policy switch applies from the
// next node on (each output records its policyVersion); control of a
// finished run -> 409, of an unknown run -> 404; another tenant's subject is
// refused.
func TestServeControl(t *testing.T) {
	slow(t, "chains on 3 devices through Appium, paused and switched")
	srv := simtest.StartADBServer(t)
	var serials []string
	for range 3 {
		emu, _ := launchDefault(t, srv)
		serials = append(serials, emu.Serial())
	}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	g := newGatedAPKs(t, apk)
	pol := filepath.Join(t.TempDir(), "v2.yaml")
	os.WriteFile(pol, []byte("version: 2\nidleHeuristics:\n  minQuietMillis: 300\n"), 0o600)
	d := &daemon{}
	d = startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + g.CertFile(t)}, "--policy", pol)

	submit := func(serial, gate string) string {
		b := runBody(serial, g.URL(gate), sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil)
		b["policyVersion"] = 1
		return d.submit(t, b)
	}
	pausedThenResumed := func(t *testing.T, id, gate string, pause, switchTo2, resume func()) {
		g.waitFetch(t, gate)
		pause()
		switchTo2()
		g.Release(gate)
		d.waitStatus(t, []string{id}, time.Minute, agent.RunPaused)
		// Nothing may run while PAUSED: no fixed wait for that, the stored
		// order shows it (below, once resumed: run.resumed is the very next
		// event after run.paused, however long the pause polls ran).
		evs := d.events(t, id)
		got := strings.Join(kindsOf(evs), " ")
		want := "run.started node.started:EnsureDevice node.finished:EnsureDevice node.started:ProvisionApp node.finished:ProvisionApp run.paused"
		if got != want {
			t.Fatalf("while paused:\n got %s\nwant %s", got, want)
		}
		resume()
		d.waitStatus(t, []string{id}, time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
		evs = d.events(t, id)
		checkRunEvents(t, evs, agent.KindRunFinished)
		if count(evs, agent.KindRunResumed) != 1 {
			t.Fatalf("resumed events: %v", kindsOf(evs))
		}
		for i, e := range evs {
			if e.Kind == agent.KindRunPaused && (i+1 == len(evs) || evs[i+1].Kind != agent.KindRunResumed) {
				t.Fatalf("an event between run.paused and run.resumed (something ran while PAUSED): %v", kindsOf(evs))
			}
		}
		v := d.run(t, id)
		versions := map[string]int{}
		for _, n := range v.Nodes {
			versions[n.Node] = n.PolicyVersion
		}
		if versions["EnsureDevice"] != 1 || versions["ProvisionApp"] != 1 || versions["LaunchOrAttach"] != 2 || versions["WaitIdle"] != 2 {
			t.Fatalf("policy versions by node %v: the switch must apply from the node after the boundary", versions)
		}
		if v.PolicyVersion != 2 {
			t.Fatalf("GET /v1/runs/%s says policyVersion %d after the switch to 2", id, v.PolicyVersion)
		}
	}

	t.Run("HTTP", func(t *testing.T) {
		id := submit(serials[0], "http")
		pausedThenResumed(t, id, "http",
			func() { mustStatus(t, d.call(t, "POST", "/v1/runs/"+id+"/pause", nil, nil), 202) },
			func() {
				mustStatus(t, d.call(t, "POST", "/v1/runs/"+id+"/policy", map[string]int{"version": 2}, nil), 202)
			},
			func() { mustStatus(t, d.call(t, "POST", "/v1/runs/"+id+"/resume", nil, nil), 202) })
		for _, p := range []string{"cancel", "pause", "resume"} {
			mustStatus(t, d.call(t, "POST", "/v1/runs/"+id+"/"+p, nil, nil), 409)
			mustStatus(t, d.call(t, "POST", "/v1/runs/01J0000000000000000000NONE/"+p, nil, nil), 404)
		}
		mustStatus(t, d.call(t, "POST", "/v1/runs/"+id+"/policy", map[string]int{"version": 2}, nil), 409)
		mustStatus(t, d.call(t, "POST", "/v1/runs/01J0000000000000000000NONE/policy", map[string]int{"version": 2}, nil), 404)
		// An unknown policy version is refused before anything is recorded.
		id2 := submit(serials[0], "http-cancel")
		g.waitFetch(t, "http-cancel")
		mustStatus(t, d.call(t, "POST", "/v1/runs/"+id2+"/policy", map[string]int{"version": 99}, nil), 400)
		mustStatus(t, d.call(t, "POST", "/v1/runs/"+id2+"/cancel", nil, nil), 202)
		g.Release("http-cancel")
		d.waitStatus(t, []string{id2}, time.Minute, agent.RunCanceled)
		evs := d.events(t, id2)
		checkRunEvents(t, evs, agent.KindRunCanceled)
		if strings.Contains(strings.Join(kindsOf(evs), " "), "LaunchOrAttach") {
			t.Fatalf("a node ran after the cancel: %v", kindsOf(evs))
		}
	})

	t.Run("NATS", func(t *testing.T) {
		nc, err := nats.Connect(d.NATSURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		send := func(tenant, id string, msg map[string]any) map[string]any {
			b, _ := json.Marshal(msg)
			reply, err := nc.Request("agent.control."+tenant+"."+id, b, 10*time.Second)
			if err != nil {
				t.Fatalf("NATS control: %v", err)
			}
			var out map[string]any
			json.Unmarshal(reply.Data, &out)
			return out
		}
		id := submit(serials[1], "nats")
		pausedThenResumed(t, id, "nats",
			func() {
				// Another tenant's subject is refused and changes nothing.
				if r := send("other-tenant", id, map[string]any{"kind": agent.KindPauseRequested}); r["success"] != false {
					t.Fatalf("another tenant's pause: %v", r)
				}
				if r := send("local", id, map[string]any{"kind": agent.KindPauseRequested}); r["recorded"] != true {
					t.Fatalf("pause: %v", r)
				}
			},
			func() {
				if r := send("local", id, map[string]any{"kind": agent.KindPolicySwitchRequested, "policyVersion": 2}); r["recorded"] != true {
					t.Fatalf("switch: %v", r)
				}
			},
			func() {
				if r := send("local", id, map[string]any{"kind": agent.KindResumeRequested}); r["recorded"] != true {
					t.Fatalf("resume: %v", r)
				}
			})
		if r := send("local", id, map[string]any{"kind": agent.KindCancelRequested}); r["success"] != false {
			t.Fatalf("cancel of a finished run: %v", r)
		}
		id2 := submit(serials[1], "nats-cancel")
		g.waitFetch(t, "nats-cancel")
		// Fire-and-forget publish, as a plain NATS client would.
		b, _ := json.Marshal(map[string]any{"kind": agent.KindCancelRequested})
		if err := nc.Publish("agent.control.local."+id2, b); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		deadline := time.Now().Add(10 * time.Second)
		for d.run(t, id2).Status != agent.RunCancelRequested && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		g.Release("nats-cancel")
		d.waitStatus(t, []string{id2}, time.Minute, agent.RunCanceled)
		checkRunEvents(t, d.events(t, id2), agent.KindRunCanceled)
	})

	t.Run("CLI", func(t *testing.T) {
		id := submit(serials[2], "cli")
		pausedThenResumed(t, id, "cli",
			func() { mustCLI(t, d, 0, "pause", id) },
			func() { mustCLI(t, d, 0, "policy", "switch", id, "--version", "2") },
			func() { mustCLI(t, d, 0, "resume", id) })
		out := mustCLI(t, d, 2, "cancel", id)
		if !strings.Contains(out, `"success": false`) && !strings.Contains(out, `"success":false`) {
			t.Fatalf("cancel of a finished run: %s", out)
		}
		mustCLI(t, d, 2, "pause", "01J0000000000000000000NONE")
		id2 := submit(serials[2], "cli-cancel")
		g.waitFetch(t, "cli-cancel")
		mustCLI(t, d, 0, "cancel", id2)
		g.Release("cli-cancel")
		d.waitStatus(t, []string{id2}, time.Minute, agent.RunCanceled)
		checkRunEvents(t, d.events(t, id2), agent.KindRunCanceled)
		if out := mustCLI(t, d, 0, "runs", "show", id2); !strings.Contains(out, "CANCELED") {
			t.Fatalf("runs show: %s", out)
		}
	})
	checkLeaseHistory(t, d.leases(t, true))
}

func mustStatus(t *testing.T, got, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("HTTP status %d, want %d", got, want)
	}
}

func mustCLI(t *testing.T, d *daemon, wantCode int, args ...string) string {
	t.Helper()
	out, code := d.cli(t, args...)
	if code != wantCode {
		t.Fatalf("screengraph-agent %v: exit %d, want %d\n%s", args, code, wantCode, out)
	}
	return out
}

// TestServeDeviceGoneMidRun: the emulator disappears while ProvisionApp is in
// flight; the run's policy decides (device_offline is retried, then the run
// fails), no goroutine hangs on the device, and the lease is released
// device_absent.
func TestServeDeviceGoneMidRun(t *testing.T) {
	slow(t, "a chain through Appium whose device leaves")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	g := newGatedAPKs(t, apk)
	d := startDaemonEnv(t, srv, []string{"SSL_CERT_FILE=" + g.CertFile(t)})
	id := d.submit(t, runBody(emu.Serial(), g.URL("gone"), signerDigest(t, apk), "ALWAYS_REINSTALL", "", nil))
	g.waitFetch(t, "gone")
	emu.Close()
	srv.WaitState(t, emu.Serial(), "", 20*time.Second)
	g.Release("gone")
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFailed, agent.RunFinished, agent.RunCanceled)
	var v struct {
		Status agent.RunStatus `json:"status"`
		Error  struct {
			Errors []map[string]any `json:"errors"`
		} `json:"error"`
	}
	d.call(t, "GET", "/v1/runs/"+id, nil, &v)
	if v.Status != agent.RunFailed || len(v.Error.Errors) != 1 {
		t.Fatalf("run on a vanished device: %+v", v)
	}
	if id := v.Error.Errors[0]["error_id"]; id != string(agent.ErrDeviceNotFound) && id != string(agent.ErrDeviceOffline) {
		t.Fatalf("error %v, want device_not_found or device_offline", v.Error.Errors[0])
	}
	checkRunEvents(t, d.events(t, id), agent.KindRunFailed)
	ls := d.leases(t, true)
	checkLeaseHistory(t, ls)
	if ls[len(ls)-1].ReleaseReason != agent.LeaseDeviceAbsent {
		t.Fatalf("lease released %q, want device_absent", ls[len(ls)-1].ReleaseReason)
	}
	if st := d.call(t, "GET", "/healthz", nil, nil); st != 200 {
		t.Fatal("daemon unhealthy after the device left")
	}
}
