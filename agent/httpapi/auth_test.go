package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/httpapitest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// tenantPrepare takes the run's tenant from the request ("" when it names
// none: Submit sets the caller's), as nodes.NewSetupRun does in serve.
func tenantPrepare(_ context.Context, runID string, body []byte) (agent.Run, error) {
	var req struct {
		Serial   string `json:"serial"`
		TenantID string `json:"tenantId"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return agent.Run{}, agent.Wrap(agent.ErrInvalidRequest, err, "$: not a run request")
	}
	return agent.Run{RunID: runID, Serial: req.Serial, Graph: "test", Input: body, TenantID: req.TenantID, PolicyVersion: 1}, nil
}

// hostDevices lists fixed serials: the adb server's part of GET /v1/devices.
type hostDevices []string

func (h hostDevices) Devices(context.Context) ([]service.Device, error) {
	var out []service.Device
	for _, s := range h {
		out = append(out, service.Device{Serial: s, State: "device", BootReady: true})
	}
	return out, nil
}

type tenancyEnv struct {
	*env
	tokens map[string]string // name -> token: acme, beta, admin, revoked
}

// newTenancyEnv is the API over a real service and embedded store with
// tokens for tenants acme and beta, an admin token and a revoked acme token.
func newTenancyEnv(t *testing.T) *tenancyEnv {
	t.Helper()
	return newTenancyEnvWith(t, servicetest.Prepare(tenantPrepare))
}

// newTenancyEnvWith is newTenancyEnv validating run requests with prepare.
func newTenancyEnvWith(t *testing.T, prepare service.Preparer) *tenancyEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	node := &apkNode{}
	srv := httpapitest.Start(t, httpapitest.Config{Store: st, Node: node, Prepare: prepare, Plain: true,
		Service: func(c *service.Config) { c.Devices = hostDevices{"emulator-5554", "emulator-5556", "emulator-5558"} },
		API: func(c *httpapi.Config) {
			c.Tokens = st
			c.TokenAdmin = &httpapi.TokenAdmin{Store: st, Issue: func(tenant string, admin bool, now time.Time) (string, agent.APIToken, error) {
				tok, rec := storetest.NewAPIToken(tenant, admin)
				rec.CreatedAt = now
				return tok, rec, nil
			}}
		}})
	te := &tenancyEnv{env: &env{t: t, store: st, node: node, url: srv.URL}, tokens: map[string]string{}}
	for _, k := range []struct {
		name, tenant string
		admin        bool
	}{{"acme", "acme", false}, {"beta", "beta", false}, {"admin", "ops", true}, {"revoked", "acme", false}} {
		tok, rec := storetest.NewAPIToken(k.tenant, k.admin)
		if err := st.CreateToken(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		if k.name == "revoked" {
			if _, err := st.RevokeToken(context.Background(), rec.ID); err != nil {
				t.Fatal(err)
			}
		}
		te.tokens[k.name] = tok
	}
	return te
}

// as sends a request with `Authorization: Bearer <token of who>` (who "":
// no header; a raw header value when who starts with "raw:").
func (e *tenancyEnv) as(who, method, path, body string) (int, string, http.Header) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case strings.HasPrefix(who, "raw:"):
		req.Header.Set("Authorization", strings.TrimPrefix(who, "raw:"))
	case who != "":
		tok, ok := e.tokens[who]
		if !ok {
			e.t.Fatalf("no token %q", who)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func (e *tenancyEnv) submitAs(who, body string) string {
	e.t.Helper()
	st, b, _ := e.as(who, "POST", "/v1/runs", body)
	if st != http.StatusAccepted {
		e.t.Fatalf("POST /v1/runs as %s: %d %s", who, st, b)
	}
	var r httpapi.SubmitResponse
	if err := json.Unmarshal([]byte(b), &r); err != nil || r.RunID == "" {
		e.t.Fatalf("submit response %s (%v)", b, err)
	}
	return r.RunID
}

func listIDs(t *testing.T, body string) []string {
	t.Helper()
	var l struct {
		Runs []httpapi.RunSummary `json:"runs"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var ids []string
	for _, r := range l.Runs {
		ids = append(ids, r.RunID)
	}
	slices.Sort(ids)
	return ids
}

// Without tokens in the store the API is open, as on a single host.
func TestNoTokensNoAuth(t *testing.T) {
	e := newEnv(t)
	if st, b := e.do("GET", "/v1/runs", ""); st != 200 {
		t.Errorf("GET /v1/runs without tokens configured: %d %s", st, b)
	}
}

// 401 without a token, with an unknown, malformed or revoked one, on every
// /v1 route; /healthz, /readyz and /v1/openapi.json stay open; /metrics
// needs an admin token.
func TestTokensRequired(t *testing.T) {
	e := newTenancyEnv(t)
	run := e.submitAs("acme", `{"serial":"emulator-5554"}`)
	other, _ := storetest.NewAPIToken("acme", false)
	for _, who := range []string{"", "revoked", "raw:Bearer " + other, "raw:Bearer", "raw:Basic YWNtZTpzZWNyZXQ=", "raw:" + e.tokens["acme"]} {
		for _, rt := range httpapi.Routes() {
			if slices.Contains([]string{"/healthz", "/readyz", "/v1/openapi.json"}, rt.Pattern) {
				continue
			}
			path := strings.NewReplacer("{id}", run, "{n}", "0").Replace(rt.Pattern)
			body := ""
			if rt.Method == "POST" {
				body = `{"serial":"emulator-5556","version":1}`
			}
			st, b, h := e.as(who, rt.Method, path, body)
			if st != http.StatusUnauthorized {
				t.Errorf("%s %s as %q: %d, want 401: %s", rt.Method, path, who, st, b)
				continue
			}
			agentError(t, b, agent.ErrPermission)
			// issue 16: a 401 was reported as an execution_failure
			var rep struct{ Errors []struct{ Category string } }
			if json.Unmarshal([]byte(b), &rep) != nil || len(rep.Errors) != 1 || rep.Errors[0].Category != agent.CategoryAuth {
				t.Errorf("%s %s as %q: category of the 401 is not %q: %s", rt.Method, path, who, agent.CategoryAuth, b)
			}
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: WWW-Authenticate %q", rt.Method, path, h.Get("WWW-Authenticate"))
			}
			if strings.Contains(b, "sgat_") {
				t.Errorf("a token in the 401 body: %s", b)
			}
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/v1/openapi.json"} {
		if st, b, _ := e.as("", "GET", p, ""); st != 200 {
			t.Errorf("GET %s without a token: %d %s", p, st, b)
		}
	}
	if st, b, _ := e.as("acme", "GET", "/metrics", ""); st != http.StatusForbidden {
		t.Errorf("GET /metrics with a tenant token: %d, want 403: %s", st, b)
	} else {
		agentError(t, b, agent.ErrPermission)
	}
	if st, b, _ := e.as("admin", "GET", "/metrics", ""); st != 200 {
		t.Errorf("GET /metrics with the admin token: %d %s", st, b)
	}
	// The store still has the run: the 401s changed nothing.
	if runs, _ := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{}); len(runs) != 1 {
		t.Errorf("%d runs stored, want the 1 submitted with a token", len(runs))
	}
}

