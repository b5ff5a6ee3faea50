package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// repoRoot is the repository's root from this package's directory (go test
// runs a package's tests in its directory): fixtures/, the local Appium.
var repoRoot = filepath.Join("..", "..", "..")

// slow skips t under go test -short, saying why it is slow: chains through
// a real Appium, chaos, Postgres and NATS clusters. go test -short ./...
// keeps the binary's quick checks and one chain (TestServeRunsOnFourDevices);
// make test runs everything.
func slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow under -short (" + why + "); make test runs it")
	}
}

// daemon is a `screengraph-agent serve` process of a test.
type daemon struct {
	t        testing.TB
	bin      string
	srv      *simtest.ADBServer
	dataDir  string
	httpPort int
	natsPort int
	extra    []string
	env      []string
	cmd      *exec.Cmd
	done     chan error
	starts   int
}

func (d *daemon) URL() string { return "http://127.0.0.1:" + strconv.Itoa(d.httpPort) }

func (d *daemon) NATSURL() string { return "nats://127.0.0.1:" + strconv.Itoa(d.natsPort) }

// startDaemon starts serve on its own HTTP and NATS ports and data dir,
// against srv, and waits until /healthz answers.
func startDaemon(t testing.TB, srv *simtest.ADBServer, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, srv, nil, extra...)
}

// startDaemonEnv is startDaemon with extra environment variables.
func startDaemonEnv(t testing.TB, srv *simtest.ADBServer, env []string, extra ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, bin: buildAgent(t), srv: srv, dataDir: t.TempDir(),
		httpPort: simtest.FreePort(t), natsPort: simtest.FreePort(t), extra: extra, env: env}
	t.Cleanup(func() {
		d.stop()
		appium.StopLocal(d.dataDir)
	})
	d.start()
	return d
}

