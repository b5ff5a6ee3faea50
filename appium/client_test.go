package appium

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// capture reads a real Appium 3.8.0 answer from testdata (see testdata/SOURCES.md).
func capture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type recorded struct {
	Method, Path, ContentType string
	Body                      []byte
}

// fakeAppium answers each "METHOD /path" with a status and body and records requests.
type fakeAppium struct {
	mu     sync.Mutex
	reqs   []recorded
	routes map[string]func(w http.ResponseWriter, r *http.Request)
}

func (f *fakeAppium) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"), b})
	h := f.routes[r.Method+" "+r.URL.EscapedPath()]
	f.mu.Unlock()
	if h == nil {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(404)
		w.Write(capture0("unknown_command_404.json"))
		return
	}
	h(w, r)
}

func capture0(name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return b
}

func reply(status int, body []byte) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		w.Write(body)
	}
}

func newFake(t *testing.T, routes map[string]func(http.ResponseWriter, *http.Request)) (*fakeAppium, *Client) {
	t.Helper()
	f := &fakeAppium{routes: routes}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func agentErr(t *testing.T, err error) *agent.Error {
	t.Helper()
	var e *agent.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *agent.Error", err, err)
	}
	return e
}

func TestCreateSessionRequestAndAnswer(t *testing.T) {
	f, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"POST /session": reply(200, capture0("create_session_200.json")),
	})
	caps := map[string]any{"platformName": "Android", "appium:automationName": "UiAutomator2"}
	s, err := c.CreateSession(context.Background(), caps)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "f891f954-71a5-4f76-aa7e-e13daa331010" || s.Capabilities["udid"] != "emulator-21584" || s.Capabilities["automationName"] != "UiAutomator2" {
		t.Errorf("session = %+v", s)
	}
	if len(f.reqs) != 1 {
		t.Fatalf("requests = %+v", f.reqs)
	}
	r := f.reqs[0]
	if !strings.HasPrefix(r.ContentType, "application/json") {
		t.Errorf("Content-Type = %q", r.ContentType)
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	am, _ := body["capabilities"]["alwaysMatch"].(map[string]any)
	fm, _ := body["capabilities"]["firstMatch"].([]any)
	if am["appium:automationName"] != "UiAutomator2" || len(fm) != 1 || len(fm[0].(map[string]any)) != 0 || len(body) != 1 {
		t.Errorf("body = %s", r.Body)
	}
}

func TestCreateSessionErrorsFromRealAppiumAnswers(t *testing.T) {
	cases := []struct {
		file      string
		status    int
		code      string
		retryable bool
		msg       string
	}{
		{"create_session_not_created_500.json", 500, "session not created", true, "appium:options capability must be an object"},
		{"create_no_device_500.json", 500, "unknown error", true, "Could not find a connected Android device in 20000ms"},
		{"create_unknown_driver_500.json", 500, "unknown error", true, "Could not find a driver for automationName 'NoSuchDriver'"},
		{"create_no_automation_name_400.json", 400, "invalid argument", false, "'automationName' is required"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
				"POST /session": reply(tc.status, capture(t, tc.file)),
			})
			_, err := c.CreateSession(context.Background(), map[string]any{"platformName": "Android"})
			e := agentErr(t, err)
			if e.ID != agent.ErrSessionCreateFailed || e.Code != tc.code || e.Retryable != tc.retryable || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %+v", e)
			}
			if strings.Contains(e.Error(), "stacktrace") || strings.Contains(e.Error(), "at asyncHandler") {
				t.Errorf("error carries the server's stack trace: %v", e)
			}
		})
	}
}