// Tenant isolation over HTTP: each forbidden action tried, each refused
// (another tenant's run is answered exactly as an unknown run), while the
// same actions on the tenant's own runs and by the admin work.
func TestTenantIsolation(t *testing.T) {
	e := newTenancyEnv(t)
	// Runs stay RUNNING on their node's gate; each holds its device's lease.
	a := e.submitAs("acme", `{"serial":"emulator-5554"}`)
	b := e.submitAs("beta", `{"serial":"emulator-5556"}`)
	bOwn := e.submitAs("beta", `{"serial":"emulator-5558","tenantId":"beta"}`)
	e.waitStatus(a, agent.RunRunning)
	e.waitStatus(b, agent.RunRunning)
	e.waitStatus(bOwn, agent.RunRunning)
	for id, tenant := range map[string]string{a: "acme", b: "beta", bOwn: "beta"} {
		if r, err := e.store.GetRun(context.Background(), agent.Admin(), id); err != nil || r.TenantID != tenant {
			t.Fatalf("run %s stored with tenant %q (%v), want %s", id, r.TenantID, err, tenant)
		}
	}
	unknown := ulid.Make().String()

	// List: each tenant sees its own runs only; the admin sees all.
	for who, want := range map[string][]string{"acme": {a}, "beta": {b, bOwn}, "admin": {a, b, bOwn}} {
		slices.Sort(want)
		st, body, _ := e.as(who, "GET", "/v1/runs", "")
		if got := listIDs(t, body); st != 200 || !slices.Equal(got, want) {
			t.Errorf("GET /v1/runs as %s: %d %v, want %v", who, st, got, want)
		}
		st, body, _ = e.as(who, "GET", "/v1/runs?serial=emulator-5556", "")
		if got := listIDs(t, body); who == "acme" && (st != 200 || len(got) != 0) {
			t.Errorf("GET /v1/runs?serial= (beta's device) as acme: %d %v, want none", st, got)
		}
	}

	// Read, events (plain and SSE), steps, and every control of beta's run
	// as acme: 404 with the very body an unknown run gets.
	reads := []struct{ method, suffix, body string }{
		{"GET", "", ""}, {"GET", "/events", ""}, {"GET", "/events?follow=1", ""}, {"GET", "/steps/0", ""},
		{"POST", "/cancel", ""}, {"POST", "/pause", ""}, {"POST", "/resume", ""}, {"POST", "/policy", `{"version":1}`},
	}
	for _, rq := range reads {
		st, body, _ := e.as("acme", rq.method, "/v1/runs/"+b+rq.suffix, rq.body)
		ust, ubody, _ := e.as("acme", rq.method, "/v1/runs/"+unknown+rq.suffix, rq.body)
		if st != http.StatusNotFound || ust != http.StatusNotFound || strings.ReplaceAll(body, b, "X") != strings.ReplaceAll(ubody, unknown, "X") {
			t.Errorf("%s %s of beta's run as acme: %d %s\nunknown run: %d %s", rq.method, rq.suffix, st, body, ust, ubody)
		}
		if strings.Contains(body, "beta") {
			t.Errorf("%s %s: the refusal names the other tenant: %s", rq.method, rq.suffix, body)
		}
	}
	// Nothing of it reached beta's run: no control recorded, still RUNNING.
	if r, _ := e.store.GetRun(context.Background(), agent.Admin(), b); r.Status != agent.RunRunning {
		t.Errorf("beta's run is %s after acme's refused controls, want RUNNING", r.Status)
	}
	if cs, err := e.store.PendingControl(context.Background(), b); err != nil || len(cs) != 0 {
		t.Errorf("controls recorded for beta's run: %v, %v", cs, err)
	}

	// Submit for another tenant: 403, nothing stored. A bad tenant id: 400.
	before, _ := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	st, body, _ := e.as("acme", "POST", "/v1/runs", `{"serial":"emulator-5558","tenantId":"beta"}`)
	if st != http.StatusForbidden {
		t.Errorf("submit for beta as acme: %d, want 403: %s", st, body)
	} else {
		agentError(t, body, agent.ErrPermission)
	}
	if st, body, _ := e.as("admin", "POST", "/v1/runs", `{"serial":"emulator-5558","tenantId":"a.b"}`); st != http.StatusBadRequest {
		t.Errorf("submit for tenant a.b: %d, want 400: %s", st, body)
	}
	// A run request carrying an API token is refused, whoever sends it.
	if st, body, _ := e.as("acme", "POST", "/v1/runs", `{"serial":"emulator-5558","note":"`+e.tokens["acme"]+`"}`); st != http.StatusBadRequest || strings.Contains(body, e.tokens["acme"]) {
		t.Errorf("submit carrying a token: %d, want 400 without the token: %s", st, body)
	}
	if after, _ := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{}); len(after) != len(before) {
		t.Errorf("refused submits stored %d runs", len(after)-len(before))
	}

	// Devices: every device listed, but beta's run holding one is hidden
	// from acme. Leases: acme sees its own only.
	var devs struct {
		Devices []service.Device `json:"devices"`
	}
	_, body, _ = e.as("acme", "GET", "/v1/devices", "")
	json.Unmarshal([]byte(body), &devs)
	held := map[string]string{}
	for _, d := range devs.Devices {
		held[d.Serial] = d.HeldBy
		if d.Serial != "emulator-5554" && d.Lease != nil {
			t.Errorf("acme sees the lease of %s: %+v", d.Serial, d.Lease)
		}
	}
	if len(devs.Devices) != 3 || held["emulator-5554"] != a || held["emulator-5556"] != "" || held["emulator-5558"] != "" {
		t.Errorf("devices as acme: %s", body)
	}
	_, body, _ = e.as("admin", "GET", "/v1/devices", "")
	if !strings.Contains(body, b) || !strings.Contains(body, bOwn) {
		t.Errorf("devices as admin lack beta's runs: %s", body)
	}
	for _, q := range []string{"/v1/leases", "/v1/leases?all=1"} {
		var ls struct {
			Leases []agent.Lease `json:"leases"`
		}
		_, body, _ = e.as("acme", "GET", q, "")
		json.Unmarshal([]byte(body), &ls)
		if len(ls.Leases) != 1 || ls.Leases[0].RunID != a {
			t.Errorf("GET %s as acme: %s", q, body)
		}
		_, body, _ = e.as("admin", "GET", q, "")
		json.Unmarshal([]byte(body), &ls)
		if len(ls.Leases) != 3 {
			t.Errorf("GET %s as admin: %s", q, body)
		}
	}

	// Allowed: acme reads and controls its own run; the admin beta's.
	for _, rq := range reads[:4] {
		if rq.suffix == "/events?follow=1" {
			continue // follows until the run ends
		}
		if st, body, _ := e.as("acme", rq.method, "/v1/runs/"+a+rq.suffix, rq.body); st != 200 && !(rq.suffix == "/steps/0" && st == 404) {
			t.Errorf("%s %s of its own run as acme: %d %s", rq.method, rq.suffix, st, body)
		}
	}
	if st, body, _ := e.as("admin", "GET", "/v1/runs/"+b, ""); st != 200 || !strings.Contains(body, `"tenantId":"beta"`) {
		t.Errorf("GET beta's run as admin: %d %s", st, body)
	}
	for _, c := range []string{"/pause", "/resume", "/policy"} {
		body := ""
		if c == "/policy" {
			body = `{"version":1}`
		}
		if st, rb, _ := e.as("acme", "POST", "/v1/runs/"+a+c, body); st != http.StatusAccepted {
			t.Errorf("POST %s of its own run as acme: %d %s", c, st, rb)
		}
	}
	if st, rb, _ := e.as("admin", "POST", "/v1/runs/"+b+"/cancel", ""); st != http.StatusAccepted {
		t.Errorf("cancel beta's run as admin: %d %s", st, rb)
	}
	if st, rb, _ := e.as("acme", "POST", "/v1/runs/"+a+"/cancel", ""); st != http.StatusAccepted {
		t.Errorf("cancel its own run as acme: %d %s", st, rb)
	}
	// The admin submits for any tenant.
	id := e.submitAs("admin", `{"serial":"emulator-5554","tenantId":"gamma"}`)
	if r, err := e.store.GetRun(context.Background(), agent.Admin(), id); err != nil || r.TenantID != "gamma" {
		t.Errorf("admin's run for gamma: %+v %v", r, err)
	}
	// No token ever in a stored run input.
	runs, _ := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	for _, r := range runs {
		if strings.Contains(string(r.Input), "sgat_") {
			t.Errorf("run %s input carries a token: %s", r.RunID, r.Input)
		}
	}
	for _, id := range []string{a, b, bOwn} {
		close(e.node.gate(id))
	}
}
