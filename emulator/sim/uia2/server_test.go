package uia2

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// fakeDevice is a scriptable DeviceView: one app whose activities show the given
// roots; clicking an element with OnClick brings that activity to the front.
type fakeDevice struct {
	mu         sync.Mutex
	pkg        string
	activity   string
	screens    map[string]*android.Element
	clicks     []*android.Element
	api        int
	w, h, dpi  int
	props      map[string]string
	clickError error
}

func (f *fakeDevice) Foreground() (string, string, *android.Element) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pkg, f.activity, f.screens[f.activity]
}

func (f *fakeDevice) Click(el *android.Element) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clickError != nil {
		return f.clickError
	}
	f.clicks = append(f.clicks, el)
	if el.OnClick != "" {
		f.activity = el.OnClick
	}
	return nil
}

func (f *fakeDevice) DisplaySize() (int, int, int) { return f.w, f.h, f.dpi }
func (f *fakeDevice) Prop(name string) string      { return f.props[name] }
func (f *fakeDevice) APILevel() int                { return f.api }

const (
	appPkg  = "com.example.shop"
	homeAct = "com.example.shop.HomeActivity"
	cartAct = "com.example.shop.CartActivity"
)

func newFake() *fakeDevice {
	home := &android.Element{
		Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2400},
		Children: []*android.Element{
			{Class: "android.widget.LinearLayout", ResourceID: "android:id/content", Bounds: [4]int{0, 63, 1080, 2400},
				Children: []*android.Element{
					{Class: "android.widget.TextView", ResourceID: appPkg + ":id/title", Text: "Welcome", Bounds: [4]int{0, 63, 1080, 200}},
					{Class: "android.widget.Button", ResourceID: appPkg + ":id/cart", Text: "Cart", ContentDesc: "Open cart",
						Clickable: true, Focusable: true, Bounds: [4]int{100, 300, 500, 420}, OnClick: cartAct},
					{Class: "android.widget.Button", ResourceID: appPkg + ":id/help", Text: "Help",
						Clickable: true, Focusable: true, Bounds: [4]int{600, 300, 1000, 420}},
				}},
		},
	}
	cart := &android.Element{
		Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2400},
		Children: []*android.Element{
			{Class: "android.widget.TextView", ResourceID: appPkg + ":id/empty", Text: "Your cart is empty", Bounds: [4]int{0, 63, 1080, 300}},
		},
	}
	return &fakeDevice{
		pkg: appPkg, activity: homeAct,
		screens: map[string]*android.Element{homeAct: home, cartAct: cart},
		api:     34, w: 1080, h: 2400, dpi: 420,
		props: map[string]string{
			"ro.product.manufacturer": "Google", "ro.product.model": "sdk_gphone64_x86_64",
			"ro.product.brand": "google", "ro.build.version.release": "14", "ro.serialno": "EMULATOR34X1X1X0",
		},
	}
}

// reply is a decoded response.
type reply struct {
	status    int
	sessionID any
	value     any
	raw       map[string]json.RawMessage
}

