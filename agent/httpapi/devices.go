package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// deviceRoutes are the routes of devices and leases beyond GET /v1/devices
// (issue 15: the inspector's devices and leases pages).
var deviceRoutes = []Route{{"GET", "/v1/devices/{serial}/screenshot"}, {"GET", "/v1/devices/{serial}/screen"}}

// RunLease is the lease block of GET /v1/runs/{id}: the run's newest
// device lease. HeartbeatAgeMillis is how long ago its holder last renewed
// it (milliseconds, at response time; only while the lease is active): a
// holder that stopped renewing shows a growing age until ExpiresAt.
type RunLease struct {
	agent.Lease
	Active             bool   `json:"active"`
	HeartbeatAgeMillis *int64 `json:"heartbeatAgeMillis,omitempty"`
}

func runLease(l agent.Lease, now time.Time) *RunLease {
	rl := &RunLease{Lease: l, Active: l.ReleasedAt == nil}
	if rl.Active {
		age := max(now.Sub(l.RenewedAt).Milliseconds(), 0)
		rl.HeartbeatAgeMillis = &age
	}
	return rl
}

// DefaultLeasesListed is GET /v1/leases' page when ?limit is absent and a
// page is asked for (?before=).
const DefaultLeasesListed = 50

// LeaseList is GET /v1/leases. Paged (?limit= or ?before=): newest first,
// NextCursor (the ?before= of the next page) set when older leases follow.
type LeaseList struct {
	Leases     []agent.Lease `json:"leases"`
	NextCursor string        `json:"nextCursor,omitempty"`
}

// leases answers GET /v1/leases: the active leases; with all=1 the whole
// history in acquisition order (the CLI's view, kept); with ?limit= or
// ?before= one page of the history, newest first, optionally of one
// ?serial= of this daemon's host or one ?runId=.
func (a *api) leases(w http.ResponseWriter, r *http.Request) {
	qv := r.URL.Query()
	if !qv.Has("limit") && !qv.Has("before") && !qv.Has("serial") && !qv.Has("runId") {
		ls, err := a.cfg.Service.Leases(r.Context(), scope(r), qv.Get("all") == "1" || qv.Get("all") == "true")
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if ls == nil {
			ls = []agent.Lease{}
		}
		writeJSON(w, 200, LeaseList{Leases: ls})
		return
	}
	q, err := a.leaseQuery(r.Context(), qv)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out, err := a.leasePage(r.Context(), scope(r), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, 200, out)
}

// leaseQuery reads a page's ?limit= (DefaultLeasesListed when absent),
// ?before=, ?serial= and ?runId=; an invalid_request_error for the first
// that is out of range.
func (a *api) leaseQuery(ctx context.Context, qv url.Values) (agent.LeaseQuery, error) {
	q := agent.LeaseQuery{Limit: DefaultLeasesListed, RunID: qv.Get("runId")}
	if l := qv.Get("limit"); qv.Has("limit") {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > agent.MaxLeasePage {
			return q, agent.Errorf(agent.ErrInvalidRequest, "limit: %q is not a count from 1 to %d", cutID(l), agent.MaxLeasePage)
		}
		q.Limit = n
	}
	if b := qv.Get("before"); qv.Has("before") {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			return q, agent.Errorf(agent.ErrInvalidRequest, "before: %q is not a fencing token (1, 2, …)", cutID(b))
		}
		q.Before = n
	}
	if s := qv.Get("serial"); qv.Has("serial") {
		if s == "" || len(s) > 255 {
			return q, agent.Errorf(agent.ErrInvalidRequest, "serial: must be 1-255 bytes")
		}
		q.Device = a.cfg.Service.DeviceKey(ctx, s)
	}
	if len(q.RunID) > 255 {
		return q, agent.Errorf(agent.ErrInvalidRequest, "runId: over 255 bytes")
	}
	return q, nil
}

// leasePage reads the page q asks for, with NextCursor set when older
// leases follow.
func (a *api) leasePage(ctx context.Context, sc agent.Scope, q agent.LeaseQuery) (LeaseList, error) {
	// One more than the page: whether an older page exists, without a count.
	want := q.Limit
	q.Limit = min(q.Limit+1, agent.MaxLeasePage)
	ls, err := a.cfg.Service.LeasePage(ctx, sc, q)
	if err != nil {
		return LeaseList{}, err
	}
	out := LeaseList{Leases: ls}
	if len(ls) > want {
		out.Leases = ls[:want]
		out.NextCursor = strconv.FormatInt(ls[want-1].FencingToken, 10)
	}
	if out.Leases == nil {
		out.Leases = []agent.Lease{}
	}
	return out, nil
}

