package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/httpapitest"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// apkNode is the graph's only node: it waits for its run's gate, then
// succeeds with the run input's apk URL in its output and in a progress line
// (as ProvisionApp carries the APK reference).
type apkNode struct{ httpapitest.Gates }

func (n *apkNode) Name() string { return "Fetch" }

func (n *apkNode) gate(id string) chan struct{} { return n.Gate(id) }

func (n *apkNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	var req struct {
		APK string `json:"apk"`
	}
	json.Unmarshal(in.Run.Input, &req)
	out := &agenttest.Output{Echo: "fetched", Attempt: in.Attempt, Detail: map[string]any{"apkStorageObjectReference": req.APK}}
	select {
	case <-n.gate(in.Run.RunID):
	case <-ctx.Done():
		return agent.NodeResult{Output: out, Err: ctx.Err()}
	}
	if msg, ok := strings.CutPrefix(req.APK, "crash:"); ok {
		// A failure with tenant-controlled text and an appFailure block,
		// as LaunchOrAttach reports a crash (the inspector's tests).
		return agent.NodeResult{Output: &crashOutput{Output: *out, AppFailure: map[string]any{"kind": "crash", "package": "com.example.app",
			"exception": "java.lang.IllegalStateException", "message": msg, "source": "crash_buffer"}},
			Err: agent.Errorf(agent.ErrAppCrashed, "com.example.app crashed: java.lang.IllegalStateException: %s", msg)}
	}
	return agent.NodeResult{Output: out, Next: agent.End,
		Deltas: []agent.TokenDelta{{Kind: "log", Text: "downloading " + req.APK}}}
}

// crashOutput is apkNode's output for a crash: appFailure beside the common fields.
type crashOutput struct {
	agenttest.Output
	AppFailure map[string]any `json:"appFailure"`
}

func prepare(_ context.Context, runID string, body []byte) (agent.Run, error) {
	var req struct {
		Serial string `json:"serial"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return agent.Run{}, agent.Wrap(agent.ErrInvalidRequest, err, "$: not a run request")
	}
	if req.Serial == "" {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.serial: required")
	}
	return agent.Run{RunID: runID, Serial: req.Serial, Graph: "test", Input: body, TenantID: "t1", PolicyVersion: 1}, nil
}

type env struct {
	t     *testing.T
	store *sqlite.Store
	node  *apkNode
	url   string
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, httpapi.Limits{}) }

// newEnvWith serves the API as serve does (httpapi.NewServer) under limits l.
func newEnvWith(t *testing.T, l httpapi.Limits) *env {
	t.Helper()
	return newEnvConfig(t, func(c *httpapi.Config, _ *sqlite.Store) { c.Limits = l })
}

// newEnvConfig serves the API as serve does, its Config changed by set.
func newEnvConfig(t *testing.T, set func(*httpapi.Config, *sqlite.Store)) *env {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	node := &apkNode{}
	srv := httpapitest.Start(t, httpapitest.Config{Store: st, Node: node, Prepare: servicetest.Prepare(prepare),
		API: func(c *httpapi.Config) { set(c, st) }})
	return &env{t: t, store: st, node: node, url: srv.URL}
}

// do sends a request (a body as application/json) and returns the status
// and body.
func (e *env) do(method, path, body string) (int, string) {
	e.t.Helper()
	var h map[string]string
	if body != "" {
		h = map[string]string{"Content-Type": "application/json"}
	}
	return e.send(method, path, body, h)
}

// send sends method path with body and the given headers ("Host" sets the
// Host header) and returns the status and body.
func (e *env) send(method, path, body string, headers map[string]string) (int, string) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
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
	return resp.StatusCode, string(b)
}

// agentError checks body is the agent error format with error_id id ("":
// any) and
// returns the first error's message.
func agentError(t *testing.T, body string, id agent.ErrorID) string {
	t.Helper()
	var rep struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Errors  []struct {
			Category string `json:"category"`
			Message  string `json:"message"`
			ErrorID  string `json:"error_id"`
		} `json:"errors"`
		Execution  *json.RawMessage `json:"execution"`
		Checkpoint *json.RawMessage `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, body)
	}
	if rep.Success == nil || *rep.Success || rep.Error == "" || len(rep.Errors) != 1 || rep.Execution == nil || rep.Checkpoint == nil {
		t.Fatalf("not the agent error format:\n%s", body)
	}
	if got := rep.Errors[0].ErrorID; got == "" || (id != "" && got != string(id)) {
		t.Errorf("error_id %v, want %s:\n%s", got, id, body)
	}
	return rep.Errors[0].Message
}