func TestInvalidSessionID(t *testing.T) {
	gone := capture(t, "invalid_session_id_404.json")
	_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /session/dead/appium/capabilities": reply(404, gone),
		"GET /session/dead/source":              reply(404, gone),
		"DELETE /session/dead":                  reply(404, gone),
	})
	ctx := context.Background()
	_, err := c.Attach(ctx, "dead")
	if e := agentErr(t, err); !IsSessionGone(err) || e.ID != agent.ErrInvalidRequest || e.Code != "invalid session id" || e.Retryable {
		t.Errorf("Attach: %+v", e)
	}
	if _, err := c.PageSource(ctx, "dead"); !IsSessionGone(err) {
		t.Errorf("PageSource: %v", err)
	}
	if err := c.DeleteSession(ctx, "dead"); err != nil {
		t.Errorf("DeleteSession of a gone session: %v", err)
	}
	h, d, err := c.Probe(ctx, "dead")
	if h != device.Unhealthy || err != nil || d["code"] != "invalid session id" {
		t.Errorf("Probe = %s %v %v", h, d, err)
	}
}

// A proxy failure (the on-device UiAutomator2 server hung up: it died or a
// newer session replaced it) means the session can never serve again: gone,
// so EnsureDevice replaces it and WaitIdle falls back to frames and focus.
func TestProxyHangUpIsSessionGone(t *testing.T) {
	_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /session/s1/source": reply(500, capture(t, "proxy_socket_hang_up_500.json")),
	})
	_, err := c.PageSource(context.Background(), "s1")
	if e := agentErr(t, err); !IsSessionGone(err) || e.Retryable {
		t.Fatalf("PageSource after the server hung up: %+v", e)
	}
}

// fakeClock advances by step on every reading.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func probeRoutes(rect func(http.ResponseWriter, *http.Request)) map[string]func(http.ResponseWriter, *http.Request) {
	return map[string]func(http.ResponseWriter, *http.Request){
		"GET /session/s1/appium/capabilities": reply(200, capture0("session_capabilities_200.json")),
		"GET /session/s1/window/rect":         rect,
	}
}

func TestProbeVerdicts(t *testing.T) {
	okRect := reply(200, capture(t, "window_rect_200.json"))
	ctx := context.Background()

	t.Run("healthy", func(t *testing.T) {
		f, c := newFake(t, probeRoutes(okRect))
		h, d, err := c.Probe(ctx, "s1")
		if h != device.Healthy || err != nil {
			t.Fatalf("= %s %v %v", h, d, err)
		}
		if caps, _ := d["capabilities"].(map[string]any); caps["udid"] != "emulator-21584" {
			t.Errorf("details = %v", d)
		}
		if len(f.reqs) != 2 || f.reqs[0].Path != "/session/s1/appium/capabilities" || f.reqs[1].Path != "/session/s1/window/rect" {
			t.Errorf("requests = %+v", f.reqs)
		}
	})

	t.Run("slow is degraded", func(t *testing.T) {
		f := &fakeAppium{routes: probeRoutes(okRect)}
		srv := httptest.NewServer(f)
		defer srv.Close()
		clk := &fakeClock{t: time.Unix(0, 0), step: 1500 * time.Millisecond}
		c, _ := New(srv.URL, Options{Now: clk.Now, SlowProbe: time.Second})
		h, d, err := c.Probe(ctx, "s1")
		if h != device.Degraded || err != nil || !strings.HasPrefix(d["reason"].(string), "slow") || d["latencyMs"] != int64(1500) {
			t.Errorf("= %s %v %v", h, d, err)
		}
	})

	t.Run("driver error is degraded", func(t *testing.T) {
		// A real "unknown error" body of Appium 3.8.0 (from POST /session), served for window/rect.
		_, c := newFake(t, probeRoutes(reply(500, capture(t, "create_no_device_500.json"))))
		h, d, err := c.Probe(ctx, "s1")
		if h != device.Degraded || err != nil || d["errorId"] != string(agent.ErrProcess) || d["code"] != "unknown error" {
			t.Errorf("= %s %v %v", h, d, err)
		}
	})

	t.Run("session gone between the calls is unhealthy", func(t *testing.T) {
		_, c := newFake(t, probeRoutes(reply(404, capture(t, "invalid_session_id_404.json"))))
		h, _, err := c.Probe(ctx, "s1")
		if h != device.Unhealthy || err != nil {
			t.Errorf("= %s %v", h, err)
		}
	})

	t.Run("hanging server is unhealthy timeout", func(t *testing.T) {
		f := &fakeAppium{routes: probeRoutes(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })}
		srv := httptest.NewServer(f)
		defer srv.Close()
		c, _ := New(srv.URL, Options{ProbeTimeout: 100 * time.Millisecond})
		h, _, err := c.Probe(ctx, "s1")
		if e := agentErr(t, err); h != device.Unhealthy || e.ID != agent.ErrTimeout || !e.Retryable {
			t.Errorf("= %s %v", h, err)
		}
	})

	t.Run("connection refused is unhealthy appium_unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		c, _ := New("http://"+addr, Options{})
		h, d, err := c.Probe(ctx, "s1")
		if e := agentErr(t, err); h != device.Unhealthy || e.ID != agent.ErrAppiumUnreachable || !e.Retryable || d["errorId"] != "appium_unreachable" {
			t.Errorf("= %s %v %v", h, d, err)
		}
	})
}

