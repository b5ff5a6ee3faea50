package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	all := qv.Get("all") == "1" || qv.Get("all") == "true"
	if !qv.Has("limit") && !qv.Has("before") && !qv.Has("serial") && !qv.Has("runId") {
		ls, err := a.cfg.Service.Leases(r.Context(), scope(r), all)
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
	q := agent.LeaseQuery{Limit: DefaultLeasesListed, RunID: qv.Get("runId")}
	if l := qv.Get("limit"); qv.Has("limit") {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > agent.MaxLeasePage {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "limit: %q is not a count from 1 to %d", cutID(l), agent.MaxLeasePage))
			return
		}
		q.Limit = n
	}
	if b := qv.Get("before"); qv.Has("before") {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "before: %q is not a fencing token (1, 2, …)", cutID(b)))
			return
		}
		q.Before = n
	}
	if s := qv.Get("serial"); qv.Has("serial") {
		if s == "" || len(s) > 255 {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "serial: must be 1-255 bytes"))
			return
		}
		q.Device = a.cfg.Service.DeviceKey(r.Context(), s)
	}
	if len(q.RunID) > 255 {
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "runId: over 255 bytes"))
		return
	}
	// One more than the page: whether an older page exists, without a count.
	want := q.Limit
	q.Limit++
	if q.Limit > agent.MaxLeasePage {
		q.Limit = agent.MaxLeasePage
	}
	ls, err := a.cfg.Service.LeasePage(r.Context(), scope(r), q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := LeaseList{Leases: ls}
	if len(ls) > want {
		out.Leases = ls[:want]
		out.NextCursor = strconv.FormatInt(ls[want-1].FencingToken, 10)
	}
	if out.Leases == nil {
		out.Leases = []agent.Lease{}
	}
	writeJSON(w, 200, out)
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
	fctx, cancel := context.WithTimeout(r.Context(), service.ScreenCaptureTimeout*service.ScreenFailures)
	f, err := watch.Next(fctx)
	cancel()
	var ae *agent.Error
	switch {
	case err == nil:
	case errors.Is(err, service.ErrScreenLeaseChanged):
		// Handed over between the check and the first frame: decide again.
		writeError(w, http.StatusConflict, agent.Wrap(agent.ErrInvalidRequest, err, "open the screen again"))
		return
	case errors.As(err, &ae) && ae.ID == agent.ErrDeviceNotFound:
		writeError(w, http.StatusNotFound, err)
		return
	default:
		a.fail(w, r, err)
		return
	}
	var rb [18]byte
	rand.Read(rb[:])
	// A random boundary: a frame's bytes cannot end a part early for a
	// reader that scans for it (an <img>'s own multipart parser).
	boundary := "sg" + hex.EncodeToString(rb[:])
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "multipart/x-mixed-replace; boundary="+boundary)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout))
	w.WriteHeader(http.StatusOK)
	part := func(contentType string, body []byte, extra string) error {
		if err := rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "--%s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n", boundary, contentType, len(body), extra); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		if _, err := w.Write([]byte("\r\n")); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}
	for {
		extra := "ScreenGraph-Frame: " + strconv.FormatUint(f.Seq, 10) + "\r\nScreenGraph-Captured-At: " + f.CapturedAt.UTC().Format(time.RFC3339Nano) + "\r\n"
		if err := part("image/png", f.PNG, extra); err != nil {
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
	var last []byte
	switch {
	case revoked:
		// The stream's token was revoked: say so as SSE streams do (the
		// agent error format of the 401 a new request gets), then close.
		last, _ = json.Marshal(ErrorBody(agent.Wrap(agent.ErrPermission, agent.ErrUnauthenticated, "%v", agent.ErrTokenRevoked), ""))
		last = agent.RedactJSON(last)
	case errors.Is(err, service.ErrScreenLeaseChanged):
		last, _ = json.Marshal(map[string]string{"end": "lease_changed", "message": err.Error()})
	default:
		last, _ = json.Marshal(ErrorBody(err, ""))
		last = agent.RedactJSON(last)
	}
	if part("application/json", last, "") == nil {
		rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout))
		fmt.Fprintf(w, "--%s--\r\n", boundary)
		fl.Flush()
	}
}