func (e *env) submit(body string) string {
	e.t.Helper()
	st, b := e.do("POST", "/v1/runs", body)
	if st != http.StatusAccepted {
		e.t.Fatalf("POST /v1/runs: %d %s", st, b)
	}
	var r httpapi.SubmitResponse
	if err := json.Unmarshal([]byte(b), &r); err != nil || r.RunID == "" || (r.Status != agent.RunPending && r.Status != agent.RunRunning) {
		e.t.Fatalf("submit response %s (%v)", b, err)
	}
	return r.RunID
}

func (e *env) waitStatus(id string, want agent.RunStatus) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := e.store.GetRun(context.Background(), agent.Admin(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if r.Status == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s is %s, want %s", id, r.Status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Routes() and openapi.json's paths list the same (method, path) pairs, and
// every route is registered (it does not fall to the catch-all).
func TestRoutesMatchOpenAPI(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if !json.Valid(httpapi.OpenAPI()) {
		t.Fatal("openapi.json is not valid JSON")
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var documented, routed []string
	for p, item := range doc.Paths {
		for m := range item {
			if slices.Contains(methods, m) {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
	}
	for _, r := range httpapi.Routes() {
		routed = append(routed, r.Method+" "+r.Pattern)
	}
	slices.Sort(documented)
	slices.Sort(routed)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("openapi.json describes %s, which Routes() does not list", d)
		}
	}

	e := newEnv(t)
	for _, r := range httpapi.Routes() {
		path := strings.NewReplacer("{id}", ulid.Make().String(), "{n}", "0").Replace(r.Pattern)
		body := ""
		if r.Method == "POST" {
			body = `{"version": 1}`
		}
		st, b := e.do(r.Method, path, body)
		if strings.Contains(b, "no route") {
			t.Errorf("%s %s fell to the catch-all: %d %s", r.Method, path, st, b)
		}
	}
}

func TestUnknownRouteAndBadBody(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path string }{{"GET", "/v1/nope"}, {"GET", "/nope"}, {"POST", "/ui/"}} { // wrong methods: TestWrongMethodIs405; GET / redirects to the inspector (TestUIServed)
		st, b := e.do(c.method, c.path, "")
		if st != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", c.method, c.path, st)
		}
		agentError(t, b, agent.ErrInvalidRequest)
	}
	for _, body := range []string{`{"serial": `, `not json`, `[1,`} {
		st, b := e.do("POST", "/v1/runs", body)
		if st != http.StatusBadRequest {
			t.Errorf("POST /v1/runs %q: %d, want 400", body, st)
		}
		if msg := agentError(t, b, agent.ErrInvalidRequest); !strings.Contains(msg, "$") {
			t.Errorf("message %q does not name the JSON path $", msg)
		}
	}
	st, b := e.do("POST", "/v1/runs", `{"apk": "x"}`)
	if st != http.StatusBadRequest || !strings.Contains(agentError(t, b, agent.ErrInvalidRequest), "$.serial") {
		t.Errorf("POST without serial: %d %s", st, b)
	}
	if runs, err := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{}); err != nil || len(runs) != 0 {
		t.Errorf("refused requests stored %d runs (%v)", len(runs), err)
	}
	unknown := ulid.Make().String()
	if st, b := e.do("GET", "/v1/runs/"+unknown, ""); st != http.StatusNotFound {
		t.Errorf("GET unknown run: %d %s", st, b)
	} else if msg := agentError(t, b, agent.ErrInvalidRequest); strings.Count(msg, "not found") != 1 || !strings.Contains(msg, unknown) {
		// issue 16: it read "invalid_request_error: not found: run X: not found"
		t.Errorf("GET unknown run says %q: want the run named and \"not found\" once", msg)
	}
}