func call(t *testing.T, h http.Handler, method, path string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out struct {
		SessionID any `json:"sessionId"`
		Value     any `json:"value"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, rec.Body.String(), err)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(rec.Body.Bytes(), &raw)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return reply{rec.Code, out.SessionID, out.Value, raw}
}

func wantError(t *testing.T, r reply, status int, code string) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (value %v)", r.status, status, r.value)
	}
	v, ok := r.value.(map[string]any)
	if !ok {
		t.Fatalf("error value %v is not an object", r.value)
	}
	if v["error"] != code {
		t.Fatalf("error %v, want %q", v["error"], code)
	}
	msg, _ := v["message"].(string)
	if msg == "" {
		t.Fatalf("error without message: %v", v)
	}
	if st, _ := v["stacktrace"].(string); !strings.Contains(st, "io.appium.uiautomator2.common.exceptions.") {
		t.Fatalf("stacktrace %q does not name the exception class", st)
	}
	return msg
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// createSession does what the driver does: GET /sessions, GET /status, POST
// /session with {"capabilities":{"firstMatch":[caps],"alwaysMatch":{}}}.
func createSession(t *testing.T, h http.Handler) string {
	t.Helper()
	if r := call(t, h, "GET", "/sessions", nil); r.status != 200 || r.sessionID != "None" {
		t.Fatalf("GET /sessions: %+v", r)
	}
	st := call(t, h, "GET", "/status", nil)
	if st.status != 200 || st.sessionID != "None" {
		t.Fatalf("GET /status: %+v", st)
	}
	if v := st.value.(map[string]any); v["ready"] != true || v["message"] != "UiAutomator2 Server is ready to accept commands" {
		t.Fatalf("status value %v", v)
	}
	caps := map[string]any{"platformName": "Android", "automationName": "UiAutomator2", "deviceUDID": "emulator-5560"}
	r := call(t, h, "POST", "/session", map[string]any{
		"capabilities": map[string]any{"firstMatch": []any{caps}, "alwaysMatch": map[string]any{}},
	})
	if r.status != 200 {
		t.Fatalf("POST /session: %d %v", r.status, r.value)
	}
	id, _ := r.sessionID.(string)
	if !uuidRE.MatchString(id) {
		t.Fatalf("sessionId %q is not a UUID", id)
	}
	v := r.value.(map[string]any)
	if v["sessionId"] != id {
		t.Fatalf("value.sessionId %v, want %s", v["sessionId"], id)
	}
	fm := v["capabilities"].(map[string]any)["firstMatch"].([]any)[0].(map[string]any)
	if fm["deviceUDID"] != "emulator-5560" {
		t.Fatalf("capabilities not echoed: %v", v["capabilities"])
	}
	return id
}

func findEl(t *testing.T, h http.Handler, sid, strategy, selector string) (string, reply) {
	t.Helper()
	r := call(t, h, "POST", "/session/"+sid+"/element", map[string]any{"strategy": strategy, "selector": selector, "context": ""})
	if r.status != 200 {
		return "", r
	}
	v := r.value.(map[string]any)
	id, _ := v[w3cElementKey].(string)
	if id == "" || v[jwpElementKey] != id {
		t.Fatalf("element model %v", v)
	}
	return id, r
}

func TestDriverSessionLifecycle(t *testing.T) {
	dev := newFake()
	h := Handler(dev)
	sid := createSession(t, h)

	// The four GETs the driver makes right after the session is created.
	if r := call(t, h, "GET", "/session/"+sid+"/appium/device/pixel_ratio", nil); r.value != 2.625 || r.sessionID != sid {
		t.Fatalf("pixel_ratio: %+v", r)
	}
	if r := call(t, h, "GET", "/session/"+sid+"/appium/device/system_bars", nil); r.value.(map[string]any)["statusBar"] != float64(63) {
		t.Fatalf("system_bars: %+v", r)
	}
	info := call(t, h, "GET", "/session/"+sid+"/appium/device/info", nil).value.(map[string]any)
	for k, want := range map[string]any{"apiVersion": "34", "platformVersion": "14", "manufacturer": "Google",
		"model": "sdk_gphone64_x86_64", "brand": "google", "realDisplaySize": "1080x2400", "displayDensity": float64(420)} {
		if info[k] != want {
			t.Errorf("device info %s = %v, want %v", k, info[k], want)
		}
	}
	if id, _ := info["androidId"].(string); len(id) != 16 {
		t.Errorf("androidId %q", info["androidId"])
	}
	size := call(t, h, "GET", "/session/"+sid+"/window/current/size", nil).value.(map[string]any)
	if size["width"] != float64(1080) || size["height"] != float64(2400) {
		t.Fatalf("window size %v", size)
	}
	if r := call(t, h, "GET", "/sessions", nil); len(r.value.([]any)) != 1 || r.value.([]any)[0].(map[string]any)["id"] != sid {
		t.Fatalf("GET /sessions with a session: %v", r.value)
	}
	if r := call(t, h, "POST", "/session/"+sid+"/appium/settings", map[string]any{"settings": map[string]any{"waitForIdleTimeout": 0}}); r.status != 200 || r.value != nil {
		t.Fatalf("update settings: %+v", r)
	}
	if r := call(t, h, "GET", "/session/"+sid+"/appium/settings", nil); r.value.(map[string]any)["waitForIdleTimeout"] != float64(0) {
		t.Fatalf("settings: %v", r.value)
	}

	src := call(t, h, "GET", "/session/"+sid+"/source", nil).value.(string)
	if !strings.HasPrefix(src, "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\r\n<hierarchy index=\"0\" class=\"hierarchy\" rotation=\"0\" width=\"1080\" height=\"2400\">") {
		t.Fatalf("source starts %q", src[:min(len(src), 200)])
	}
	if !strings.Contains(src, `text="Cart" content-desc="Open cart" resource-id="com.example.shop:id/cart"`) {
		t.Fatalf("source lacks the cart button: %s", src)
	}

	// Every strategy finds the same cart button, with the same id.
	byID, _ := findEl(t, h, sid, "id", "cart") // bare id: the server prefixes the package
	for _, c := range [][2]string{
		{"id", appPkg + ":id/cart"},
		{"accessibility id", "Open cart"},
		{"xpath", "//android.widget.Button[@text='Cart']"},
		{"xpath", "//*[@content-desc='Open cart']"},
		{"xpath", "//android.widget.Button[contains(@text,'ar')]"},
		{"xpath", "(//android.widget.Button)[1]"},
		{"-android uiautomator", `new UiSelector().resourceId("com.example.shop:id/cart")`},
		{"-android uiautomator", `new UiSelector().className("android.widget.Button").instance(0)`},
		{"class name", "android.widget.Button"},
	} {
		id, r := findEl(t, h, sid, c[0], c[1])
		if id != byID {
			t.Errorf("%s %q: id %q (%v), want %q", c[0], c[1], id, r.value, byID)
		}
	}
	els := call(t, h, "POST", "/session/"+sid+"/elements", map[string]any{"strategy": "class name", "selector": "android.widget.Button"})
	if len(els.value.([]any)) != 2 {
		t.Fatalf("elements: %v", els.value)
	}
	if r := call(t, h, "POST", "/session/"+sid+"/elements", map[string]any{"strategy": "id", "selector": "nope"}); r.status != 200 || len(r.value.([]any)) != 0 {
		t.Fatalf("elements with no match: %+v", r)
	}

	base := "/session/" + sid + "/element/" + byID
	if r := call(t, h, "GET", base+"/text", nil); r.value != "Cart" {
		t.Fatalf("text %v", r.value)
	}
	for name, want := range map[string]any{"resource-id": appPkg + ":id/cart", "resourceId": appPkg + ":id/cart",
		"content-desc": "Open cart", "clickable": "true", "displayed": "true", "bounds": "[100,300][500,420]", "checked": "false"} {
		if r := call(t, h, "GET", base+"/attribute/"+name, nil); r.value != want {
			t.Errorf("attribute %s = %v, want %v", name, r.value, want)
		}
	}
	rect := call(t, h, "GET", base+"/rect", nil).value.(map[string]any)
	if rect["x"] != float64(100) || rect["y"] != float64(300) || rect["width"] != float64(400) || rect["height"] != float64(120) {
		t.Fatalf("rect %v", rect)
	}

	// Click goes to the device and changes the foreground; the old id is stale.
	if r := call(t, h, "POST", base+"/click", map[string]any{"element": byID}); r.status != 200 || r.value != nil {
		t.Fatalf("click: %+v", r)
	}
	if len(dev.clicks) != 1 || dev.clicks[0].ResourceID != appPkg+":id/cart" {
		t.Fatalf("device clicks %v", dev.clicks)
	}
	if _, act, _ := dev.Foreground(); act != cartAct {
		t.Fatalf("foreground %s after click", act)
	}
	wantError(t, call(t, h, "GET", base+"/text", nil), 404, "stale element reference")
	wantError(t, call(t, h, "POST", base+"/click", nil), 404, "stale element reference")
	if src := call(t, h, "GET", "/session/"+sid+"/source", nil).value.(string); !strings.Contains(src, "Your cart is empty") {
		t.Fatalf("source after click: %s", src)
	}

	// Delete, then the session is gone.
	if r := call(t, h, "DELETE", "/session/"+sid, nil); r.status != 200 || r.value != nil || r.sessionID != sid {
		t.Fatalf("DELETE: %+v", r)
	}
	msg := wantError(t, call(t, h, "GET", "/session/"+sid+"/source", nil), 404, "invalid session id")
	if msg != "The session identified by "+sid+" is not known" {
		t.Fatalf("message %q", msg)
	}
	wantError(t, call(t, h, "DELETE", "/session/"+sid, nil), 404, "invalid session id")
	if r := call(t, h, "GET", "/sessions", nil); len(r.value.([]any)) != 0 {
		t.Fatalf("sessions after delete: %v", r.value)
	}
}

func TestLegacyWdHubPrefix(t *testing.T) {
	h := Handler(newFake())
	if r := call(t, h, "GET", "/wd/hub/status", nil); r.status != 200 || r.value.(map[string]any)["ready"] != true {
		t.Fatalf("/wd/hub/status: %+v", r)
	}
	sid := createSession(t, h)
	if r := call(t, h, "GET", "/wd/hub/session/"+sid+"/window/current/size", nil); r.status != 200 {
		t.Fatalf("/wd/hub window size: %+v", r)
	}
}

func TestErrorShapes(t *testing.T) {
	h := Handler(newFake())
	r := call(t, h, "GET", "/nope", nil)
	msg := wantError(t, r, 404, "unknown command")
	if !strings.HasPrefix(msg, "The requested resource could not be found") || r.sessionID != nil {
		t.Fatalf("unknown command: %q sessionId %v", msg, r.sessionID)
	}
	if _, ok := r.raw["sessionId"]; !ok {
		t.Fatal("sessionId key missing (the real server writes null)")
	}
	// Routes the real v10.6.6 server does not have are unknown commands too.
	sid := createSession(t, h)
	for _, p := range []string{"/session/" + sid + "/timeouts", "/session/" + sid + "/window/rect"} {
		wantError(t, call(t, h, "POST", p, map[string]any{}), 404, "unknown command")
	}
	wantError(t, call(t, h, "PUT", "/status", nil), 404, "unknown command")
	wantError(t, call(t, h, "GET", "/session/not-this-one/source", nil), 404, "invalid session id")

	msg = wantError(t, call(t, h, "POST", "/session/"+sid+"/element", map[string]any{"strategy": "id", "selector": "missing"}), 404, "no such element")
	if msg != "An element could not be located on the page using the given search parameters" {
		t.Fatalf("no such element message %q", msg)
	}
	wantError(t, call(t, h, "POST", "/session/"+sid+"/element", map[string]any{"strategy": "css selector", "selector": "x"}), 400, "invalid selector")
	wantError(t, call(t, h, "POST", "/session/"+sid+"/element", map[string]any{"strategy": "xpath", "selector": "//*["}), 400, "invalid selector")
	wantError(t, call(t, h, "POST", "/session/"+sid+"/element", map[string]any{"strategy": "-android uiautomator", "selector": "new UiSelector().bogus(1)"}), 400, "invalid selector")
	wantError(t, call(t, h, "GET", "/session/"+sid+"/element/00000000-0000-4000-8000-000000000000/text", nil), 404, "no such element")
	r = call(t, h, "POST", "/session", map[string]any{"desiredCapabilities": map[string]any{}})
	wantError(t, r, 500, "session not created")
}

func TestClickFailureIsUnknownError(t *testing.T) {
	dev := newFake()
	h := Handler(dev)
	sid := createSession(t, h)
	id, _ := findEl(t, h, sid, "id", "help")
	dev.clickError = errors.New("input injection failed")
	msg := wantError(t, call(t, h, "POST", "/session/"+sid+"/element/"+id+"/click", nil), 500, "unknown error")
	if msg != "input injection failed" {
		t.Fatalf("message %q", msg)
	}
}

func TestFindWithContext(t *testing.T) {
	h := Handler(newFake())
	sid := createSession(t, h)
	content, _ := findEl(t, h, sid, "id", "android:id/content")
	r := call(t, h, "POST", "/session/"+sid+"/elements", map[string]any{"strategy": "class name", "selector": "android.widget.TextView", "context": content})
	if len(r.value.([]any)) != 1 {
		t.Fatalf("context find: %v", r.value)
	}
	r = call(t, h, "POST", "/session/"+sid+"/elements", map[string]any{"strategy": "xpath", "selector": "./android.widget.Button", "context": content})
	if len(r.value.([]any)) != 2 {
		t.Fatalf("context xpath: %v", r.value)
	}
}

func TestScreenshotIsDisplaySizedPNG(t *testing.T) {
	h := Handler(newFake())
	sid := createSession(t, h)
	r := call(t, h, "GET", "/session/"+sid+"/screenshot", nil)
	b, err := base64.StdEncoding.DecodeString(r.value.(string))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 1080 || img.Bounds().Dy() != 2400 {
		t.Fatalf("screenshot %v", img.Bounds())
	}
	gray := func(x, y int) uint32 { r, _, _, _ := img.At(x, y).RGBA(); return r >> 8 }
	if g := gray(300, 360); g != 0xE0 { // inside the clickable cart button
		t.Errorf("clickable fill %#x", g)
	}
	if g := gray(100, 360); g != 0x40 { // its left edge
		t.Errorf("outline %#x", g)
	}
	if g := gray(540, 1500); g != 0xFF { // empty display area
		t.Errorf("background %#x", g)
	}
}

func TestServeStopsAfterDeleteAndOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), ln, newFake()) }()
	base := "http://" + ln.Addr().String()
	post := func(path, body string) map[string]any {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	sid := post("/session", `{"capabilities":{"firstMatch":[{}],"alwaysMatch":{}}}`)["sessionId"].(string)
	req, _ := http.NewRequest("DELETE", base+"/session/"+sid, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("DELETE status %d", resp.StatusCode)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not stop after the session was deleted")
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Serve(ctx, ln2, newFake()) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not stop on cancel")
	}
}

// writeCounter counts the writes on the connections a listener accepts.
type writeCounter struct {
	net.Listener
	mu     sync.Mutex
	writes int
}

func (l *writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *writeCounter
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	c.l.writes++
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// A page source well over net/http's 4 KiB write buffer leaves in one write,
// as Netty writes a FullHttpResponse, and keep-alive serves the next request
// on the same connection.
func TestServeWritesEachResponseOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &writeCounter{Listener: inner}
	dev := newFake()
	root := dev.screens[homeAct]
	for i := range 80 {
		root.Children = append(root.Children, &android.Element{Class: "android.widget.TextView",
			Text: fmt.Sprintf("row %d", i), Bounds: [4]int{0, 500 + i*20, 1080, 520 + i*20}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, dev) }()
	defer func() { cancel(); <-done }()
	base := "http://" + inner.Addr().String()
	resp, err := http.Post(base+"/session", "application/json", strings.NewReader(`{"capabilities":{"firstMatch":[{}],"alwaysMatch":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	for range 2 {
		ln.mu.Lock()
		before := ln.writes
		ln.mu.Unlock()
		resp, err := http.Get(base + "/session/" + created.SessionID + "/source")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ln.mu.Lock()
		n := ln.writes - before
		ln.mu.Unlock()
		if resp.StatusCode != 200 || len(body) < 8<<10 || resp.ContentLength != int64(len(body)) {
			t.Fatalf("status %d, %d bytes, Content-Length %d", resp.StatusCode, len(body), resp.ContentLength)
		}
		if n != 1 {
			t.Fatalf("a %d-byte response took %d writes, want 1", len(body), n)
		}
	}
}