func TestTransportClassification(t *testing.T) {
	ctx := context.Background()

	t.Run("out of descriptors is resource_exhausted", func(t *testing.T) {
		for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
			e := classifyTransport(ctx, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}, "status")
			if e.ID != agent.ErrResourceExhausted || !e.Retryable {
				t.Errorf("%v: got %+v", errno, e)
			}
		}
	})

	t.Run("reset mid-request", func(t *testing.T) {
		_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
			"GET /status": func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				conn.(*net.TCPConn).SetLinger(0) // RST, not FIN
				conn.Close()
			},
		})
		_, err := c.Status(ctx)
		if e := agentErr(t, err); e.ID != agent.ErrAppiumUnreachable || !e.Retryable {
			t.Errorf("got %+v", e)
		}
	})

	t.Run("client default timeout", func(t *testing.T) {
		f := &fakeAppium{routes: map[string]func(http.ResponseWriter, *http.Request){
			"GET /session/s1/source": func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
		}}
		srv := httptest.NewServer(f)
		defer srv.Close()
		c, _ := New(srv.URL, Options{Timeout: 50 * time.Millisecond})
		_, err := c.PageSource(ctx, "s1")
		if e := agentErr(t, err); e.ID != agent.ErrTimeout {
			t.Errorf("got %+v", e)
		}
	})

	t.Run("caller cancel is interrupted", func(t *testing.T) {
		started := make(chan struct{})
		_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
			"GET /session/s1/source": func(w http.ResponseWriter, r *http.Request) { close(started); <-r.Context().Done() },
		})
		cctx, cancel := context.WithCancel(ctx)
		go func() { <-started; cancel() }()
		_, err := c.PageSource(cctx, "s1")
		if e := agentErr(t, err); e.ID != agent.ErrInterrupted || e.Retryable {
			t.Errorf("got %+v", e)
		}
	})

	t.Run("gateway without a WebDriver body", func(t *testing.T) {
		_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
			"GET /status": func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(502)
				io.WriteString(w, "<html>Bad Gateway</html>")
			},
		})
		_, err := c.Status(ctx)
		if e := agentErr(t, err); e.ID != agent.ErrAppiumUnreachable {
			t.Errorf("got %+v", e)
		}
	})

	t.Run("unknown route", func(t *testing.T) {
		_, c := newFake(t, nil)
		_, err := c.CurrentActivity(ctx, "s1")
		if e := agentErr(t, err); e.ID != agent.ErrInternal || e.Code != "unknown command" || e.Retryable {
			t.Errorf("got %+v", e)
		}
	})
}

func TestStatusAndListSessions(t *testing.T) {
	_, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /status":          reply(200, capture(t, "status_200.json")),
		"GET /appium/sessions": reply(200, capture(t, "appium_sessions_empty_200.json")),
	})
	st, err := c.Status(context.Background())
	if err != nil || !st.Ready || st.Build.Version != "3.8.0" {
		t.Errorf("Status = %+v %v", st, err)
	}
	ss, err := c.ListSessions(context.Background())
	if err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("ListSessions = %#v %v", ss, err)
	}

	_, c2 := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /appium/sessions": reply(500, capture(t, "appium_sessions_insecure_500.json")),
	})
	_, err = c2.ListSessions(context.Background())
	if e := agentErr(t, err); e.ID != agent.ErrPermission || !strings.Contains(e.Msg, "session_discovery") {
		t.Errorf("without session_discovery: %+v", e)
	}
}

