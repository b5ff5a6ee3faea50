package uia2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// DeviceView is what the server sees of the device (implemented by *android.Device).
type DeviceView interface {
	// Foreground returns the focused app's package id, activity and view hierarchy
	// root (nil when the window has no views).
	Foreground() (pkg, activity string, root *android.Element)
	// Click performs a tap on el, an element of the current Foreground tree.
	Click(el *android.Element) error
	// DisplaySize is the display in pixels and its density in dpi.
	DisplaySize() (width, height, densityDpi int)
	// Prop is a system property ("" when unset).
	Prop(name string) string
	// APILevel is ro.build.version.sdk.
	APILevel() int
}

// legacyPrefix is what the real ServerHandler strips from every request URI.
const legacyPrefix = "/wd/hub"

// noID is Session.NO_ID, the sessionId of answers that belong to no session.
const noID = "None"

// Server version facts, from the v10.6.6 APK's manifest (aapt dump badging).
const (
	serverVersion     = "10.6.6"
	serverVersionCode = 278
)

// deleteStopDelay is how long after answering DELETE /session/{id} the real
// server stops its instrumentation (DeleteSession posts ServerInstrumentation.stop
// with a 15 ms delay).
const deleteStopDelay = 15 * time.Millisecond

// Serve serves the UiAutomator2 HTTP API on ln until ctx is done, and returns nil
// then. Like the real server, it also stops (and returns nil) shortly after a
// session is deleted: the driver then sees the instrumentation end. It closes ln.
//
// Each response leaves in ONE write, as the real server's Netty pipeline
// writes a FullHttpResponse: adbd then reads it in one piece and the adb
// server forwards it in one piece. net/http's server would flush a response
// over 4 KiB in two writes, which the adb server's forward socket (Nagle on)
// holds for the client's delayed ACK: 40 ms per page source, an artifact no
// real device shows.
func Serve(ctx context.Context, ln net.Listener, view DeviceView) error {
	s := newServer(view)
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	errc := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveConn(c, s)
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case <-s.stopped:
		time.Sleep(deleteStopDelay)
	case err = <-errc:
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
	}
	ln.Close()
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}

// serveConn serves HTTP/1.1 requests on c until the client closes it or asks
// for "Connection: close".
func serveConn(c net.Conn, h http.Handler) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		res := rec.Result()
		res.ContentLength = int64(rec.Body.Len())
		res.Close = req.Close
		res.Request = req
		var out bytes.Buffer
		if err := res.Write(&out); err != nil {
			return
		}
		if _, err := c.Write(out.Bytes()); err != nil || req.Close {
			return
		}
	}
}

// Handler returns the UiAutomator2 HTTP API as a handler (it does not stop after a
// session is deleted; Serve does).
func Handler(view DeviceView) http.Handler { return newServer(view) }

type server struct {
	view    DeviceView
	stopped chan struct{}
	stop    sync.Once

	mu       sync.Mutex
	sess     *session
	windowID map[string]int // window ids by package/activity, handed out in order
}

type session struct {
	id       string
	caps     map[string]any  // parsed: alwaysMatch merged with firstMatch[0]
	rawCaps  json.RawMessage // the request's "capabilities" object, echoed back
	settings map[string]any
	elements map[string]elemRef // element id -> where it was found
	byKey    map[string]string  // elemRef key -> element id
}

// elemRef locates a found element: the window it was found in and its path
// from the window root, plus what identifies the view there.
type elemRef struct {
	pkg, activity string
	path          []int
	class, resID  string
	bounds        [4]int
}

func (r elemRef) key() string {
	return fmt.Sprintf("%s/%s%v", r.pkg, r.activity, r.path)
}

func newServer(view DeviceView) *server {
	return &server{view: view, stopped: make(chan struct{}), windowID: map[string]int{}}
}

// wdError is a W3C error as the real server reports it.
type wdError struct {
	status int
	code   string // W3C error code
	class  string // Java exception class, for the stacktrace line
	msg    string
}

func (e *wdError) Error() string { return e.code + ": " + e.msg }

const excPkg = "io.appium.uiautomator2.common.exceptions."

// Errors of the real server (common/exceptions/*: getError, getHttpStatus).
func errNoSuchElement(msg string) *wdError {
	if msg == "" {
		msg = "An element could not be located on the page using the given search parameters"
	}
	return &wdError{404, "no such element", excPkg + "ElementNotFoundException", msg}
}
func errStale(msg string) *wdError {
	return &wdError{404, "stale element reference", excPkg + "StaleElementReferenceException", msg}
}
func errInvalidSession(msg string) *wdError {
	return &wdError{404, "invalid session id", excPkg + "NoSuchDriverException", msg}
}
func errUnknownCommand() *wdError {
	return &wdError{404, "unknown command", excPkg + "UnknownCommandException",
		"The requested resource could not be found, or a request was received using an HTTP method that is not supported by the mapped resource"}
}
func errInvalidArgument(msg string) *wdError {
	return &wdError{400, "invalid argument", excPkg + "InvalidArgumentException", msg}
}
func errInvalidSelector(msg string) *wdError {
	return &wdError{400, "invalid selector", excPkg + "InvalidSelectorException", msg}
}
func errSessionNotCreated(msg string) *wdError {
	return &wdError{500, "session not created", excPkg + "SessionNotCreatedException", msg}
}
func errUnknown(msg string) *wdError {
	return &wdError{500, "unknown error", excPkg + "UiAutomator2Exception", msg}
}

// request is one routed call.
type request struct {
	r      *http.Request
	params map[string]string
	body   []byte
}

type handlerFunc func(s *server, q *request) (any, error)

type route struct {
	method, pattern string
	noSession       bool // NoSessionCommandHandler: no session id check
	h               handlerFunc
	segs            []string
}

