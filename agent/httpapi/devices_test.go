package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// tenantEnv serves the API with tokens (acme, beta, gamma and an admin),
// evidence kept in a blob dir, and a store the test fills directly.
type tenantEnv struct {
	t      *testing.T
	st     *sqlite.Store
	blobs  *blobs.Dir
	url    string
	tokens map[string]string
}

// openEvidence opens a fresh embedded store and blob dir for a test.
func openEvidence(t *testing.T) (*sqlite.Store, *blobs.Dir) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir, err := blobs.NewDir(filepath.Join(t.TempDir(), "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// withTokens gives e an API token for each tenant ("admin": an admin token).
func (e *tenantEnv) withTokens(tenants ...string) *tenantEnv {
	e.t.Helper()
	e.tokens = map[string]string{}
	for _, tenant := range tenants {
		tok, rec := storetest.NewAPIToken(tenant, tenant == "admin")
		if err := e.st.CreateToken(context.Background(), rec); err != nil {
			e.t.Fatal(err)
		}
		e.tokens[tenant] = tok
	}
	return e
}

func newTenantEnv(t *testing.T) *tenantEnv {
	t.Helper()
	st, dir := openEvidence(t)
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
		Holder: "serve:test", HostID: "host-1", Artifacts: st, Blobs: dir})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Service: svc, Gatherer: reg, Registerer: reg, Tokens: st}))
	t.Cleanup(srv.Close)
	return (&tenantEnv{t: t, st: st, blobs: dir, url: srv.URL}).withTokens("acme", "beta", "gamma", "admin")
}