// screenshot answers GET /v1/devices/{serial}/screenshot: the PNG of the
// newest screenshot kept by a run the caller sees on this daemon's device
// (service.LatestScreenshot), with the run and artifact it came from in
// ScreenGraph-Run-Id and ScreenGraph-Artifact-Id. 404 when none.
func (a *api) screenshot(w http.ResponseWriter, r *http.Request) {
	art, rc, err := a.cfg.Service.LatestScreenshot(r.Context(), scope(r), r.PathValue("serial"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("ScreenGraph-Run-Id", art.RunID)
	w.Header().Set("ScreenGraph-Artifact-Id", art.ArtifactID)
	// The newest screenshot changes with the next run: revalidate (the
	// ETag is the content's digest), and keep it out of shared caches.
	a.serveArtifact(w, r, art, rc, "private, no-cache")
}

// screen answers GET /v1/devices/{serial}/screen: the device's screen, live
// (service.WatchScreen), as multipart/x-mixed-replace: one image/png part
// per frame with its Content-Length (a reader need not scan for the
// boundary), ScreenGraph-Frame (the device loop's frame number: a gap is
// frames this viewer lost to newer ones) and ScreenGraph-Captured-At
// (RFC 3339). The first frame is waited for before the 200, so a capture
// that fails answers in the agent error format with its status. The stream
// ends with a last application/json part: {"end": "lease_changed"} when the
// device's lease changed hands, the agent error format when the capture
// failed; then the closing boundary. Each part is written under
// Limits.EventWriteTimeout: a viewer that stops reading is dropped.
func (a *api) screen(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		a.fail(w, r, errors.New("streaming unsupported"))
		return
	}
	watch, err := a.cfg.Service.WatchScreen(r.Context(), scope(r), r.PathValue("serial"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer watch.Close()
	f, ok := a.firstFrame(w, r, watch)
	if !ok {
		return
	}
	mw := a.startMultipart(w, fl)
	for {
		extra := "ScreenGraph-Frame: " + strconv.FormatUint(f.Seq, 10) + "\r\nScreenGraph-Captured-At: " + f.CapturedAt.UTC().Format(time.RFC3339Nano) + "\r\n"
		if err := mw.part("image/png", f.PNG, extra); err != nil {
			return // the viewer is gone or stopped reading
		}
		if f, err = watch.Next(r.Context()); err != nil {
			break
		}
	}
	revoked := errors.Is(context.Cause(r.Context()), agent.ErrTokenRevoked)
	if r.Context().Err() != nil && !revoked {
		return // the viewer left
	}
	if mw.part("application/json", screenEnd(err, revoked), "") == nil {
		mw.close()
	}
}

// firstFrame waits for the stream's first frame (up to ScreenFailures
// capture timeouts), before the 200. When it fails it answers in the
// agent error format (409 when the lease changed hands meanwhile, 404 when
// the device is gone) and ok is false.
func (a *api) firstFrame(w http.ResponseWriter, r *http.Request, watch *service.ScreenWatch) (f service.ScreenFrame, ok bool) {
	fctx, cancel := context.WithTimeout(r.Context(), service.ScreenCaptureTimeout*service.ScreenFailures)
	f, err := watch.Next(fctx)
	cancel()
	var ae *agent.Error
	switch {
	case err == nil:
		return f, true
	case errors.Is(err, service.ErrScreenLeaseChanged):
		// Handed over between the check and the first frame: decide again.
		writeError(w, http.StatusConflict, agent.Wrap(agent.ErrInvalidRequest, err, "open the screen again"))
	case errors.As(err, &ae) && ae.ID == agent.ErrDeviceNotFound:
		writeError(w, http.StatusNotFound, err)
	default:
		a.fail(w, r, err)
	}
	return f, false
}

// screenEnd is the stream's last part (application/json): the agent error
// format of the 401 a new request gets when the stream's token was revoked
// (as SSE streams say it), {"end": "lease_changed"} when the lease changed
// hands, else the capture's error (err: what ended the frames).
func screenEnd(err error, revoked bool) []byte {
	var last []byte
	switch {
	case revoked:
		last, _ = json.Marshal(ErrorBody(agent.Wrap(agent.ErrPermission, agent.ErrUnauthenticated, "%v", agent.ErrTokenRevoked), ""))
		last = agent.RedactJSON(last)
	case errors.Is(err, service.ErrScreenLeaseChanged):
		last, _ = json.Marshal(map[string]string{"end": "lease_changed", "message": err.Error()})
	default:
		last, _ = json.Marshal(ErrorBody(err, ""))
		last = agent.RedactJSON(last)
	}
	return last
}

// multipartStream writes a multipart/x-mixed-replace response, each write
// under a deadline of Limits.EventWriteTimeout.
type multipartStream struct {
	w        http.ResponseWriter
	fl       http.Flusher
	rc       *http.ResponseController
	boundary string
	timeout  time.Duration
}

// startMultipart writes the 200 and the headers of a multipart stream.
func (a *api) startMultipart(w http.ResponseWriter, fl http.Flusher) *multipartStream {
	var rb [18]byte
	rand.Read(rb[:])
	// A random boundary: a frame's bytes cannot end a part early for a
	// reader that scans for it (an <img>'s own multipart parser).
	mw := &multipartStream{w: w, fl: fl, rc: http.NewResponseController(w),
		boundary: "sg" + hex.EncodeToString(rb[:]), timeout: a.cfg.Limits.EventWriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "multipart/x-mixed-replace; boundary="+mw.boundary)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	mw.rc.SetWriteDeadline(time.Now().Add(mw.timeout))
	w.WriteHeader(http.StatusOK)
	return mw
}

// part writes and flushes one part: its Content-Type, Content-Length, the
// extra header lines (each ending in CRLF) and body.
func (mw *multipartStream) part(contentType string, body []byte, extra string) error {
	if err := mw.rc.SetWriteDeadline(time.Now().Add(mw.timeout)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(mw.w, "--%s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n", mw.boundary, contentType, len(body), extra); err != nil {
		return err
	}
	if _, err := mw.w.Write(body); err != nil {
		return err
	}
	if _, err := mw.w.Write([]byte("\r\n")); err != nil {
		return err
	}
	mw.fl.Flush()
	return nil
}

// close writes the closing boundary.
func (mw *multipartStream) close() {
	mw.rc.SetWriteDeadline(time.Now().Add(mw.timeout))
	fmt.Fprintf(mw.w, "--%s--\r\n", mw.boundary)
	mw.fl.Flush()
}
