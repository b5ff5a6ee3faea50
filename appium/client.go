package appium

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

var _ device.Driver = (*Client)(nil)

// Defaults of Options.
const (
	// DefaultTimeout bounds one ordinary call (page source, find, execute …).
	DefaultTimeout = 30 * time.Second
	// DefaultCreateTimeout bounds POST /session: a cold UiAutomator2 start installs
	// two APKs and waits up to 30 s for the instrumentation's server.
	DefaultCreateTimeout = 3 * time.Minute
	// DefaultProbeTimeout bounds one Probe; past it the session is UNHEALTHY (timeout).
	DefaultProbeTimeout = 10 * time.Second
	// DefaultSlowProbe is the DEGRADED threshold: a probe that answers but takes
	// longer than this (both of its calls together) reports DEGRADED. A warm probe
	// against a live session takes a few ms on the local host, so 2 s means the
	// server or the device is struggling.
	DefaultSlowProbe = 2 * time.Second
)

// W3C element reference key (WebDriver §12.2), and the legacy JSONWP key some
// servers still add.
const (
	w3cElementKey    = "element-6066-11e4-a52e-4f735466cecf"
	legacyElementKey = "ELEMENT"
)

// Options configure a Client. Zero values take the defaults above.
type Options struct {
	// HTTPClient is the client's own http.Client; nil builds one (never
	// http.DefaultClient).
	HTTPClient    *http.Client
	Timeout       time.Duration
	CreateTimeout time.Duration
	ProbeTimeout  time.Duration
	SlowProbe     time.Duration
	// Now is the clock Probe measures latency with; nil means time.Now.
	Now func() time.Time
}

// IdleConnsPerServer is how many idle keep-alive connections the default
// HTTP client keeps to its Appium server. One local Appium serves every
// device of the host, each run's requests in flight at once: with fewer idle
// slots than requests in flight (it was 4), every answer beyond them closed
// its connection and the next request dialed a new one, a TCP handshake and
// teardown on both sides per request at 32 devices
// (TestConcurrentCallsReuseConnections). Idle connections close after 90 s.
const IdleConnsPerServer = 128

// Client is a W3C WebDriver client for one Appium 3 server. It is safe for
// concurrent use. Sessions are addressed by id, so a Client can work with
// sessions another Client (or a previous daemon) created.
type Client struct {
	base  string // scheme://host:port[/base-path], no trailing slash
	hc    *http.Client
	opt   Options
	nowFn func() time.Time
}

// New returns a Client for the Appium server at baseURL (e.g.
// "http://127.0.0.1:4723", or with the server's --base-path such as
// "http://host:4723/wd/hub").
func New(baseURL string, opt Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "appium: server URL %q is not an http(s) URL", baseURL)
	}
	if opt.HTTPClient == nil {
		opt.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // the server is local or on the fleet network; never via HTTP_PROXY
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: IdleConnsPerServer,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.CreateTimeout <= 0 {
		opt.CreateTimeout = DefaultCreateTimeout
	}
	if opt.ProbeTimeout <= 0 {
		opt.ProbeTimeout = DefaultProbeTimeout
	}
	if opt.SlowProbe <= 0 {
		opt.SlowProbe = DefaultSlowProbe
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), hc: opt.HTTPClient, opt: opt, nowFn: now}, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base }

// Status is the answer of GET /status.
type Status struct {
	Ready   bool   `json:"ready"`
	Message string `json:"message"`
	Build   struct {
		Version string `json:"version"`
		GitSHA  string `json:"git-sha"`
	} `json:"build"`
}

// Status calls GET /status. A server that is not listening gives appium_unreachable.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.call(ctx, c.opt.Timeout, http.MethodGet, "/status", nil, &st, false)
	return st, err
}

// CreateSession POSTs /session with
// {"capabilities":{"alwaysMatch":caps,"firstMatch":[{}]}} and returns the new
// session id and the capabilities the server answered with. Any W3C error is
// session_create_failed with Code = the W3C error ("session not created",
// "unknown error", "invalid argument", …) and Msg = the server's message. The
// call is bounded by ctx and Options.CreateTimeout.
func (c *Client) CreateSession(ctx context.Context, caps map[string]any) (device.Session, error) {
	if caps == nil {
		caps = map[string]any{}
	}
	body := map[string]any{"capabilities": map[string]any{"alwaysMatch": caps, "firstMatch": []any{map[string]any{}}}}
	var v struct {
		SessionID    string         `json:"sessionId"`
		Capabilities map[string]any `json:"capabilities"`
	}
	if err := c.call(ctx, c.opt.CreateTimeout, http.MethodPost, "/session", body, &v, true); err != nil {
		return device.Session{}, err
	}
	if v.SessionID == "" {
		return device.Session{}, &agent.Error{ID: agent.ErrSessionCreateFailed, Retryable: true, Msg: "appium: POST /session answered without a sessionId"}
	}
	return device.Session{ID: v.SessionID, Capabilities: v.Capabilities}, nil
}

