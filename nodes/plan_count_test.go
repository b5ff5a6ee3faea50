package nodes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// installWatch is the simulated device of the run, seeing the passes over
// JSON made so far at the moment of the install.
type installWatch struct {
	*countingDevice
	passes func() []string
	mu     sync.Mutex
	at     [][]string // the passes seen at each install
}

func (d *installWatch) Install(ctx context.Context, p string, o device.InstallOptions) error {
	d.mu.Lock()
	d.at = append(d.at, d.passes())
	d.mu.Unlock()
	return d.countingDevice.Install(ctx, p, o)
}

// sessionDriver is the Appium side of the run, minimal: this test is about
// the run request's way from the HTTP body to the adb install, not Appium.
type sessionDriver struct{}

func (sessionDriver) CreateSession(_ context.Context, caps map[string]any) (device.Session, error) {
	return device.Session{ID: "s1", Capabilities: map[string]any{"platformName": "Android", "udid": caps["appium:udid"]}}, nil
}
func (sessionDriver) Probe(context.Context, string) (device.Health, map[string]any, error) {
	return device.Healthy, map[string]any{}, nil
}
func (sessionDriver) DeleteSession(context.Context, string) error { return nil }
func (sessionDriver) PageSource(context.Context, string) (string, error) {
	return `<hierarchy rotation="0"><node package="com.example.app"/></hierarchy>`, nil
}

// TestSubmitDecodesRequestTwice follows one run request from POST /v1/runs
// (the real HTTP handler, the service, the daemon's SetupPreparer, the
// embedded store) through the engine's setup graph to the adb install on a
// simulated emulator (the real adb server) and counts every pass over JSON
// text the decoders of the request make (strictjson.OnPass: the strict
// check, the decode, the schema parse, a stored plan's decode, the old
// per-node unmarshals). At the install: two, the service's strict check and
// the Plan's decode; the nodes got their typed inputs from the plan.
func TestSubmitDecodesRequestTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newSimEnv(t)
	var mu sync.Mutex
	var passes []string
	dev := &installWatch{countingDevice: env.launch(t, nil), passes: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(passes)
	}}
	pols, err := policy.NewStore(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g, err := nodes.NewSetupGraph(nodes.SetupDeps{
		Ports:     nodes.Ports{Device: dev, Driver: sessionDriver{}},
		DeviceFor: func(string) device.Device { return dev },
		Sessions:  &nodes.MemorySessions{},
		Provision: nodes.ProvisionDeps{Artifacts: env.fetcher, Verifications: &nodes.MemoryVerifications{}, TempDir: t.TempDir()},
	})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: st, Leases: st, NewID: func() string { return ulid.Make().String() },
		Prepare: nodes.SetupPreparer{Policies: pols, Artifacts: env.fetcher},
		Holder:  "serve:test", HolderPrefix: "serve:", Tick: 20 * time.Millisecond, LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetRunner(agent.GraphRunner{Engine: &agent.Engine{Store: svc.Store(), Policies: pols, PollInterval: 10 * time.Millisecond}, Graph: g})
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, Graph: g, Gatherer: prometheus.NewRegistry()}))
	t.Cleanup(func() {
		srv.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		svc.Shutdown(sctx)
	})

	stop := strictjson.OnPass(func(kind, path string) {
		mu.Lock()
		passes = append(passes, kind+" "+path)
		mu.Unlock()
	})
	defer stop()
	ref := fixtureRef(t, "demo-v2.apk")
	body := fmt.Sprintf(`{"ensureDevice":{"deviceConfiguration":{"deviceName":%q}},`+
		`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","apkStorageObjectReference":%q,`+
		`"expectedBuildSignatureSha256":%q},"installationPolicy":"always_reinstall"},`+
		`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}},`+
		`"waitIdle":{"idleHeuristicsConfiguration":{"minQuietMillis":"300","maxWaitMillis":20000}}}`, dev.Serial(), ref, keyA)
	resp, err := http.Post(srv.URL+"/v1/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var sub httpapi.SubmitResponse
	err = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	atSubmit := dev.passes()

	// Wait for the run to end: Follow returns once it is terminal.
	if err := svc.Follow(ctx, agent.Admin(), sub.RunID, 0, func(agent.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	run, err := svc.Get(ctx, agent.Admin(), sub.RunID)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if run.Status != agent.RunFinished {
		st, _ := svc.LatestState(ctx, agent.Admin(), sub.RunID)
		t.Fatalf("run %s: %s (%+v)", sub.RunID, run.Status, st)
	}
	dev.mu.Lock()
	installs := dev.at
	dev.mu.Unlock()
	if len(installs) != 1 {
		t.Fatalf("%d installs, want 1 (ALWAYS_REINSTALL)", len(installs))
	}
	want := []string{"check $", "decode-tree $"}
	if !slices.Equal(atSubmit, want) {
		t.Errorf("passes at submit: %q, want %q", atSubmit, want)
	}
	if !slices.Equal(installs[0], want) {
		t.Errorf("passes over the run request from submit to the adb install: %d %q, want %d %q", len(installs[0]), installs[0], len(want), want)
	}
	t.Logf("passes over the request: at submit %q, at the install %q, at the end %q", atSubmit, installs[0], passes)
	if !bytes.Contains(run.Input, []byte(`"plan":{"version":1`)) {
		t.Errorf("stored input is not a version-1 plan: %s", run.Input)
	}
}