func (e *tenantEnv) get(who, path string, headers ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// runOn stores a FINISHED run of tenant that held serial's lease (released unless
// active) and, when png is not nil, kept it as a screenshot.
func (e *tenantEnv) runOn(tenant, serial string, png []byte, active bool) (agent.Run, agent.Lease) {
	e.t.Helper()
	ctx := context.Background()
	r := storetest.NewRun(tenant, serial)
	r.Status = agent.RunFinished // ended: no scheduler picks it up
	if err := e.st.CreateRun(ctx, r); err != nil {
		e.t.Fatal(err)
	}
	step := storetest.NodeStep(r, 1, 0, "WaitIdle")
	if png != nil {
		step.Artifacts = []agent.Artifact{storetest.NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", png)}
		if err := e.blobs.Put(ctx, blobs.Sum(png), png); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.st.CommitStep(ctx, step); err != nil {
		e.t.Fatal(err)
	}
	l, err := e.st.AcquireLease(ctx, agent.DeviceKey("host-1", serial), "serve:test", r.RunID, time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	if !active {
		if err := e.st.ReleaseLease(ctx, l.Serial, l.FencingToken, agent.LeaseFinished); err != nil {
			e.t.Fatal(err)
		}
	}
	return r, l
}

// TestDeviceScreenshotByTenant: a device's last screenshot is the newest one
// of a run the caller sees on it: a tenant gets its own run's even when
// another tenant's run came later, the admin the newest of all, a tenant
// with no run on the device a 404 in the agent error format.
func TestDeviceScreenshotByTenant(t *testing.T) {
	e := newTenantEnv(t)
	acmePNG := []byte("\x89PNG\r\n\x1a\nacme's app")
	betaPNG := []byte("\x89PNG\r\n\x1a\nbeta's app")
	acmeRun, _ := e.runOn("acme", "emulator-5554", acmePNG, false)
	e.runOn("acme", "emulator-5554", nil, false) // a later run without evidence
	betaRun, _ := e.runOn("beta", "emulator-5554", betaPNG, true)
	e.runOn("beta", "emulator-5556", []byte("\x89PNG\r\n\x1a\nother device"), false)

	for _, c := range []struct {
		who  string
		want []byte
		run  string
	}{{"acme", acmePNG, acmeRun.RunID}, {"beta", betaPNG, betaRun.RunID}, {"admin", betaPNG, betaRun.RunID}} {
		resp, body := e.get(c.who, "/v1/devices/emulator-5554/screenshot")
		if resp.StatusCode != 200 || string(body) != string(c.want) {
			t.Errorf("%s: %d %q, want %q", c.who, resp.StatusCode, body, c.want)
			continue
		}
		h := resp.Header
		if h.Get("Content-Type") != "image/png" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("ScreenGraph-Run-Id") != c.run ||
			len(h.Get("ScreenGraph-Artifact-Id")) != 26 || !strings.Contains(h.Get("Cache-Control"), "private") {
			t.Errorf("%s: headers %v", c.who, h)
		}
		// Revalidation by the content's digest: no bytes again.
		resp, body = e.get(c.who, "/v1/devices/emulator-5554/screenshot", "If-None-Match", h.Get("ETag"))
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Errorf("%s: If-None-Match: %d %q", c.who, resp.StatusCode, body)
		}
	}
	resp, body := e.get("gamma", "/v1/devices/emulator-5554/screenshot")
	if resp.StatusCode != 404 || strings.Contains(string(body), "PNG") {
		t.Errorf("gamma: %d %s", resp.StatusCode, body)
	}
	agentError(t, string(body), agent.ErrInvalidRequest)
	if resp, body := e.get("acme", "/v1/devices/"+strings.Repeat("x", 256)+"/screenshot"); resp.StatusCode != 400 {
		t.Errorf("long serial: %d %s", resp.StatusCode, body)
	} else {
		agentError(t, string(body), agent.ErrInvalidRequest)
	}
	if resp, _ := e.get("", "/v1/devices/emulator-5554/screenshot"); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
}

// TestLeasesPaged: ?limit pages the lease history newest first, the
// nextCursor continuing it to the end; a tenant's pages hold only its runs'
// leases; bad parameters are 400 in the agent error format.
func TestLeasesPaged(t *testing.T) {
	e := newTenantEnv(t)
	var acme []agent.Lease
	for i := range 5 {
		_, l := e.runOn("acme", fmt.Sprintf("emulator-55%02d", 54+2*i), nil, i == 4)
		acme = append(acme, l)
		e.runOn("beta", "emulator-5600", nil, false)
	}
	var got []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		path := "/v1/leases?limit=2"
		if cursor != "" {
			path += "&before=" + cursor
		}
		resp, body := e.get("acme", path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		var page httpapi.LeaseList
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Leases) > 2 {
			t.Errorf("%s: %d leases", path, len(page.Leases))
		}
		for _, l := range page.Leases {
			got = append(got, l.FencingToken)
			if l.Holder != "serve:test" || l.AcquiredAt.IsZero() || l.RenewedAt.IsZero() || l.Device == "" {
				t.Errorf("lease %+v lacks a field", l)
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	want := []int64{acme[4].FencingToken, acme[3].FencingToken, acme[2].FencingToken, acme[1].FencingToken, acme[0].FencingToken}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("acme's pages = %v, want %v (its leases, newest first)", got, want)
	}
	// Filters: one device of this host, one run.
	resp, body := e.get("admin", "/v1/leases?serial=emulator-5600&limit=100")
	var page httpapi.LeaseList
	if json.Unmarshal(body, &page); resp.StatusCode != 200 || len(page.Leases) != 5 || page.NextCursor != "" {
		t.Errorf("admin serial=emulator-5600: %d %d leases, cursor %q", resp.StatusCode, len(page.Leases), page.NextCursor)
	}
	if resp, body := e.get("beta", "/v1/leases?runId="+acme[0].RunID); resp.StatusCode != 200 || !strings.Contains(string(body), `"leases":[]`) {
		t.Errorf("beta runId=acme's run: %d %s", resp.StatusCode, body)
	}
	// The unpaged views are as before: the active ones, all=1 the history in acquisition order.
	resp, body = e.get("acme", "/v1/leases?all=1")
	if json.Unmarshal(body, &page); resp.StatusCode != 200 || len(page.Leases) != 5 || page.Leases[0].FencingToken != acme[0].FencingToken {
		t.Errorf("acme all=1: %d %s", resp.StatusCode, body)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "before=0", "before=-3", "before=1e3", "serial=", "serial=" + strings.Repeat("s", 256), "runId=" + strings.Repeat("r", 256)} {
		resp, body := e.get("acme", "/v1/leases?"+q)
		if resp.StatusCode != 400 {
			t.Errorf("?%s: %d %s", q, resp.StatusCode, body)
			continue
		}
		agentError(t, string(body), agent.ErrInvalidRequest)
	}
}

// TestRunDetailLease: GET /v1/runs/{id} carries the run's lease: holder,
// fencing token, renewal and the heartbeat's age while it is held; the
// released one without an age; none for a run that never held one.
func TestRunDetailLease(t *testing.T) {
	e := newTenantEnv(t)
	held, hl := e.runOn("acme", "emulator-5554", nil, true)
	done, dl := e.runOn("acme", "emulator-5556", nil, false)
	never := storetest.NewRun("acme", "emulator-5558")
	if err := e.st.CreateRun(context.Background(), never); err != nil {
		t.Fatal(err)
	}
	detail := func(id string) httpapi.RunDetail {
		t.Helper()
		resp, body := e.get("acme", "/v1/runs/"+id)
		var d httpapi.RunDetail
		if err := json.Unmarshal(body, &d); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET run: %d %s", resp.StatusCode, body)
		}
		return d
	}
	d := detail(held.RunID)
	if d.Lease == nil || !d.Lease.Active || d.Lease.Holder != "serve:test" || d.Lease.FencingToken != hl.FencingToken ||
		d.Lease.RenewedAt.IsZero() || d.Lease.HeartbeatAgeMillis == nil || *d.Lease.HeartbeatAgeMillis < 0 || *d.Lease.HeartbeatAgeMillis > 60_000 {
		t.Errorf("held run's lease = %+v", d.Lease)
	}
	d = detail(done.RunID)
	if d.Lease == nil || d.Lease.Active || d.Lease.FencingToken != dl.FencingToken || d.Lease.ReleasedAt == nil || d.Lease.HeartbeatAgeMillis != nil {
		t.Errorf("finished run's lease = %+v", d.Lease)
	}
	if d = detail(never.RunID); d.Lease != nil {
		t.Errorf("never-leased run's lease = %+v", d.Lease)
	}
	if resp, _ := e.get("beta", "/v1/runs/"+held.RunID); resp.StatusCode != 404 {
		t.Errorf("beta GET acme's run: %d", resp.StatusCode)
	}
}

// TestEventStreamGauge: screengraph_http_event_streams_open counts the open
// SSE streams, back to 0 when the client leaves; requests are counted by
// route pattern.
func TestEventStreamGauge(t *testing.T) {
	e := newTenantEnv(t)
	r := storetest.NewRun("acme", "emulator-5554") // not ended: its stream stays open
	if err := e.st.CreateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if err := e.st.CommitStep(context.Background(), storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/runs/"+r.RunID+"/events?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens["acme"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the first event is written
		t.Fatal(err)
	}
	if got := metricValue(t, e, "screengraph_http_event_streams_open"); got != 1 {
		t.Errorf("open streams with one follower = %v, want 1", got)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, e, "screengraph_http_event_streams_open") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream is still counted 10 s after its client left")
		}
		time.Sleep(10 * time.Millisecond) // polled condition
	}
	if got := metricValue(t, e, `screengraph_http_requests_total{route="GET /v1/runs/{id}/events"}`); got != 1 {
		t.Errorf("requests of the events route = %v, want 1", got)
	}
}

// metricValue scrapes /metrics (admin) and returns the sample named name
// (with its labels as exposed), -1 when absent.
func metricValue(t *testing.T, e *tenantEnv, name string) float64 {
	t.Helper()
	resp, body := e.get("admin", "/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
