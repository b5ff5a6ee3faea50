package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/ui/uitest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// fleetDevices is how many devices the daemon of the devices-page tests
// has (the bounded-cost figure).
const fleetDevices = 32

// failNode is the graph's only node: a run whose request says "fail" fails
// (boot_timeout, a device failure); any other waits for its gate, then succeeds.
type failNode struct{ apkNode }

func (n *failNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	var req struct {
		Fail bool `json:"fail"`
	}
	json.Unmarshal(in.Run.Input, &req)
	if req.Fail {
		return agent.NodeResult{Output: &agenttest.Output{Echo: "failed", Attempt: in.Attempt}, Err: agent.Errorf(agent.ErrBootTimeout, "the device did not finish booting")}
	}
	return n.apkNode.Run(ctx, in)
}

// fleetEnv is the API over a real service and embedded store with
// fleetDevices devices, quarantine after one FAILED run, evidence, tokens
// (acme, beta, admin) and the API's metrics.
func newFleetEnv(t *testing.T) (*tenantEnv, *failNode) {
	t.Helper()
	ctx := context.Background()
	st, dir := openEvidence(t)
	var serials hostDevices
	for i := range fleetDevices {
		serials = append(serials, fmt.Sprintf("emulator-%d", 5554+2*i))
	}
	node := &failNode{}
	g, err := agent.NewGraph("test", "Fetch", node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: servicetest.Prepare(tenantPrepare), NewID: func() string { return ulid.Make().String() },
		Devices: serials, HostID: "host-1", Holder: "serve:test", HolderPrefix: "serve:", Tick: 20 * time.Millisecond, LeaseTTL: 5 * time.Second,
		QuarantineAfter: 1, ProbeEvery: time.Hour, Artifacts: st, Blobs: dir})
	if err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	svc.SetRunner(service.RunnerFunc(func(ctx context.Context, id string) (agent.RunStatus, error) { return eng.Run(ctx, id, g) }))
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, Graph: g, Gatherer: reg, Registerer: reg, Tokens: st}))
	t.Cleanup(func() {
		srv.Close()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		svc.Shutdown(c)
	})
	e := (&tenantEnv{t: t, st: st, blobs: dir, url: srv.URL}).withTokens("acme", "beta", "admin")
	return e, node
}

// submit posts a run request as who and returns the run id.
func (e *tenantEnv) submit(who, body string) string {
	e.t.Helper()
	te := &tenancyEnv{env: &env{t: e.t, store: e.st, url: e.url}, tokens: e.tokens}
	return te.submitAs(who, body)
}

func (e *tenantEnv) waitRun(who, id string, want agent.RunStatus) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := e.get(who, "/v1/runs/"+id)
		var d httpapi.RunDetail
		json.Unmarshal(body, &d)
		if d.Status == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s is %s, want %s", id, d.Status, want)
		}
		time.Sleep(20 * time.Millisecond) // polled condition
	}
}

// pngOf is a w x 20 PNG of one color: the tests tell screenshots apart by width.
func pngOf(w int, c color.RGBA) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, 20))
	for x := range w {
		for y := range 20 {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.Bytes()
}

// counts reads the request counters of the routes a devices or leases tab
// uses and the open SSE streams.
type counts struct {
	devices, screenshots, leases, runs, other, streams float64
}

func readCounts(t *testing.T, e *tenantEnv) counts {
	t.Helper()
	return counts{
		devices:     metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/devices"}`),
		screenshots: metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/devices/{serial}/screenshot"}`),
		leases:      metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/leases"}`),
		runs:        metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/runs"}`),
		other:       metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/runs/{id}"}`),
		streams:     metricValue(t, e, "screengraph_http_event_streams_open"),
	}
}

// waitStreams waits until the daemon counts n open SSE streams.
func waitStreams(t *testing.T, e *tenantEnv, n float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, e, "screengraph_http_event_streams_open") != n {
		if time.Now().After(deadline) {
			t.Fatalf("open SSE streams = %v, want %v", metricValue(t, e, "screengraph_http_event_streams_open"), n)
		}
		time.Sleep(20 * time.Millisecond) // polled condition
	}
}