func (d *daemon) start() {
	t := d.t
	t.Helper()
	d.starts++
	args := append([]string{"--log-level", "debug", "serve", "--data-dir", d.dataDir, "--listen", "127.0.0.1:" + strconv.Itoa(d.httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(d.natsPort), "--adb-server", d.srv.Addr(),
		"--artifact-file-root", filepath.Join("fixtures", "apks")}, d.extra...) // the tests' file:// APKs
	cmd := exec.Command(d.bin, args...)
	cmd.Dir = repoRoot // the repo root: the local Appium is found there
	root, _ := filepath.Abs(cmd.Dir)
	cmd.Env = append(os.Environ(), "ANDROID_ADB_SERVER_PORT="+strconv.Itoa(d.srv.Port), "ADB_EMU=0",
		"APPIUM_HOME="+filepath.Join(root, ".cache", "appium-home"))
	cmd.Env = append(cmd.Env, d.env...)
	logf, err := os.OpenFile(filepath.Join(d.dataDir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== start %d\n", d.starts)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	d.done = make(chan error, 1)
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-d.done:
			d.cmd = nil
			t.Fatalf("serve exited at start: %v\n%s", err, d.log())
		default:
		}
		if resp, err := http.Get(d.URL() + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("serve not healthy after 90 s\n%s", d.log())
}

func (d *daemon) log() string {
	b, _ := os.ReadFile(filepath.Join(d.dataDir, "serve.log"))
	if len(b) > 20000 {
		b = b[len(b)-20000:]
	}
	return string(b)
}

// kill SIGKILLs the daemon and waits for it to be gone.
func (d *daemon) kill() {
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	d.cmd = nil
}

// stop sends SIGTERM and waits (bounded) for a clean exit.
func (d *daemon) stop() error {
	if d.cmd == nil {
		return nil
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.cmd = nil
		return err
	case <-time.After(30 * time.Second):
		d.kill()
		return fmt.Errorf("serve did not stop within 30 s of SIGTERM")
	}
}

// call does an HTTP request and decodes the JSON answer into out (if non-nil).
func (d *daemon) call(t testing.TB, method, path string, body any, out any) int {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.URL()+path, r)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// runBody is a run request for serial installing apk (signer sha) with the
// given modes ("" = the policy's).
func runBody(serial, apk, sha, install, launch string, waitIdle map[string]any) map[string]any {
	pa := map[string]any{"applicationUnderTestDescriptor": map[string]any{
		"androidPackageId": appPkg, "apkStorageObjectReference": apk, "expectedBuildSignatureSha256": sha}}
	if install != "" {
		pa["installationPolicy"] = install
	}
	la := map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": appPkg}}
	if launch != "" {
		la["launchAttachMode"] = launch
	}
	if waitIdle == nil {
		waitIdle = map[string]any{}
	}
	return map[string]any{
		"ensureDevice":   map[string]any{"deviceConfiguration": map[string]any{"platformName": "android", "deviceName": serial}},
		"provisionApp":   pa,
		"launchOrAttach": la,
		"waitIdle":       map[string]any{"idleHeuristicsConfiguration": waitIdle},
	}
}

func (d *daemon) submit(t testing.TB, body map[string]any) string {
	t.Helper()
	var resp struct {
		RunID  string `json:"runId"`
		Status string `json:"status"`
	}
	// The scheduler may lease the run before the response is written, so
	// RUNNING is as right an answer as PENDING.
	if st := d.call(t, "POST", "/v1/runs", body, &resp); st != http.StatusAccepted || resp.RunID == "" || (resp.Status != "PENDING" && resp.Status != "RUNNING") {
		t.Fatalf("submit: %d %+v", st, resp)
	}
	return resp.RunID
}

type runView struct {
	RunID         string          `json:"runId"`
	Status        agent.RunStatus `json:"status"`
	Serial        string          `json:"serial"`
	PolicyVersion int             `json:"policyVersion"`
	Nodes         []struct {
		Node          string `json:"node"`
		Outcome       string `json:"outcome"`
		PolicyVersion int    `json:"policyVersion"`
	} `json:"nodes"`
	Outputs map[string]json.RawMessage `json:"outputs"`
}

func (d *daemon) run(t testing.TB, id string) runView {
	t.Helper()
	var v runView
	if st := d.call(t, "GET", "/v1/runs/"+id, nil, &v); st != 200 {
		t.Fatalf("GET run %s: %d", id, st)
	}
	return v
}

// waitStatus polls until every run has one of want (or fails after timeout).
func (d *daemon) waitStatus(t testing.TB, ids []string, timeout time.Duration, want ...agent.RunStatus) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pending := ""
		for _, id := range ids {
			v := d.run(t, id)
			ok := false
			for _, w := range want {
				ok = ok || v.Status == w
			}
			if !ok {
				pending = id + " " + string(v.Status)
				break
			}
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s, want %v after %v\n%s", pending, want, timeout, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) events(t testing.TB, id string) []agent.Event {
	t.Helper()
	var v struct {
		Events []agent.Event `json:"events"`
	}
	if st := d.call(t, "GET", "/v1/runs/"+id+"/events", nil, &v); st != 200 {
		t.Fatalf("events of %s: %d", id, st)
	}
	return v.Events
}

func (d *daemon) leases(t testing.TB, all bool) []agent.Lease {
	t.Helper()
	var v struct {
		Leases []agent.Lease `json:"leases"`
	}
	q := ""
	if all {
		q = "?all=1"
	}
	if st := d.call(t, "GET", "/v1/leases"+q, nil, &v); st != 200 {
		t.Fatalf("leases: %d", st)
	}
	return v.Leases
}

// checkRunEvents checks one run's events: sequences 1..n, checksums
// recomputed independently, run.started first, exactly one terminal event
// last, and every node SUCCESS at most once (a finished node never re-runs).
func checkRunEvents(t testing.TB, evs []agent.Event, wantTerminal string) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	terminals := 0
	success := map[string]int{}
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("run %s: event %d has sequence %d", e.RunID, i, e.Sequence)
		}
		if got := independentChecksum(t, e); got != e.Checksum {
			t.Fatalf("run %s seq %d: checksum %s, recomputed %s", e.RunID, e.Sequence, e.Checksum, got)
		}
		switch e.Kind {
		case agent.KindRunFinished, agent.KindRunFailed, agent.KindRunCanceled:
			terminals++
		case agent.KindNodeFinished:
			p := decodeNode(t, e)
			if p.NodeExecutionOutcomeStatus == "SUCCESS" {
				success[p.NodeName]++
				if success[p.NodeName] > 1 {
					t.Fatalf("run %s: node %s finished with SUCCESS twice", e.RunID, p.NodeName)
				}
			}
		}
	}
	if evs[0].Kind != agent.KindRunStarted || terminals != 1 || evs[len(evs)-1].Kind != wantTerminal {
		t.Fatalf("run %s: first %s, last %s, %d terminal events; want %s once at the end", evs[0].RunID, evs[0].Kind, evs[len(evs)-1].Kind, terminals, wantTerminal)
	}
}