// Attach returns an existing session by id with its capabilities, from
// GET /session/{id}/appium/capabilities (Appium 3's replacement of the deprecated
// GET /session/{id}; answered by the Appium server itself, without a device
// round trip). A session the server does not know gives an error for which
// IsSessionGone is true.
func (c *Client) Attach(ctx context.Context, sessionID string) (device.Session, error) {
	caps, err := c.sessionCaps(ctx, c.opt.Timeout, sessionID)
	if err != nil {
		return device.Session{}, err
	}
	return device.Session{ID: sessionID, Capabilities: caps}, nil
}

// sessionCaps is GET /session/{id}/appium/capabilities, whose value is
// {"capabilities":{…}} (base-driver getAppiumSessionCapabilities).
func (c *Client) sessionCaps(ctx context.Context, limit time.Duration, sessionID string) (map[string]any, error) {
	var v struct {
		Capabilities map[string]any `json:"capabilities"`
	}
	if err := c.call(ctx, limit, http.MethodGet, sessPath(sessionID, "/appium/capabilities"), nil, &v, false); err != nil {
		return nil, err
	}
	return v.Capabilities, nil
}

// Probe checks the session sessionID in two calls, bounded together by
// Options.ProbeTimeout (and ctx):
//  1. GET /session/{id}/appium/capabilities — the Appium server knows the session;
//  2. GET /session/{id}/window/rect — the driver reaches the on-device
//     UiAutomator2 server (the uiautomator2 driver answers it from the device's
//     /window/current/size).
//
// Verdicts:
//   - HEALTHY: both answer within Options.SlowProbe.
//   - DEGRADED: both answer but take longer than SlowProbe, or (1) answers and
//     (2) fails with a W3C error other than "invalid session id" (the driver
//     reports a problem); details["reason"] says which, details["errorId"] and
//     details["code"] the classified error of (2).
//   - UNHEALTHY: the session is gone ("invalid session id"; err is nil, since the
//     verdict is certain), or the server cannot be asked (appium_unreachable,
//     timeout, interrupted: err is that *agent.Error).
//
// details always holds "latencyMs" (int64), and "capabilities" when (1) answered.
func (c *Client) Probe(ctx context.Context, sessionID string) (device.Health, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.ProbeTimeout)
	defer cancel()
	start := c.nowFn()
	details := map[string]any{}
	// Each call gets the probe's remaining time: c.call's own bound is the probe timeout.
	caps, err := c.sessionCaps(ctx, c.opt.ProbeTimeout, sessionID)
	if err != nil {
		return c.unhealthy(details, start, err)
	}
	details["capabilities"] = caps
	return c.probeRect(ctx, sessionID, start, details)
}

// ProbeAlive is Probe without reading the session's capabilities (a
// session's capabilities do not change; the caller knows them from an
// earlier probe): one round trip, GET /window/rect, judged as Probe does.
// details has no "capabilities".
func (c *Client) ProbeAlive(ctx context.Context, sessionID string) (device.Health, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.ProbeTimeout)
	defer cancel()
	return c.probeRect(ctx, sessionID, c.nowFn(), map[string]any{})
}

var _ device.AliveProber = (*Client)(nil)

// probeRect is the probe's GET /window/rect, from start.
func (c *Client) probeRect(ctx context.Context, sessionID string, start time.Time, details map[string]any) (device.Health, map[string]any, error) {
	var rect struct{ Width, Height int }
	rectErr := c.call(ctx, c.opt.ProbeTimeout, http.MethodGet, sessPath(sessionID, "/window/rect"), nil, &rect, false)
	elapsed := c.nowFn().Sub(start)
	details["latencyMs"] = elapsed.Milliseconds()
	if rectErr != nil {
		e := agent.Classify(rectErr)
		if IsSessionGone(e) || e.ID == agent.ErrAppiumUnreachable || e.ID == agent.ErrTimeout || e.ID == agent.ErrInterrupted {
			return c.unhealthy(details, start, rectErr)
		}
		details["reason"] = "driver error on GET /window/rect: " + e.Error()
		details["errorId"] = string(e.ID)
		details["code"] = e.Code
		return device.Degraded, details, nil
	}
	if elapsed > c.opt.SlowProbe {
		details["reason"] = fmt.Sprintf("slow: answered in %v, threshold %v", elapsed.Round(time.Millisecond), c.opt.SlowProbe)
		return device.Degraded, details, nil
	}
	return device.Healthy, details, nil
}