func TestControlStatuses(t *testing.T) {
	e := newEnv(t)
	unknown := ulid.Make().String()
	for _, p := range []string{"cancel", "pause", "resume"} {
		st, b := e.do("POST", "/v1/runs/"+unknown+"/"+p, "")
		if st != http.StatusNotFound {
			t.Errorf("%s of an unknown run: %d, want 404", p, st)
		}
		agentError(t, b, agent.ErrInvalidRequest)
	}
	if st, _ := e.do("POST", "/v1/runs/"+unknown+"/policy", `{"version": 1}`); st != http.StatusNotFound {
		t.Errorf("policy switch of an unknown run: %d, want 404", st)
	}
	id := e.submit(`{"serial":"dev-a"}`)
	if st, b := e.do("POST", "/v1/runs/"+id+"/policy", `{}`); st != http.StatusBadRequest {
		t.Errorf("policy switch without a version: %d %s", st, b)
	}
	if st, b := e.do("POST", "/v1/runs/"+id+"/pause", ""); st != http.StatusAccepted {
		t.Errorf("pause of a live run: %d %s, want 202", st, b)
	}
	if st, b := e.do("POST", "/v1/runs/"+id+"/resume", ""); st != http.StatusAccepted {
		t.Errorf("resume of a live run: %d %s, want 202", st, b)
	}
	close(e.node.gate(id))
	e.waitStatus(id, agent.RunFinished)
	for _, p := range []string{"cancel", "pause", "resume"} {
		st, b := e.do("POST", "/v1/runs/"+id+"/"+p, "")
		if st != http.StatusConflict {
			t.Errorf("%s of a finished run: %d, want 409", p, st)
		}
		agentError(t, b, agent.ErrInvalidRequest)
	}
	if st, b := e.do("POST", "/v1/runs/"+id+"/policy", `{"version": 1}`); st != http.StatusConflict {
		t.Errorf("policy switch of a finished run: %d, want 409", st)
	} else {
		agentError(t, b, agent.ErrInvalidRequest)
	}
}

type sseFrame struct {
	id, event, data string
}

// readSSE reads frames until the stream ends.
func readSSE(t *testing.T, r io.Reader) []sseFrame {
	t.Helper()
	var out []sseFrame
	var cur sseFrame
	seen := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if seen {
				out = append(out, cur)
			}
			cur, seen = sseFrame{}, false
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("SSE line %q", line)
		}
		seen = true
		switch k {
		case "id":
			cur.id = v
		case "event":
			cur.event = v
		case "data":
			cur.data = v
		default:
			t.Errorf("SSE field %q", k)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) follow(id string) (*http.Response, error) {
	req, _ := http.NewRequest("GET", e.url+"/v1/runs/"+id+"/events?follow=1", nil)
	return http.DefaultClient.Do(req)
}