// checkLeaseHistory checks that no device was ever leased to two runs at
// once (every lease released before the next one of the device was
// acquired), that no lease is left active, and that fencing tokens grow.
//
// The checks go by device (the fleet key, host id and serial); the map it
// returns is by adb serial, which is what the callers' runs and simulated
// devices know.
func checkLeaseHistory(t testing.TB, all []agent.Lease) map[string][]agent.Lease {
	t.Helper()
	by := map[string][]agent.Lease{}
	bySerial := map[string][]agent.Lease{}
	var last int64
	for _, l := range all {
		if l.FencingToken <= last {
			t.Fatalf("fencing tokens do not grow: %d after %d", l.FencingToken, last)
		}
		last = l.FencingToken
		if l.ReleasedAt == nil {
			t.Fatalf("lease %d of %s (run %s) still active", l.FencingToken, l.Serial, l.RunID)
		}
		by[l.Device] = append(by[l.Device], l)
		bySerial[l.Serial] = append(bySerial[l.Serial], l)
	}
	for serial, ls := range by {
		sort.Slice(ls, func(i, j int) bool { return ls[i].AcquiredAt.Before(ls[j].AcquiredAt) })
		for i := 1; i < len(ls); i++ {
			if ls[i].AcquiredAt.Before(*ls[i-1].ReleasedAt) {
				t.Fatalf("device %s: lease %d (run %s) acquired at %v before lease %d (run %s) was released at %v",
					serial, ls[i].FencingToken, ls[i].RunID, ls[i].AcquiredAt, ls[i-1].FencingToken, ls[i-1].RunID, *ls[i-1].ReleasedAt)
			}
		}
	}
	return bySerial
}

// checkDeviceActions checks what the simulated devices did since t0 against
// what was committed: every install and activity start of appPkg happened
// under a lease of a run (by: the lease history by serial) and before that
// run's ProvisionApp / LaunchOrAttach result was committed (a finished node
// never ran again). It returns how many actions it checked.
func checkDeviceActions(t testing.TB, devs map[string]*android.Device, by map[string][]agent.Lease, all map[string][]agent.Event, t0 time.Time) int {
	t.Helper()
	committedAt := func(id, node string) time.Time {
		for _, e := range all[id] {
			if e.Kind == agent.KindNodeFinished {
				if p := decodeNode(t, e); p.NodeName == node && p.NodeExecutionOutcomeStatus == "SUCCESS" {
					ts, _ := time.Parse(agent.TimestampLayout, e.TS)
					return ts
				}
			}
		}
		t.Fatalf("run %s: %s never succeeded", id, node)
		return time.Time{}
	}
	actions := 0
	for serial, dev := range devs {
		for _, a := range dev.History() {
			if a.Package != appPkg || a.At.Before(t0) {
				continue
			}
			actions++
			var holder *agent.Lease
			for i, l := range by[serial] {
				if !a.At.Before(l.AcquiredAt) && !a.At.After(*l.ReleasedAt) {
					holder = &by[serial][i]
				}
			}
			if holder == nil {
				t.Fatalf("%s: %s of %s at %v under no lease", serial, a.Kind, a.Package, a.At)
			}
			if _, ok := all[holder.RunID]; !ok {
				continue // a run that did not finish: nothing was committed to compare
			}
			node := nodes.NodeProvisionApp
			if a.Kind == "start" {
				node = nodes.NodeLaunchOrAttach
			}
			if done := committedAt(holder.RunID, node); a.At.After(done.Add(time.Millisecond)) {
				t.Fatalf("%s: %s at %v for run %s, whose %s had finished at %v: a finished node ran again", serial, a.Kind, a.At, holder.RunID, node, done)
			}
		}
	}
	return actions
}

// chaosRNG is a chaos test's random source: seeded from the clock, or from
// SCREENGRAPH_CHAOS_SEED to replay a failure; the seed is logged. salt keeps
// each test's sequence its own.
func chaosRNG(t testing.TB, salt uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SCREENGRAPH_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("chaos seed %d (SCREENGRAPH_CHAOS_SEED=%d to replay)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^salt))
}

// tokenCreated is the JSON `token create --output json` prints (the
// binary's output contract, decoded here as any client would).
type tokenCreated struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token"`
}