func (c *Client) unhealthy(details map[string]any, start time.Time, err error) (device.Health, map[string]any, error) {
	e := agent.Classify(err)
	details["errorId"] = string(e.ID)
	details["code"] = e.Code
	details["reason"] = e.Error()
	details["latencyMs"] = c.nowFn().Sub(start).Milliseconds()
	if IsSessionGone(e) {
		return device.Unhealthy, details, nil
	}
	return device.Unhealthy, details, e
}

// DeleteSession ends the session (DELETE /session/{id}). A session that is
// already gone is not an error: the outcome the caller wants holds.
func (c *Client) DeleteSession(ctx context.Context, sessionID string) error {
	err := c.call(ctx, c.opt.Timeout, http.MethodDelete, sessPath(sessionID, ""), nil, nil, false)
	if IsSessionGone(err) {
		return nil
	}
	return err
}

// PageSource is GET /session/{id}/source: the current screen's UI hierarchy
// XML as the on-device UiAutomator2 server dumps it.
func (c *Client) PageSource(ctx context.Context, sessionID string) (string, error) {
	var s string
	err := c.call(ctx, c.opt.Timeout, http.MethodGet, sessPath(sessionID, "/source"), nil, &s, false)
	return s, err
}

// WindowSize is the display's width and height in pixels, from
// GET /session/{id}/window/rect.
func (c *Client) WindowSize(ctx context.Context, sessionID string) (width, height int, err error) {
	var r struct{ Width, Height int }
	err = c.call(ctx, c.opt.Timeout, http.MethodGet, sessPath(sessionID, "/window/rect"), nil, &r, false)
	return r.Width, r.Height, err
}

// Locator strategies the UiAutomator2 driver accepts.
const (
	ByID                 = "id"
	ByXPath              = "xpath"
	ByAccessibilityID    = "accessibility id"
	ByClassName          = "class name"
	ByAndroidUIAutomator = "-android uiautomator"
)

// FindElement is POST /session/{id}/element {"using","value"}; it returns the
// element id. No match gives internal_error with Code "no such element"
// (IsW3CError(err, "no such element")).
func (c *Client) FindElement(ctx context.Context, sessionID, using, value string) (string, error) {
	var ref map[string]any
	if err := c.call(ctx, c.opt.Timeout, http.MethodPost, sessPath(sessionID, "/element"), map[string]string{"using": using, "value": value}, &ref, false); err != nil {
		return "", err
	}
	id := elementID(ref)
	if id == "" {
		return "", agent.Errorf(agent.ErrInternal, "appium: element reference without an id: %v", ref)
	}
	return id, nil
}

// FindElements is POST /session/{id}/elements; no match is an empty slice.
func (c *Client) FindElements(ctx context.Context, sessionID, using, value string) ([]string, error) {
	var refs []map[string]any
	if err := c.call(ctx, c.opt.Timeout, http.MethodPost, sessPath(sessionID, "/elements"), map[string]string{"using": using, "value": value}, &refs, false); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(refs))
	for _, r := range refs {
		if id := elementID(r); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func elementID(ref map[string]any) string {
	if s, ok := ref[w3cElementKey].(string); ok {
		return s
	}
	s, _ := ref[legacyElementKey].(string)
	return s
}

// Click is POST /session/{id}/element/{elementID}/click.
func (c *Client) Click(ctx context.Context, sessionID, elementID string) error {
	return c.call(ctx, c.opt.Timeout, http.MethodPost, sessPath(sessionID, "/element/"+url.PathEscape(elementID)+"/click"), map[string]any{}, nil, false)
}

// SessionInfo is one entry of GET /appium/sessions.
type SessionInfo struct {
	ID string `json:"id"`
	// CreatedMs is the creation time in Unix milliseconds.
	CreatedMs    int64          `json:"created"`
	Capabilities map[string]any `json:"capabilities"`
}

// ListSessions is GET /appium/sessions: every session the server holds. The
// server must run with --allow-insecure *:session_discovery, else
// permission_error.
func (c *Client) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	err := c.call(ctx, c.opt.Timeout, http.MethodGet, "/appium/sessions", nil, &out, false)
	return out, err
}