func TestFollowSSE(t *testing.T) {
	e := newEnv(t)
	id := e.submit(`{"serial":"dev-a"}`)
	resp, err := e.follow(id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	close(e.node.gate(id)) // the run ends while the stream is open
	frames := readSSE(t, resp.Body)
	if len(frames) < 2 || frames[len(frames)-1].event != "end" {
		t.Fatalf("frames %+v: want events then event: end", frames)
	}
	evs, err := e.store.Events(context.Background(), agent.Admin(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	body := frames[:len(frames)-1]
	if len(body) != len(evs) {
		t.Fatalf("%d event frames, store has %d events", len(body), len(evs))
	}
	for i, f := range body {
		var ev agent.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("frame %d data: %v", i, err)
		}
		if f.id != strconv.FormatInt(evs[i].Sequence, 10) || f.event != evs[i].Kind || ev.EventID != evs[i].EventID || ev.Sequence != evs[i].Sequence {
			t.Errorf("frame %d: id %s event %s (%s), store: %d %s %s", i, f.id, f.event, ev.EventID, evs[i].Sequence, evs[i].Kind, evs[i].EventID)
		}
	}
	if body[0].event != agent.KindRunStarted || body[len(body)-1].event != agent.KindRunFinished {
		t.Errorf("stream from %s to %s", body[0].event, body[len(body)-1].event)
	}
	// Following an ended run replays it and ends; an unknown run is 404.
	resp2, err := e.follow(id)
	if err != nil {
		t.Fatal(err)
	}
	again := readSSE(t, resp2.Body)
	resp2.Body.Close()
	if len(again) != len(frames) || again[len(again)-1].event != "end" {
		t.Errorf("re-follow: %d frames, want %d", len(again), len(frames))
	}
	resp3, err := e.follow(ulid.Make().String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp3.Body)
	resp3.Body.Close()
	if resp3.StatusCode != http.StatusNotFound {
		t.Errorf("follow of an unknown run: %d", resp3.StatusCode)
	}
	agentError(t, string(b), agent.ErrInvalidRequest)
}

// Credentials in a run's input (URL userinfo, signed-URL query parameters)
// never leave through the API, though the store keeps them for resume.
func TestSecretsNeverInResponses(t *testing.T) {
	e := newEnv(t)
	const (
		pass = "hunter2pass"
		sig  = "deadbeefcafe0123456789"
		cred = "AKIAEXAMPLE12345"
	)
	apk := fmt.Sprintf("https://builder:%s@artifacts.example.com/app.apk?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%s&X-Amz-Signature=%s", pass, cred, sig)
	reqBody, _ := json.Marshal(map[string]string{"serial": "dev-a", "apk": apk})
	st, b := e.do("POST", "/v1/runs", string(reqBody))
	if st != http.StatusAccepted {
		t.Fatalf("submit: %d %s", st, b)
	}
	responses := map[string]string{"POST /v1/runs": b}
	var sub httpapi.SubmitResponse
	json.Unmarshal([]byte(b), &sub)
	id := sub.RunID
	resp, err := e.follow(id)
	if err != nil {
		t.Fatal(err)
	}
	close(e.node.gate(id))
	sse, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	responses["GET events?follow=1"] = string(sse)
	e.waitStatus(id, agent.RunFinished)

	// The store keeps the input as submitted (GET run has it to redact).
	run, err := e.store.GetRun(context.Background(), agent.Admin(), id)
	if err != nil || !strings.Contains(string(run.Input), pass) {
		t.Fatalf("stored input lost its credentials (resume needs them): %s %v", run.Input, err)
	}
	for _, p := range []string{"/v1/runs/" + id, "/v1/runs", "/v1/runs?serial=dev-a", "/v1/runs/" + id + "/events",
		"/v1/runs/" + id + "/steps/0", "/v1/leases?all=1", "/v1/devices"} {
		st, b := e.do("GET", p, "")
		if st != 200 {
			t.Errorf("GET %s: %d %s", p, st, b)
		}
		responses["GET "+p] = b
	}
	for name, b := range responses {
		for _, s := range []string{pass, sig, cred} {
			if strings.Contains(b, s) {
				t.Errorf("%s shows %q:\n%s", name, s, b)
			}
		}
	}
	if !strings.Contains(responses["GET /v1/runs/"+id], "artifacts.example.com") {
		t.Errorf("GET run lost the (redacted) APK reference:\n%s", responses["GET /v1/runs/"+id])
	}
}

// ErrorBody of an unknown run, as the NATS control reply and the CLI send it
// (issue 16: internal_error over NATS, and "not found" said twice over HTTP):
// a request error naming the run, "not found" once.
func TestErrorBodyNotFound(t *testing.T) {
	const run = "01J0000000000000000000NONE"
	rep := httpapi.ErrorBody(fmt.Errorf("run %s: %w", run, agent.ErrNotFound), "")
	if len(rep.Errors) != 1 || rep.Errors[0].Context["error_id"] != string(agent.ErrInvalidRequest) {
		t.Fatalf("ErrorBody(unknown run) = %+v, want error_id %s", rep, agent.ErrInvalidRequest)
	}
	if rep.Error != "invalid_request_error: run "+run+": not found" || rep.Errors[0].Category != agent.CategoryAPIValidation {
		t.Errorf("ErrorBody(unknown run) says %q (%s)", rep.Error, rep.Errors[0].Category)
	}
}
