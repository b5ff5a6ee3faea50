package httpapi_test

import (
	"bytes"
	"context"
	"image/color"
	"image/png"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// frameSource is a ScreenCapturer: a PNG whose width counts the captures
// (8 + n%64 px), or, with size set, size bytes starting with the PNG
// signature (large frames fill a stalled viewer's socket). "emulator-gone"
// is a device the adb server does not know.
type frameSource struct {
	n    atomic.Int64
	size int
}

func (f *frameSource) CaptureScreen(ctx context.Context, serial string) ([]byte, error) {
	n := f.n.Add(1)
	if serial == "emulator-gone" {
		return nil, &agent.Error{ID: agent.ErrDeviceNotFound, Msg: "device 'emulator-gone' not found"}
	}
	if f.size > 0 {
		b := make([]byte, f.size)
		copy(b, "\x89PNG\r\n\x1a\n")
		return b, nil
	}
	return pngOf(8+int(n%64), color.RGBA{20, 120, 200, 255}), nil
}

// newScreenEnv is the API with tokens (acme, beta, admin) over a service
// whose screens come from src every interval.
func newScreenEnv(t *testing.T, src *frameSource, interval time.Duration, rev ...*agent.RevocationWatch) (*tenantEnv, *service.Service) {
	t.Helper()
	st, dir := openEvidence(t)
	svc, err := service.New(service.Config{Store: st, Leases: st, Prepare: servicetest.Prepare(tenantPrepare), NewID: func() string { return ulid.Make().String() },
		Holder: "serve:test", HostID: "host-1", Artifacts: st, Blobs: dir, Screens: src, ScreenInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	cfg := httpapi.Config{Service: svc, Tokens: st}
	if len(rev) > 0 {
		rev[0].Tokens = st
		cfg.Revocations = rev[0]
	}
	srv := httptest.NewServer(httpapi.New(cfg))
	t.Cleanup(srv.Close)
	return (&tenantEnv{t: t, st: st, blobs: dir, url: srv.URL}).withTokens("acme", "beta", "admin"), svc
}

// screenStream opens GET /v1/devices/{serial}/screen as who.
func (e *tenantEnv) screenStream(ctx context.Context, who, serial string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/devices/"+serial+"/screen", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

type part struct {
	contentType string
	frame       int
	body        []byte
}

// parts reads a multipart/x-mixed-replace body part by part.
func parts(t *testing.T, resp *http.Response) func() (part, error) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/x-mixed-replace" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	return func() (part, error) {
		p, err := mr.NextPart()
		if err != nil {
			return part{}, err
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return part{}, err
		}
		if n, err := strconv.Atoi(p.Header.Get("Content-Length")); err != nil || n != len(b) {
			t.Fatalf("part of %d bytes with Content-Length %q", len(b), p.Header.Get("Content-Length"))
		}
		seq, _ := strconv.Atoi(p.Header.Get("ScreenGraph-Frame"))
		return part{contentType: p.Header.Get("Content-Type"), frame: seq, body: b}, nil
	}
}

// GET /v1/devices/{serial}/screen: acme, whose run holds the device, gets
// PNG frames as multipart/x-mixed-replace, numbered in order; beta is
// refused (403), a bad serial is 400, a device the adb server does not know
// 404; when acme's lease is released (here by the store, as another daemon
// of a fleet would: seen within service.ScreenLeasePoll), acme's stream
// ends with a lease_changed part and the closing boundary, and opening it
// again is refused. When every viewer has gone, no capture loop runs.
func TestScreenStreamTenancy(t *testing.T) {
	src := &frameSource{}
	e, svc := newScreenEnv(t, src, 20*time.Millisecond)
	_, lease := e.runOn("acme", "emulator-5556", nil, true)

	if resp, body := e.get("beta", "/v1/devices/emulator-5556/screen"); resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "permission_error") {
		t.Fatalf("beta: %d %s, want 403 permission_error", resp.StatusCode, body)
	}
	if resp, body := e.get("acme", "/v1/devices/emulator-5554/screen"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("acme on a device it does not hold: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := e.get("admin", "/v1/devices/a%20b/screen"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("serial with a space: %d %s, want 400", resp.StatusCode, body)
	}
	if resp, body := e.get("admin", "/v1/devices/emulator-gone/screen"); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "device_not_found") {
		t.Fatalf("unknown device: %d %s, want 404 device_not_found", resp.StatusCode, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := e.screenStream(ctx, "acme", "emulator-5556")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("acme's stream: %d %v", resp.StatusCode, resp.Header)
	}
	next := parts(t, resp)
	last := 0
	for range 5 {
		p, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(p.body)); err != nil || p.contentType != "image/png" || p.frame <= last {
			t.Fatalf("part %s frame %d after %d: %v", p.contentType, p.frame, last, err)
		}
		last = p.frame
	}
	admin := e.screenStream(ctx, "admin", "emulator-5556")
	defer admin.Body.Close()
	if admin.StatusCode != 200 {
		t.Fatalf("admin's stream: %d", admin.StatusCode)
	}
	if st := svc.ScreenStats(); st.Viewers != 2 || st.Loops != 1 {
		t.Errorf("two viewers of one device: %+v, want one loop", st)
	}

	if err := e.st.ReleaseLease(context.Background(), lease.Serial, lease.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := next()
		if err != nil {
			t.Fatalf("acme's stream ended without a lease_changed part: %v", err)
		}
		if p.contentType == "image/png" {
			continue
		}
		if p.contentType != "application/json" || !strings.Contains(string(p.body), `"end":"lease_changed"`) {
			t.Fatalf("last part %s %s", p.contentType, p.body)
		}
		break
	}
	if _, err := next(); err != io.EOF {
		t.Errorf("after the end part: %v, want the closing boundary", err)
	}
	if resp, body := e.get("acme", "/v1/devices/emulator-5556/screen"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("acme again after its lease ended: %d %s, want 403", resp.StatusCode, body)
	}
	admin.Body.Close()
	cancel()
	waitCond(t, "no capture loop once every viewer left", func() bool {
		st := svc.ScreenStats()
		return st.Loops == 0 && st.Viewers == 0
	})
	n := src.n.Load()
	if st := svc.ScreenStats(); st.Loops != 0 || src.n.Load() != n {
		t.Errorf("captures went on after the last viewer left")
	}
}

// A viewer that stops reading gets frames dropped, never queued: with 1 MiB
// frames its socket fills, its mailbox keeps the newest frame only, and a
// reading viewer of the same device keeps getting frames meanwhile.
func TestScreenStreamSlowViewer(t *testing.T) {
	src := &frameSource{size: 1 << 20}
	e, svc := newScreenEnv(t, src, 10*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stalled := e.screenStream(ctx, "admin", "emulator-5554") // never read
	defer stalled.Body.Close()
	reader := e.screenStream(ctx, "admin", "emulator-5554")
	defer reader.Body.Close()
	next := parts(t, reader)
	const frames = 60 // 60 MiB: more than the stalled socket's buffers
	first := 0
	for i := range frames {
		p, err := next()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = p.frame
		}
	}
	st := svc.ScreenStats()
	t.Logf("after %d frames read by one viewer: %+v", frames, st)
	// The reader dropped at most the captures it did not read; the rest of
	// the drops are the stalled viewer's.
	if st.Dropped <= st.Captured-frames {
		t.Errorf("no frame dropped for the stalled viewer: %+v", st)
	}
	// (The stalled viewer may be gone already: one that takes no bytes for
	// the write timeout, 10 s, is dropped; a slow run under -race gets there.)
	if st.Captured < uint64(first+frames-1) {
		t.Errorf("stats %+v", st)
	}
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polled condition
	}
}