// routes are those of the v10.6.6 AppiumServlet that this simulation implements.
var routes = []*route{
	{method: "GET", pattern: "/status", noSession: true, h: (*server).status},
	{method: "GET", pattern: "/sessions", noSession: true, h: (*server).sessions},
	{method: "POST", pattern: "/session", noSession: true, h: (*server).newSession},
	{method: "GET", pattern: "/session/:sessionId", h: (*server).sessionDetails},
	{method: "DELETE", pattern: "/session/:sessionId", noSession: true, h: (*server).deleteSession},
	{method: "GET", pattern: "/session/:sessionId/source", h: (*server).source},
	{method: "GET", pattern: "/session/:sessionId/screenshot", h: (*server).screenshot},
	{method: "GET", pattern: "/session/:sessionId/window/:windowHandle/size", h: (*server).windowSize},
	{method: "GET", pattern: "/session/:sessionId/orientation", h: (*server).orientation},
	{method: "GET", pattern: "/session/:sessionId/appium/device/info", h: (*server).deviceInfo},
	{method: "GET", pattern: "/session/:sessionId/appium/device/pixel_ratio", h: (*server).pixelRatio},
	{method: "GET", pattern: "/session/:sessionId/appium/device/display_density", h: (*server).displayDensity},
	{method: "GET", pattern: "/session/:sessionId/appium/device/system_bars", h: (*server).systemBars},
	{method: "GET", pattern: "/session/:sessionId/appium/settings", h: (*server).getSettings},
	{method: "POST", pattern: "/session/:sessionId/appium/settings", h: (*server).updateSettings},
	{method: "POST", pattern: "/session/:sessionId/element", h: (*server).findElement},
	{method: "POST", pattern: "/session/:sessionId/elements", h: (*server).findElements},
	{method: "POST", pattern: "/session/:sessionId/element/:id/click", h: (*server).click},
	{method: "GET", pattern: "/session/:sessionId/element/:id/text", h: (*server).elementText},
	{method: "GET", pattern: "/session/:sessionId/element/:id/attribute/:name", h: (*server).elementAttribute},
	{method: "GET", pattern: "/session/:sessionId/element/:id/rect", h: (*server).elementRect},
	{method: "GET", pattern: "/session/:sessionId/element/:id/location", h: (*server).elementLocation},
	{method: "GET", pattern: "/session/:sessionId/element/:id/size", h: (*server).elementSize},
}

func init() {
	for _, rt := range routes {
		rt.segs = strings.Split(rt.pattern, "/")
	}
}

// match is AppiumServlet.isFor: same number of "/" sections, ":x" matches any.
func (rt *route) match(segs []string) (map[string]string, bool) {
	if len(segs) != len(rt.segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, p := range rt.segs {
		if strings.HasPrefix(p, ":") {
			v, err := url.PathUnescape(segs[i])
			if err != nil {
				v = segs[i]
			}
			params[p[1:]] = v
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return params, true
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	p = strings.TrimPrefix(p, legacyPrefix)
	segs := strings.Split(p, "/")
	var rt *route
	var params map[string]string
	for _, c := range routes {
		if c.method != r.Method {
			continue
		}
		if pm, ok := c.match(segs); ok {
			rt, params = c, pm
			break
		}
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	q := &request{r: r, params: params, body: body}
	var sid any = nil
	if len(segs) > 2 && segs[1] == "session" {
		sid = segs[2]
	}
	if rt == nil {
		writeResponse(w, sid, nil, errUnknownCommand())
		return
	}
	if id, ok := params["sessionId"]; ok {
		sid = id
	}
	if !rt.noSession {
		// SafeRequestHandler.handle: the request's session must be the current one.
		s.mu.Lock()
		cur := s.sess
		s.mu.Unlock()
		id, _ := sid.(string)
		if cur == nil || id == "" || cur.id != id {
			writeResponse(w, sid, nil, errInvalidSession(fmt.Sprintf("The session identified by %s is not known", id)))
			return
		}
	}
	v, err := rt.h(s, q)
	if rt.pattern == "/status" || rt.pattern == "/sessions" {
		sid = noID
	}
	if rt.pattern == "/session" && err == nil {
		sid = v.(sessionModel).SessionID
	}
	writeResponse(w, sid, v, err)
	if rt.method == "DELETE" && err == nil {
		s.stop.Do(func() { close(s.stopped) })
	}
}

// writeResponse is AppiumResponse.renderTo plus the headers ServerHandler sets.
func writeResponse(w http.ResponseWriter, sid any, value any, err error) {
	status := http.StatusOK
	if err != nil {
		var we *wdError
		if !errors.As(err, &we) {
			we = errUnknown(err.Error())
		}
		status = we.status
		value = map[string]any{
			"error":      we.code,
			"message":    we.msg,
			"stacktrace": we.class + ": " + we.msg,
		}
	}
	b, mErr := json.Marshal(struct {
		SessionID any `json:"sessionId"`
		Value     any `json:"value"`
	}{sid, value})
	if mErr != nil {
		b, status = []byte("{}"), http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Pragma", "no-cache")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// currentSession returns the session (the route's check guarantees one).
func (s *server) currentSession() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// windowIDFor hands out accessibility window ids: one per package/activity, in
// the order windows are first seen.
func (s *server) windowIDFor(pkg, activity string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := pkg + "/" + activity
	id, ok := s.windowID[k]
	if !ok {
		id = len(s.windowID) + 1
		s.windowID[k] = id
	}
	return id
}

func (s *server) snapshot() *snapshot {
	pkg, activity, root := s.view.Foreground()
	w, h, _ := s.view.DisplaySize()
	return takeSnapshot(pkg, activity, root, w, h, s.view.APILevel(), s.windowIDFor(pkg, activity))
}