// In real Chromium on a daemon with 32 devices: the devices page shows a
// quarantined device with its reason and a leased one with its run (linked)
// and lease; each tenant sees the last screenshot of ITS OWN runs on a
// device (acme's older one, not beta's newer one), the admin the newest;
// the leases page pages newest first. Bounded cost: a tab on the devices
// page holds one SSE stream and, while nothing changes, sends no request
// for a measured window (its fallback re-read is every 15 s); a tab on the
// leases page holds no stream and sends nothing.
func TestUIBrowserDevicesLeases(t *testing.T) {
	e, node := newFleetEnv(t)
	const wait = 20 * time.Second
	// acme's run fails on emulator-5554: quarantined (after 1 FAILED run).
	failed := e.submit("acme", `{"serial": "emulator-5554", "tenantId": "acme", "fail": true}`)
	e.waitRun("acme", failed, agent.RunFailed)
	// acme's run holds emulator-5556 (its node waits on its gate).
	held := e.submit("acme", `{"serial": "emulator-5556", "tenantId": "acme"}`)
	e.waitRun("acme", held, agent.RunRunning)
	// emulator-5558 kept a screenshot of acme's app, then of beta's.
	acmeShot, betaShot := pngOf(30, color.RGBA{200, 30, 30, 255}), pngOf(40, color.RGBA{30, 30, 200, 255})
	e.runOn("acme", "emulator-5558", acmeShot, false)
	e.runOn("beta", "emulator-5558", betaShot, false)
	// History to page through: 30 more acme leases.
	for i := range 30 {
		e.runOn("acme", fmt.Sprintf("emulator-%d", 5560+2*(i%20)), nil, false)
	}

	ctx := uitest.Browser(t)
	uitest.Run(t, ctx, wait, "sign in", chromedp.Navigate(e.url+"/ui/devices"), chromedp.WaitVisible("#signin"),
		chromedp.SendKeys("#token", e.tokens["acme"]), chromedp.Click(`#signin button[type="submit"]`),
		chromedp.WaitVisible(`#devices tr[data-serial="emulator-5554"][data-quarantined="true"]`),
		chromedp.WaitVisible(`#devices tr[data-serial="emulator-5556"][data-run="`+held+`"] a.run-link`),
		chromedp.Poll[chromedp.Void](`(i => i && i.complete && i.naturalWidth > 0)(document.querySelector('#devices tr[data-serial="emulator-5558"] img.screenshot'))`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
	if n := uitest.Eval[int](t, ctx, `document.querySelectorAll("#devices tbody tr").length`); n != fleetDevices {
		t.Errorf("%d device rows, want %d", n, fleetDevices)
	}
	if txt := uitest.Eval[string](t, ctx, `document.querySelector('#devices tr[data-serial="emulator-5554"]').innerText`); !strings.Contains(txt, "quarantined") || !strings.Contains(txt, "FAILED") {
		t.Errorf("quarantined device row: %q, want the quarantine and its reason", txt)
	}
	row := uitest.Eval[string](t, ctx, `document.querySelector('#devices tr[data-serial="emulator-5556"]').innerText`)
	if !strings.Contains(row, held) || !strings.Contains(row, "serve:test") || !strings.Contains(row, "fencing token") {
		t.Errorf("leased device row: %q, want its run, holder and fencing token", row)
	}
	if w := uitest.Eval[int](t, ctx, `document.querySelector('#devices tr[data-serial="emulator-5558"] img.screenshot').naturalWidth`); w != 30 {
		t.Errorf("acme sees a %d px wide screenshot on emulator-5558, want its own (30 px), not beta's (40 px)", w)
	}
	if src := uitest.Eval[string](t, ctx, `document.querySelector('#devices tr[data-serial="emulator-5558"] img.screenshot').src`); !strings.HasPrefix(src, "blob:") || strings.Contains(src, "sg_") {
		t.Errorf("screenshot src %q, want a blob: URL (no token in a URL)", src)
	}
	uitest.SavePNG(t, ctx, "devices-acme")

	// Bounded cost: one stream, and no request while nothing changes.
	uitest.Run(t, ctx, wait, "every screenshot cell settled", chromedp.Poll[chromedp.Void](
		`![...document.querySelectorAll("#devices td.shot")].some(td => td.textContent === "…")`, chromedp.WithPollingInterval(50*time.Millisecond)))
	waitStreams(t, e, 1)
	before := readCounts(t, e)
	if before.screenshots > fleetDevices*2 {
		t.Errorf("%v screenshot requests to open the page on %d devices, want at most 2 per device", before.screenshots, fleetDevices)
	}
	// A rate is measured over time: the tab sits on the page for a window
	// (the page's fallback re-read is every 15 s, so at most one falls in it).
	const window = 4 * time.Second
	time.Sleep(window)
	after := readCounts(t, e)
	t.Logf("devices tab on %d devices: %v requests to load (%v devices, %v screenshots), then in %v: %v devices, %v screenshots, %v other; %v SSE stream(s)",
		fleetDevices, before.devices+before.screenshots, before.devices, before.screenshots, window,
		after.devices-before.devices, after.screenshots-before.screenshots, after.runs-before.runs+after.leases-before.leases+after.other-before.other, after.streams)
	if d := after.devices - before.devices; d > 1 {
		t.Errorf("%v re-reads of /v1/devices in %v, want at most 1 (every 15 s)", d, window)
	}
	if d := after.screenshots - before.screenshots; d != 0 {
		t.Errorf("%v screenshot requests in %v with nothing changed, want 0", d, window)
	}
	if after.streams != 1 {
		t.Errorf("%v SSE streams open for one tab, want 1", after.streams)
	}

	// A run ending on a device refreshes the page live (the stream), the
	// device freed.
	close(node.gate(held))
	uitest.Run(t, ctx, wait, "lease freed live", chromedp.WaitVisible(`#devices tr[data-serial="emulator-5556"][data-run=""]`))

	uitest.Run(t, ctx, wait, "phone width", chromedp.EmulateViewport(390, 844))
	uitest.SavePNG(t, ctx, "devices-390px")
	uitest.Run(t, ctx, wait, "desktop width", chromedp.EmulateViewport(1280, 800))

	// The leases page: 25 newest first, then the older ones.
	uitest.Run(t, ctx, wait, "leases page", chromedp.Click(`a[data-nav="leases"]`), chromedp.WaitVisible(`#leases tbody tr[data-token]`))
	tokens := func() []int {
		return uitest.Eval[[]int](t, ctx, `[...document.querySelectorAll("#leases tbody tr[data-token]")].map(r => Number(r.dataset.token))`)
	}
	first := tokens()
	if len(first) != 25 || !uitest.Eval[bool](t, ctx, `!document.getElementById("more").hidden`) {
		t.Errorf("first page: %d leases, more hidden=%v; want 25 and an Older button", len(first), uitest.Eval[bool](t, ctx, `document.getElementById("more").hidden`))
	}
	uitest.SavePNG(t, ctx, "leases-page1")
	waitStreams(t, e, 0)
	before = readCounts(t, e)
	uitest.Run(t, ctx, wait, "older leases", chromedp.Click("#more"),
		chromedp.Poll[chromedp.Void](`document.getElementById("more").hidden`, chromedp.WithPollingInterval(50*time.Millisecond)))
	all := tokens()
	// acme's leases: the failed run, the held run, its screenshot run, 30 more.
	if len(all) != 33 {
		t.Errorf("all pages: %d leases, want acme's 33", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i] >= all[i-1] {
			t.Errorf("leases not newest first: %v", all)
			break
		}
	}
	if got := readCounts(t, e); got.leases-before.leases != 1 || got.streams != 0 {
		t.Errorf("paging sent %v lease requests, %v streams open; want 1 and none", got.leases-before.leases, got.streams)
	}
	uitest.SavePNG(t, ctx, "leases-page2")

	// beta: its own screenshot on emulator-5558, no sight of acme's runs.
	uitest.Run(t, ctx, wait, "sign in as beta", chromedp.Click("#signout"), chromedp.WaitVisible("#signin"),
		chromedp.SendKeys("#token", e.tokens["beta"]), chromedp.Click(`#signin button[type="submit"]`),
		chromedp.WaitVisible(`#leases tbody tr`))
	if txt := uitest.Eval[string](t, ctx, `document.querySelector("main").innerText`); strings.Contains(txt, held) || strings.Contains(txt, failed) {
		t.Errorf("beta's leases page shows acme's runs: %q", txt)
	}
	uitest.Run(t, ctx, wait, "beta's devices", chromedp.Click(`a[data-nav="devices"]`),
		chromedp.Poll[chromedp.Void](`(i => i && i.complete && i.naturalWidth > 0)(document.querySelector('#devices tr[data-serial="emulator-5558"] img.screenshot'))`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
	if w := uitest.Eval[int](t, ctx, `document.querySelector('#devices tr[data-serial="emulator-5558"] img.screenshot').naturalWidth`); w != 40 {
		t.Errorf("beta sees a %d px wide screenshot on emulator-5558, want its own (40 px)", w)
	}
	if txt := uitest.Eval[string](t, ctx, `document.querySelector("#devices").innerText`); strings.Contains(txt, held) || strings.Contains(txt, failed) {
		t.Errorf("beta's devices page shows acme's runs")
	}
	if n := uitest.Eval[int](t, ctx, `document.querySelectorAll('#devices tr[data-serial="emulator-5560"] img.screenshot').length`); n != 0 {
		t.Errorf("beta sees a screenshot on emulator-5560, where only acme's runs were")
	}
	uitest.SavePNG(t, ctx, "devices-beta")
}