// A revoked token's live screen ends: a last part in the agent error format
// (permission_error, the token revoked), then the closing boundary, as its
// SSE streams do.
func TestScreenStreamEndsOnRevocation(t *testing.T) {
	rev := &agent.RevocationWatch{}
	e, svc := newScreenEnv(t, &frameSource{}, 20*time.Millisecond, rev)
	e.runOn("acme", "emulator-5556", nil, true)
	resp := e.screenStream(context.Background(), "acme", "emulator-5556")
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("acme's stream: %d", resp.StatusCode)
	}
	next := parts(t, resp)
	if p, err := next(); err != nil || p.contentType != "image/png" {
		t.Fatalf("first part: %v %s", err, p.contentType)
	}
	ts, err := e.st.ListTokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range ts {
		if tk.TenantID == "acme" {
			if _, err := e.st.RevokeToken(context.Background(), tk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rev.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for {
		p, err := next()
		if err != nil {
			t.Fatalf("the stream ended without saying the token was revoked: %v", err)
		}
		if p.contentType == "image/png" {
			continue
		}
		if p.contentType != "application/json" || !strings.Contains(string(p.body), "permission_error") || !strings.Contains(string(p.body), "revoked") {
			t.Fatalf("last part %s %s", p.contentType, p.body)
		}
		break
	}
	if _, err := next(); err != io.EOF {
		t.Errorf("after the end part: %v, want the closing boundary", err)
	}
	waitCond(t, "no viewer once the token is revoked", func() bool { return svc.ScreenStats().Viewers == 0 })
}