func TestElementsAndExecute(t *testing.T) {
	f, c := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"POST /session/s1/element":             reply(200, capture(t, "find_element_200.json")),
		"POST /session/s1/elements":            reply(200, capture(t, "find_elements_none_200.json")),
		"POST /session/s1/element/e%2F1/click": reply(200, capture(t, "click_200.json")),
		"POST /session/s1/execute/sync": func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var req struct{ Script string }
			json.Unmarshal(b, &req)
			file := map[string]string{
				"mobile: getCurrentPackage":  "current_package_200.json",
				"mobile: getCurrentActivity": "current_activity_200.json",
				"mobile: shell":              "shell_200.json",
				"mobile: queryAppState":      "query_app_state_200.json",
			}[req.Script]
			reply(200, capture0(file))(w, r)
		},
		"GET /session/s1/window/rect":         reply(200, capture(t, "window_rect_200.json")),
		"GET /session/s1/appium/capabilities": reply(200, capture(t, "session_capabilities_200.json")),
		"GET /appium/sessions":                reply(200, capture(t, "appium_sessions_one_200.json")),
	})
	// ServeHTTP reads the body before the handler; re-serve it for the execute handler.
	f.routes["POST /session/s1/execute/sync"] = func(next func(http.ResponseWriter, *http.Request)) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			last := f.reqs[len(f.reqs)-1].Body
			f.mu.Unlock()
			r.Body = io.NopCloser(strings.NewReader(string(last)))
			next(w, r)
		}
	}(f.routes["POST /session/s1/execute/sync"])

	ctx := context.Background()
	id, err := c.FindElement(ctx, "s1", ByXPath, "//*")
	if err != nil || id != "11f86f72-3e6f-4d84-8483-a95f492c8f2b" {
		t.Errorf("FindElement = %q %v", id, err)
	}
	ids, err := c.FindElements(ctx, "s1", ByID, "no.such:id/thing")
	if err != nil || ids == nil || len(ids) != 0 {
		t.Errorf("FindElements = %#v %v", ids, err)
	}
	// The element id stays one path segment even when it holds a '/'.
	if err := c.Click(ctx, "s1", "e/1"); err != nil {
		t.Errorf("Click: %v", err)
	}
	if pkg, err := c.CurrentPackage(ctx, "s1"); err != nil || pkg != "com.google.android.apps.nexuslauncher" {
		t.Errorf("CurrentPackage = %q %v", pkg, err)
	}
	if act, err := c.CurrentActivity(ctx, "s1"); err != nil || act != ".NexusLauncherActivity" {
		t.Errorf("CurrentActivity = %q %v", act, err)
	}
	if out, err := c.Shell(ctx, "s1", "getprop", "ro.build.version.sdk"); err != nil || out != "34\n" {
		t.Errorf("Shell = %q %v", out, err)
	}
	if st, err := c.QueryAppState(ctx, "s1", "com.example.app"); err != nil || st != AppStateNotRunning {
		t.Errorf("QueryAppState = %d %v", st, err)
	}
	w, h, err := c.WindowSize(ctx, "s1")
	if err != nil || w != 1080 || h != 2400 {
		t.Errorf("WindowSize = %d %d %v", w, h, err)
	}
	s, err := c.Attach(ctx, "s1")
	if err != nil || s.ID != "s1" || s.Capabilities["udid"] != "emulator-21584" {
		t.Errorf("Attach = %+v %v", s, err)
	}
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "f891f954-71a5-4f76-aa7e-e13daa331010" || list[0].CreatedMs != 1795248058551 || list[0].Capabilities["udid"] != "emulator-21584" {
		t.Errorf("ListSessions = %+v %v", list, err)
	}
	var execBodies []string
	for _, r := range f.reqs {
		if r.Path == "/session/s1/execute/sync" {
			execBodies = append(execBodies, string(r.Body))
		}
	}
	want := []string{
		`{"args":[],"script":"mobile: getCurrentPackage"}`,
		`{"args":[],"script":"mobile: getCurrentActivity"}`,
		`{"args":[{"args":["ro.build.version.sdk"],"command":"getprop"}],"script":"mobile: shell"}`,
		`{"args":[{"appId":"com.example.app"}],"script":"mobile: queryAppState"}`,
	}
	if strings.Join(execBodies, "\n") != strings.Join(want, "\n") {
		t.Errorf("execute bodies:\n%s\nwant:\n%s", strings.Join(execBodies, "\n"), strings.Join(want, "\n"))
	}

	_, c2 := newFake(t, map[string]func(http.ResponseWriter, *http.Request){
		"POST /session/s1/element": reply(404, capture(t, "find_element_none_404.json")),
	})
	_, err = c2.FindElement(ctx, "s1", ByID, "no.such:id/thing")
	if e := agentErr(t, err); !IsW3CError(err, "no such element") || e.ID != agent.ErrInternal || IsSessionGone(err) {
		t.Errorf("no such element: %+v", e)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:4723", "ftp://x", "http://"} {
		if _, err := New(u, Options{}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// TestConcurrentCallsReuseConnections: requests in flight at once on one
// Client (one per device of a host, as BenchmarkDaemon32's 32) reuse their
// keep-alive connections round after round instead of dialing anew. With
// MaxIdleConnsPerHost 4 every round after the first dialed 28 of its 32.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	const inFlight, rounds = 32, 6
	var (
		mu      sync.Mutex
		dialed  int
		arrived int
		gate    = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold every request until the round's inFlight have arrived, so
		// they are truly in flight at once (each on its own connection).
		mu.Lock()
		arrived++
		g := gate
		if arrived == inFlight {
			arrived = 0
			gate = make(chan struct{})
			close(g)
		}
		mu.Unlock()
		<-g
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write([]byte(`{"value":"<hierarchy/>"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.PageSource(context.Background(), "s1"); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The first round dials inFlight connections. A request of the next round
	// may still dial while an answered connection is on its way back to the
	// idle pool (net/http dials and waits for an idle one at once), so a few
	// more are allowed; without idle slots for every one it is
	// inFlight + (rounds-1)*(inFlight-4) = 172.
	if dialed > inFlight+inFlight/2 {
		t.Fatalf("%d connections dialed for %d rounds of %d requests at once, want about %d (one per request in flight)", dialed, rounds, inFlight, inFlight)
	}
	t.Logf("%d connections for %d requests", dialed, rounds*inFlight)
}

// BenchmarkConcurrentPageSource: 32 page sources in flight at once on one
// Client, round after round, against a local HTTP server in this process;
// side by side the transport as it was (4 idle connections per server) and
// the default Client. Reports the process's CPU per request (client and
// server sides both, as a local Appium's accept/close is on the same host)
// and connections dialed per request.
func BenchmarkConcurrentPageSource(b *testing.B) {
	const inFlight = 32
	for _, tc := range []struct {
		name string
		hc   *http.Client
	}{
		{"idle4", &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second}}},
		{"default", nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var dialed atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				w.Write([]byte(`{"value":"<hierarchy/>"}`))
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					dialed.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			c, err := New(srv.URL, Options{HTTPClient: tc.hc})
			if err != nil {
				b.Fatal(err)
			}
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				var wg sync.WaitGroup
				for range inFlight {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := c.PageSource(context.Background(), "s1"); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			reqs := float64(b.N * inFlight)
			b.ReportMetric((processCPU(b)-cpu0).Seconds()*1e6/reqs, "cpu-µs/request")
			b.ReportMetric(float64(dialed.Load())/reqs, "dials/request")
		})
	}
}

// processCPU is this process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