// Execute is POST /session/{id}/execute/sync {"script","args"}; with the
// UiAutomator2 driver script is a "mobile: …" extension and args one object.
// It decodes the value into out (nil to discard).
func (c *Client) Execute(ctx context.Context, sessionID, script string, args any, out any) error {
	a := []any{}
	if args != nil {
		a = append(a, args)
	}
	return c.call(ctx, c.opt.Timeout, http.MethodPost, sessPath(sessionID, "/execute/sync"), map[string]any{"script": script, "args": a}, out, false)
}

// CurrentActivity is `mobile: getCurrentActivity`: the focused activity as the
// driver reads it from `dumpsys window` (e.g. ".MainActivity" or a full class name).
func (c *Client) CurrentActivity(ctx context.Context, sessionID string) (string, error) {
	var s string
	err := c.Execute(ctx, sessionID, "mobile: getCurrentActivity", nil, &s)
	return s, err
}

// CurrentPackage is `mobile: getCurrentPackage`: the focused package id.
func (c *Client) CurrentPackage(ctx context.Context, sessionID string) (string, error) {
	var s string
	err := c.Execute(ctx, sessionID, "mobile: getCurrentPackage", nil, &s)
	return s, err
}

// App states answered by QueryAppState (appium-android-driver's queryAppState).
const (
	AppStateNotInstalled        = 0
	AppStateNotRunning          = 1
	AppStateRunningInBackground = 3
	AppStateRunningInForeground = 4
)

// QueryAppState is `mobile: queryAppState {"appId":packageID}`: one of the AppState* values.
func (c *Client) QueryAppState(ctx context.Context, sessionID, packageID string) (int, error) {
	var n int
	err := c.Execute(ctx, sessionID, "mobile: queryAppState", map[string]any{"appId": packageID}, &n)
	return n, err
}

// Shell is `mobile: shell {"command","args"}`: the driver runs
// `adb shell command args…` and returns stdout. The server needs
// --allow-insecure uiautomator2:adb_shell, else permission_error.
func (c *Client) Shell(ctx context.Context, sessionID, command string, args ...string) (string, error) {
	if args == nil {
		args = []string{}
	}
	var s string
	err := c.Execute(ctx, sessionID, "mobile: shell", map[string]any{"command": command, "args": args}, &s)
	return s, err
}

func sessPath(id, rest string) string { return "/session/" + url.PathEscape(id) + rest }

// w3cError is the W3C error body (WebDriver §6.6), {"value":{"error","message","stacktrace"}}.
type w3cError struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	Stacktrace string `json:"stacktrace"`
}

// call sends one request bounded by ctx and limit, decodes the W3C "value" into
// out (nil to discard) and classifies every failure. create marks POST /session.
func (c *Client) call(ctx context.Context, limit time.Duration, method, path string, body, out any, create bool) error {
	what := method + " " + path
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "appium: %s: encode body", what)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(cctx, method, c.base+path, rd)
	if err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "appium: %s", what)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return classifyTransport(ctx, err, what)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return classifyTransport(ctx, err, what)
	}
	return decodeResponse(resp.StatusCode, raw, out, what, create)
}

// decodeResponse turns one HTTP answer into out or a classified error.
func decodeResponse(status int, raw []byte, out any, what string, create bool) error {
	if status < 400 && out != nil {
		// One pass straight into out (a page source is tens of KB: the
		// envelope's RawMessage copy and a second decode of it doubled the
		// work). Whatever fails is decoded again below, for its error.
		env := struct {
			Value any `json:"value"`
		}{Value: out}
		if json.Unmarshal(raw, &env) == nil {
			return nil
		}
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	jsonErr := json.Unmarshal(raw, &env)
	if status >= 400 || jsonErr != nil {
		var we w3cError
		if jsonErr == nil {
			_ = json.Unmarshal(env.Value, &we)
		}
		if we.Error == "" {
			// Not a WebDriver answer: a proxy in between, or not Appium at all.
			if status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout {
				return agent.Errorf(agent.ErrAppiumUnreachable, "appium: %s: HTTP %d: %s", what, status, snippet(raw))
			}
			id := agent.ErrInternal
			if create {
				id = agent.ErrSessionCreateFailed
			}
			return &agent.Error{ID: id, Retryable: agent.DefaultRetryable(id), Msg: fmt.Sprintf("appium: %s: HTTP %d, not a WebDriver answer: %s", what, status, snippet(raw))}
		}
		return classifyW3C(status, we, what, create)
	}
	if out == nil || len(env.Value) == 0 {
		return nil
	}
	if err := json.Unmarshal(env.Value, out); err != nil {
		return agent.Wrap(agent.ErrInternal, err, "appium: %s: unexpected value %s", what, snippet(env.Value))
	}
	return nil
}

// ErrSessionGone is the cause of the error a call on a session the server does
// not know returns (W3C "invalid session id"); see IsSessionGone.
var ErrSessionGone = errors.New("appium: session is either terminated or not started")

// IsSessionGone reports whether err says the session no longer exists on the
// server (W3C "invalid session id", HTTP 404): create a new one.
func IsSessionGone(err error) bool { return errors.Is(err, ErrSessionGone) }

// IsW3CError reports whether err is a classified W3C error with that error code
// (e.g. "no such element", "stale element reference").
func IsW3CError(err error, code string) bool {
	var e *agent.Error
	return errors.As(err, &e) && e.Code == code
}

// instrumentationGone recognises the uiautomator2 driver's answer for a
// session whose instrumentation process is no longer running ("… cannot be
// proxied to UiAutomator2 server because the instrumentation process is not
// running (probably crashed)").
func instrumentationGone(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "instrumentation process is not running") ||
		strings.Contains(m, "cannot be proxied to uiautomator2 server") ||
		// base-driver's proxy failure: the on-device server closed or refused
		// the forwarded connection (it died, or another session replaced it).
		strings.Contains(m, "could not proxy command to the remote server")
}

func classifyW3C(status int, we w3cError, what string, create bool) *agent.Error {
	msg := fmt.Sprintf("appium: %s: HTTP %d: %s", what, status, we.Message)
	mk := func(id agent.ErrorID, retryable bool, cause error) *agent.Error {
		return &agent.Error{ID: id, Code: we.Error, Retryable: retryable, Msg: msg, Err: cause}
	}
	switch {
	case we.Error == "invalid session id":
		// Checked before create: it cannot answer POST /session, and everywhere else
		// it means the same thing.
		return mk(agent.ErrInvalidRequest, false, ErrSessionGone)
	case create:
		// A request Appium rejects as malformed will fail the same way again.
		return mk(agent.ErrSessionCreateFailed, we.Error != "invalid argument", nil)
	case we.Error == "timeout" || we.Error == "script timeout":
		return mk(agent.ErrTimeout, true, nil)
	case we.Error == "unknown error" && instrumentationGone(we.Message):
		// The session's on-device UiAutomator2 server died (the device went
		// offline, the instrumentation was killed): Appium keeps the session but
		// it can never serve again, so it is as gone as an invalid session id.
		return &agent.Error{ID: agent.ErrInvalidRequest, Code: "invalid session id", Msg: msg, Err: ErrSessionGone}
	case we.Error == "unknown error" && strings.Contains(we.Message, "Potentially insecure feature"):
		return mk(agent.ErrPermission, false, nil)
	case we.Error == "unknown error":
		return mk(agent.ErrProcess, false, nil)
	}
	return mk(agent.ErrInternal, false, nil)
}

// classifyTransport classifies a failure to get an HTTP answer. parent is the
// caller's context: its cancellation is interrupted, any deadline is timeout.
func classifyTransport(parent context.Context, err error, what string) *agent.Error {
	switch {
	case errors.Is(parent.Err(), context.Canceled):
		return agent.Wrap(agent.ErrInterrupted, err, "appium: %s", what)
	case errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err):
		return agent.Wrap(agent.ErrTimeout, err, "appium: %s: no answer in time", what)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// This process is out of descriptors: Appium is not at fault.
		return agent.Wrap(agent.ErrResourceExhausted, err, "appium: %s: out of file descriptors", what)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return agent.Wrap(agent.ErrAppiumUnreachable, err, "appium: %s", what)
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.As(err, &dnsErr) || (errors.As(err, &opErr) && opErr.Op == "dial") {
		return agent.Wrap(agent.ErrAppiumUnreachable, err, "appium: %s", what)
	}
	return agent.Wrap(agent.ErrNetwork, err, "appium: %s", what)
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func snippet(b []byte) string {
	const max = 200
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
