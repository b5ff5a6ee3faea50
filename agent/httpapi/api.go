// Package httpapi is the daemon's HTTP API over the run service: JSON in and
// out, Server-Sent Events for following a run, failures in the agent error
// format (spec/agent-error-format.md) with a fitting status, every response
// passed through agent.RedactJSON. The routes are listed once (Routes) and
// described in openapi.json, served at /v1/openapi.json.
package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi/ui"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the API.
func OpenAPI() []byte { return openAPI }

// MaxRequestBytes bounds a request body (64 KiB, the largest run request
// nodes.NewSetupRun accepts): a larger body is refused before it is read
// whole.
const MaxRequestBytes = 64 << 10

// Config wires the API.
type Config struct {
	Service *service.Service
	// Graph is the graph runs execute (for error reports and node names).
	Graph *agent.Graph
	// Ready lists the dependencies /readyz checks (e.g. store, adb, nats).
	Ready map[string]func(ctx context.Context) error
	// ClockSkew, when set, measures this daemon's clock against the
	// store's (service.ClockSkew; positive: the daemon is ahead), which
	// /readyz reports with its details.
	ClockSkew func(ctx context.Context) (time.Duration, error)
	// Gatherer serves /metrics; nil serves no metrics.
	Gatherer prometheus.Gatherer
	// Registerer, when set, takes the API's own metrics (metrics.go:
	// requests by route, open event streams).
	Registerer prometheus.Registerer
	// Logf reports handler failures; may be nil.
	Logf func(format string, args ...any)
	// Limits bound connections and event streams (zero fields:
	// DefaultLimits); serve the handler with NewServer(h, Limits).
	Limits Limits
	// Tokens, when set, turns on Bearer authentication and tenant scoping
	// once the store holds a token (auth.go); nil: no authentication.
	Tokens agent.Tokens
	// Revocations, when set, ends a token's requests (SSE streams
	// included) once the token is revoked (auth.go); nil: a request
	// authenticated at its start runs to its end.
	Revocations *agent.RevocationWatch
	// AllowedHosts are the Host names accepted besides the address a
	// connection arrived on (serve --allowed-host; guard.go): "NAME" (any
	// port) or "NAME:PORT". Validate each with CheckAllowedHost.
	AllowedHosts []string
	// TokenAdmin, when set, serves the admin token routes (tokens.go:
	// POST/GET /v1/tokens, DELETE /v1/tokens/{id}); nil: they answer 404.
	TokenAdmin *TokenAdmin
}

// Route is one route of the API.
type Route struct {
	Method, Pattern string
}

// Routes lists every route, as registered and as openapi.json describes them.
func Routes() []Route {
	return append([]Route{
		{"POST", "/v1/runs"}, {"GET", "/v1/runs"}, {"GET", "/v1/runs/{id}"},
		{"GET", "/v1/runs/{id}/events"}, {"GET", "/v1/runs/{id}/steps/{n}"},
		{"POST", "/v1/runs/{id}/cancel"}, {"POST", "/v1/runs/{id}/pause"}, {"POST", "/v1/runs/{id}/resume"},
		{"POST", "/v1/runs/{id}/policy"},
		{"GET", "/v1/devices"}, {"GET", "/v1/leases"}, {"GET", "/v1/outbox/parked"},
		{"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/metrics"}, {"GET", "/v1/openapi.json"},
	}, slices.Concat(artifactRoutes, deviceRoutes, tokenRoutes)...)
}

type api struct {
	cfg  Config
	auth *auth
	// followers counts the open event streams per tenant.
	followersMu sync.Mutex
	followers   map[string]int
	metrics     *apiMetrics
}

// New returns the API's handler.
func New(cfg Config) http.Handler {
	cfg.Limits = cfg.Limits.withDefaults()
	a := &api{cfg: cfg, auth: &auth{tokens: cfg.Tokens}, followers: map[string]int{}}
	a.registerMetrics(cfg.Registerer)
	mux := http.NewServeMux()
	h := map[string]http.HandlerFunc{
		"POST /v1/runs":                       a.submit,
		"GET /v1/runs":                        a.list,
		"GET /v1/runs/{id}":                   a.get,
		"GET /v1/runs/{id}/events":            a.events,
		"GET /v1/runs/{id}/steps/{n}":         a.step,
		"POST /v1/runs/{id}/cancel":           a.control(agent.KindCancelRequested),
		"POST /v1/runs/{id}/pause":            a.control(agent.KindPauseRequested),
		"POST /v1/runs/{id}/resume":           a.control(agent.KindResumeRequested),
		"POST /v1/runs/{id}/policy":           a.control(agent.KindPolicySwitchRequested),
		"GET /v1/devices":                     a.devices,
		"GET /v1/leases":                      a.leases,
		"GET /v1/devices/{serial}/screenshot": a.screenshot,
		"GET /v1/devices/{serial}/screen":     a.screen,
		"GET /v1/outbox/parked":               a.parked,
		"GET /healthz":                        func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]any{"status": "ok"}) },
		"GET /readyz":                         a.ready,
		"GET /v1/openapi.json": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(openAPI)
		},
	}
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", a.counted("GET /metrics", a.guard("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP)))
	} else {
		h["GET /metrics"] = func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }
	}
	for p, f := range a.artifactHandlers() {
		h[p] = f
	}
	for p, f := range a.tokenHandlers() {
		h[p] = f
	}
	for p, f := range h {
		mux.HandleFunc(p, a.counted(p, a.guard(p, f)))
	}
	// The inspector (ui): public assets, no token needed to load the page;
	// its data calls go to the routes above with the tab's bearer.
	mux.Handle("GET /ui/", a.counted("GET /ui/", ui.Handler().ServeHTTP))
	toUI := func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) }
	mux.HandleFunc("GET /{$}", toUI)
	mux.HandleFunc("GET /ui", toUI)
	// Unknown routes and wrong methods answer in the agent error format too:
	// a path some route has, asked with another method, is 405 with Allow.
	paths := http.NewServeMux()
	allow := map[string][]string{}
	for _, rt := range Routes() {
		if allow[rt.Pattern] == nil {
			paths.HandleFunc(rt.Pattern, http.NotFound)
		}
		allow[rt.Pattern] = append(allow[rt.Pattern], rt.Method)
	}
	mux.HandleFunc("/", a.counted("unmatched", func(w http.ResponseWriter, r *http.Request) {
		if _, p := paths.Handler(r); p != "" {
			w.Header().Set("Allow", strings.Join(allow[p], ", "))
			writeError(w, http.StatusMethodNotAllowed, agent.Errorf(agent.ErrInvalidRequest, "%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow[p], ", ")))
			return
		}
		writeError(w, http.StatusNotFound, agent.Errorf(agent.ErrInvalidRequest, "no route %s %s", r.Method, r.URL.Path))
	}))
	return browserGuard(mux, cfg.AllowedHosts)
}

// ErrorBody is the agent error format for a failed API call.
func ErrorBody(err error, node string) agent.ErrorReport {
	if errors.Is(err, agent.ErrNotFound) {
		// Unknown run (or step, token …) wherever it is answered (HTTP, the
		// NATS control reply, the CLI): a request error, not internal_error,
		// and the cause already ends in "not found" ("run X: not found"):
		// said once, not "not found: run X: not found".
		err = &agent.Error{ID: agent.ErrInvalidRequest, Msg: notFoundMessage(err)}
	} else if errors.Is(err, agent.ErrRunTerminal) {
		// Control of a run that already ended (409): the request does not
		// apply to the run's state; nothing failed inside the daemon.
		err = &agent.Error{ID: agent.ErrInvalidRequest, Err: err}
	}
	e := agent.Classify(err)
	msg := agent.RedactString(err.Error())
	cat := agent.CategoryExecutionFailure
	switch e.ID {
	case agent.ErrInvalidRequest:
		cat = agent.CategoryAPIValidation
	case agent.ErrPermission:
		cat = agent.CategoryAuth // 401 and 403: the token must change
	}
	ctx := map[string]any{"error_id": string(e.ID), "retryable": e.Retryable}
	if e.Code != "" {
		ctx["error_code"] = e.Code
	}
	return agent.ErrorReport{
		Success: false, Error: msg,
		Errors:     []agent.ErrorEntry{{Category: cat, NodeID: node, Message: msg, Fixable: cat == agent.CategoryAPIValidation || e.Retryable, Context: ctx}},
		Execution:  agent.Execution{Steps: []agent.ExecutionStep{}},
		Checkpoint: agent.Checkpoint{CompletedNodes: []string{}},
	}
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var ae *agent.Error
	switch {
	case agent.IsStoreUnavailable(err):
		// First: whatever wrapped it (a policy lookup of a request, a
		// token check), the store could not answer.
		return http.StatusServiceUnavailable
	case errors.Is(err, service.ErrQueueFull), errors.Is(err, service.ErrScreenViewers):
		return http.StatusTooManyRequests
	case errors.As(err, &ae) && ae.ID == agent.ErrInvalidRequest:
		// Before ErrNotFound: an unknown policy version in a request is a bad
		// request, not a missing resource.
		return http.StatusBadRequest
	case errors.Is(err, agent.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, agent.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, service.ErrRunTerminal):
		return http.StatusConflict
	case errors.Is(err, agent.ErrControlBacklog):
		return http.StatusTooManyRequests
	case errors.As(err, &ae) && ae.ID == agent.ErrResourceExhausted:
		// The daemon's host is out of disk or descriptors: come back later.
		return http.StatusServiceUnavailable
	case errors.Is(err, service.ErrStopping):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// RetryAfterExhausted is the Retry-After (seconds) of a 503 for
// resource_exhausted: a full disk or a descriptor shortage rarely passes
// within a second, and clients retrying at once would add to it.
const RetryAfterExhausted = 5

func writeError(w http.ResponseWriter, status int, err error) {
	var ae *agent.Error
	if status == http.StatusServiceUnavailable && errors.As(err, &ae) && ae.ID == agent.ErrResourceExhausted {
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterExhausted))
	}
	node := ""
	var ne interface{ NodeName() string }
	if errors.As(err, &ne) {
		node = ne.NodeName()
	}
	writeJSON(w, status, ErrorBody(err, node))
}

// notFoundMessage is err's message saying "not found" once, at its end.
func notFoundMessage(err error) string {
	msg := err.Error()
	if strings.HasSuffix(msg, agent.ErrNotFound.Error()) {
		return msg
	}
	return msg + ": " + agent.ErrNotFound.Error()
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	if st >= 500 && a.cfg.Logf != nil {
		a.cfg.Logf("%s %s: %v", r.Method, r.URL.Path, agent.RedactString(err.Error()))
	}
	if agent.IsStoreUnavailable(err) {
		// The log keeps the detail; the answer names no address, user or
		// database but to an admin (StoreUnavailable).
		w.Header().Set("Retry-After", "5")
		err = StoreUnavailable(err, seesDetails(r))
	}
	writeError(w, st, err)
}

// StoreUnavailable is what a caller is told of err, a failure to reach the
// store (agent.IsStoreUnavailable): an *agent.Error store_unavailable that
// wraps err when details (an admin caller), and names nothing of the store
// otherwise (pgconn's errors name its address, user and database).
func StoreUnavailable(err error, details bool) error {
	if details {
		return agent.Wrap(agent.ErrStoreUnavailable, err, "the run store is unavailable")
	}
	return agent.Errorf(agent.ErrStoreUnavailable, "the run store is unavailable; retry later")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"success":false,"error":"internal_error: encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(agent.RedactJSON(b))
	w.Write([]byte("\n"))
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "reading the request body")
	}
	if len(b) > MaxRequestBytes {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "$: request body over %d bytes", MaxRequestBytes)
	}
	return b, nil
}

// SubmitResponse is the body of 202 to POST /v1/runs.
type SubmitResponse struct {
	RunID  string          `json:"runId"`
	Status agent.RunStatus `json:"status"`
	Serial string          `json:"serial"`
}

func (a *api) submit(w http.ResponseWriter, r *http.Request) {
	b, err := readBody(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := refuseToken(b); err != nil {
		a.fail(w, r, err)
		return
	}
	run, err := a.cfg.Service.Submit(r.Context(), scope(r), b)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/runs/"+run.RunID)
	writeJSON(w, http.StatusAccepted, SubmitResponse{RunID: run.RunID, Status: run.Status, Serial: run.Serial})
}

// RunSummary is one run in GET /v1/runs.
type RunSummary struct {
	RunID         string          `json:"runId"`
	TenantID      string          `json:"tenantId"`
	ProjectID     string          `json:"projectId,omitempty"`
	Status        agent.RunStatus `json:"status"`
	Serial        string          `json:"serial"`
	Graph         string          `json:"graph"`
	PolicyVersion int             `json:"policyVersion"`
	CreatedAt     time.Time       `json:"createdAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
}

func summary(r agent.Run) RunSummary {
	return RunSummary{r.RunID, r.TenantID, r.ProjectID, r.Status, r.Serial, r.Graph, r.PolicyVersion, r.CreatedAt, r.UpdatedAt}
}

// runsQuery reads GET /v1/runs' filters (serial, status, tenant) and the
// scope they narrow: tenant=ID narrows an admin's scope to that tenant; a
// tenant token may name only its own tenant (403 otherwise).
func runsQuery(r *http.Request) (agent.Scope, agent.RunFilter, error) {
	sc := scope(r)
	f := agent.RunFilter{Serial: r.URL.Query().Get("serial")}
	if len(f.Serial) > 255 {
		return sc, f, agent.Errorf(agent.ErrInvalidRequest, "serial: over 255 bytes")
	}
	if s := r.URL.Query().Get("status"); s != "" {
		for _, st := range strings.Split(s, ",") {
			rs := agent.RunStatus(strings.ToUpper(strings.TrimSpace(st)))
			if !slices.Contains(agent.RunStatuses, rs) {
				return sc, f, agent.Errorf(agent.ErrInvalidRequest, "status: %q is not a run status (%s)", cut(st, 40), joinStatuses())
			}
			f.Status = append(f.Status, rs)
		}
	}
	if t := r.URL.Query().Get("tenant"); t != "" {
		ts, err := agent.Tenant(t)
		if err != nil {
			return sc, f, agent.InvalidTenantID("tenant", t)
		}
		if !sc.IsAdmin() && sc.TenantID() != t {
			return sc, f, agent.Wrap(agent.ErrPermission, agent.ErrForbidden, "tenant: a tenant token lists only its own tenant's runs")
		}
		sc = ts
	}
	return sc, f, nil
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	sc, f, err := runsQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	switch follow := r.URL.Query().Get("follow"); follow {
	case "", "0", "false":
	case "1", "true":
		a.followRuns(w, r, sc, f)
		return
	default:
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "follow: %q is not 0, 1, true or false", cut(follow, 40)))
		return
	}
	limit := DefaultRunsListed
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxRunsListed {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "limit: %q is not a count from 1 to %d", l, MaxRunsListed))
			return
		}
		limit = n
	}
	if c := r.URL.Query().Get("cursor"); c != "" {
		k, err := agent.ParseRunCursor("cursor", c)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		f.After = &k
	}
	// One more than the page: whether a next page exists, without a count.
	f.Limit = limit + 1
	runs, err := a.cfg.Service.List(r.Context(), sc, f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	resp := RunList{Runs: make([]RunSummary, 0, min(len(runs), limit))}
	if len(runs) > limit {
		runs = runs[:limit]
		resp.NextCursor = runs[limit-1].Key().Cursor()
	}
	for _, run := range runs {
		resp.Runs = append(resp.Runs, summary(run))
	}
	writeJSON(w, 200, resp)
}

// followRuns is GET /v1/runs?follow=1: Server-Sent Events "run", each a
// RunSummary of a run the caller sees (same filters and scope as the list)
// when it appears or changes; the newest service.FollowRunsWindow runs are
// watched. It counts as one of the tenant's event streams.
func (a *api) followRuns(w http.ResponseWriter, r *http.Request, sc agent.Scope, f agent.RunFilter) {
	a.sse(w, r, func(send func(id, kind string, v any) error) error {
		return a.cfg.Service.FollowRuns(r.Context(), sc, f, func(run agent.Run) error {
			return send("", "run", summary(run))
		})
	})
}

// sse answers r with a Server-Sent Events stream that body fills through
// send (id, event name, JSON data), counted against the caller's tenant's
// FollowersPerTenant, each event under its own write deadline. An "end"
// event closes a stream body ended without error.
func (a *api) sse(w http.ResponseWriter, r *http.Request, body func(send func(id, kind string, v any) error) error) {
	fl, ok := w.(http.Flusher)
	if !ok {
		a.fail(w, r, errors.New("streaming unsupported"))
		return
	}
	tenant := scope(r).TenantID() // "" for admin
	if !a.addFollower(tenant) {
		writeError(w, http.StatusTooManyRequests, agent.Errorf(agent.ErrInvalidRequest,
			"too many open event streams for this tenant (at most %d): close one or read events without follow", a.cfg.Limits.FollowersPerTenant))
		return
	}
	defer a.removeFollower(tenant)
	// The stream outlives the server's WriteTimeout: a write deadline per
	// event. (ReadTimeout ends once the request is read: net/http clears the
	// read deadline when it starts its background read.)
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(200)
	fl.Flush()
	err := body(func(id, kind string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout)); err != nil {
			return err
		}
		if id != "" {
			id = "id: " + id + "\n"
		}
		if _, err := fmt.Fprintf(w, "%sevent: %s\ndata: %s\n\n", id, kind, agent.RedactJSON(b)); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	if err == nil {
		rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout))
		fmt.Fprint(w, "event: end\ndata: {}\n\n")
		fl.Flush()
		return
	}
	if errors.Is(context.Cause(r.Context()), agent.ErrTokenRevoked) {
		// The stream's token was revoked: say so (the agent error format of
		// the 401 a new request gets), then close.
		b, _ := json.Marshal(ErrorBody(agent.Wrap(agent.ErrPermission, agent.ErrUnauthenticated, "%v", agent.ErrTokenRevoked), ""))
		rc.SetWriteDeadline(time.Now().Add(a.cfg.Limits.EventWriteTimeout))
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", agent.RedactJSON(b))
		fl.Flush()
	}
}

// DefaultRunsListed and MaxRunsListed are GET /v1/runs' default and largest
// page (?limit=).
const (
	DefaultRunsListed = 100
	MaxRunsListed     = 1000
)

// RunList is GET /v1/runs: a page of runs, newest first. NextCursor, set
// when more runs follow, continues the list (?cursor=); runs submitted
// meanwhile are newer and never shift the later pages.
type RunList struct {
	Runs       []RunSummary `json:"runs"`
	NextCursor string       `json:"nextCursor,omitempty"`
}

// NodeTiming is one node attempt of a run, from its events.
type NodeTiming struct {
	Node           string  `json:"node"`
	Attempt        int     `json:"attempt"`
	StepOrdinal    int     `json:"stepOrdinal"`
	Outcome        string  `json:"outcome"`
	ErrorID        *string `json:"errorId,omitempty"`
	PolicyVersion  int     `json:"policyVersion,omitempty"`
	StartedAt      string  `json:"startedAt"`
	FinishedAt     string  `json:"finishedAt"`
	DurationMillis int64   `json:"durationMillis"`
}

// RunDetail is GET /v1/runs/{id}.
type RunDetail struct {
	RunSummary
	Input      json.RawMessage            `json:"input"`
	Outputs    map[string]json.RawMessage `json:"outputs"`
	Nodes      []NodeTiming               `json:"nodes"`
	StartedAt  string                     `json:"startedAt,omitempty"`
	EndedAt    string                     `json:"endedAt,omitempty"`
	TookMillis int64                      `json:"tookMillis,omitempty"`
	Events     int                        `json:"events"`
	Steps      int                        `json:"steps"`
	// Error is the agent error format of a FAILED run.
	Error *agent.ErrorReport `json:"error,omitempty"`
	// Lease is the run's newest device lease (the one it holds, or the
	// last it held); absent when it never held one.
	Lease *RunLease `json:"lease,omitempty"`
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	d, err := Detail(r.Context(), a.cfg.Service, scope(r), a.cfg.Graph, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, 200, d)
}

// RunSource is what Detail reads a run from: the run service
// (*service.Service), or an adapter over a local store for the CLI without
// a daemon. Errors as the service's.
type RunSource interface {
	Get(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error)
	Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error)
	LatestState(ctx context.Context, sc agent.Scope, runID string) (agent.RunState, error)
	RunLease(ctx context.Context, sc agent.Scope, runID string) (agent.Lease, bool, error)
}

// Detail builds a run's detail view from its row, events and last snapshot,
// as sc sees it (agent.ErrNotFound for a run sc does not see).
func Detail(ctx context.Context, svc RunSource, sc agent.Scope, g *agent.Graph, runID string) (RunDetail, error) {
	run, err := svc.Get(ctx, sc, runID)
	if err != nil {
		return RunDetail{}, err
	}
	d := RunDetail{RunSummary: summary(run), Input: run.Input, Outputs: map[string]json.RawMessage{}, Nodes: []NodeTiming{}}
	evs, err := svc.Events(ctx, sc, runID, 0)
	if err != nil {
		return RunDetail{}, err
	}
	d.readEvents(evs)
	if st, err := svc.LatestState(ctx, sc, runID); err == nil {
		d.readState(st, run.Status, g)
	}
	l, ok, err := svc.RunLease(ctx, sc, runID)
	if err != nil {
		return RunDetail{}, err
	}
	if ok {
		d.Lease = runLease(l, time.Now())
	}
	return d, nil
}

// detailEvent is the part of an event's payload the detail view reads.
type detailEvent struct {
	NodeName    string  `json:"nodeName"`
	StepOrdinal int     `json:"stepOrdinal"`
	Attempt     int     `json:"attempt"`
	Outcome     string  `json:"nodeExecutionOutcomeStatus"`
	ErrorID     *string `json:"errorId"`
	Duration    int64   `json:"durationMillis"`
	Output      struct {
		PolicyVersion int `json:"policyVersion"`
	} `json:"output"`
	PolicyVersion int `json:"policyVersion"`
}

// readEvents fills d's counts, times, policy version and node timings from
// the run's events, oldest first.
func (d *RunDetail) readEvents(evs []agent.Event) {
	d.Events = len(evs)
	started := map[string]string{} // node -> its last node.started's time
	for _, e := range evs {
		var p detailEvent
		json.Unmarshal(e.Payload, &p)
		if p.PolicyVersion > 0 {
			// The version in effect: a policy switch taken at a boundary
			// changes it (run.resumed, run.finished say so even when no
			// node ran after it); the row keeps the submitted one.
			d.PolicyVersion = p.PolicyVersion
		}
		switch e.Kind {
		case agent.KindRunStarted:
			d.StartedAt = e.TS
		case agent.KindRunFinished, agent.KindRunFailed, agent.KindRunCanceled:
			d.EndedAt = e.TS
		case agent.KindNodeStarted:
			started[p.NodeName] = e.TS
		case agent.KindNodeFinished:
			d.Steps++
			d.Nodes = append(d.Nodes, NodeTiming{Node: p.NodeName, Attempt: p.Attempt, StepOrdinal: p.StepOrdinal, Outcome: p.Outcome,
				ErrorID: p.ErrorID, PolicyVersion: p.Output.PolicyVersion, StartedAt: started[p.NodeName], FinishedAt: e.TS, DurationMillis: p.Duration})
		}
	}
	if d.StartedAt != "" && d.EndedAt != "" {
		s, _ := time.Parse(agent.TimestampLayout, d.StartedAt)
		e, _ := time.Parse(agent.TimestampLayout, d.EndedAt)
		d.TookMillis = e.Sub(s).Milliseconds()
	}
}

// readState fills d's outputs from the run's last snapshot, and for a
// FAILED run (status) its error report when g is known.
func (d *RunDetail) readState(st agent.RunState, status agent.RunStatus, g *agent.Graph) {
	for k, v := range st.Outputs {
		d.Outputs[k] = v
	}
	if status == agent.RunFailed && g != nil {
		if rep, err := agent.NewErrorReport(g, st); err == nil {
			d.Error = &rep
		}
	}
}

func (a *api) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var after int64
	for _, p := range []struct{ name, v string }{{"after", r.URL.Query().Get("after")}, {"Last-Event-ID", r.Header.Get("Last-Event-ID")}} {
		if p.v == "" {
			continue
		}
		n, err := strconv.ParseInt(p.v, 10, 64)
		if err != nil || n < 0 {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "%s: %q is not an event sequence (0, 1, …)", p.name, p.v))
			return
		}
		after = n // Last-Event-ID, read second, wins: the browser's resume point
	}
	follow := r.URL.Query().Get("follow")
	switch follow {
	case "", "0", "false", "1", "true":
	default:
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "follow: %q is not 0, 1, true or false", follow))
		return
	}
	if follow == "" || follow == "0" || follow == "false" {
		evs, err := a.cfg.Service.Events(r.Context(), scope(r), id, after)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if evs == nil {
			evs = []agent.Event{}
		}
		writeJSON(w, 200, map[string]any{"events": evs})
		return
	}
	if _, err := a.cfg.Service.Get(r.Context(), scope(r), id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.sse(w, r, func(send func(id, kind string, v any) error) error {
		return a.cfg.Service.Follow(r.Context(), scope(r), id, after, func(e agent.Event) error {
			return send(strconv.FormatInt(e.Sequence, 10), e.Kind, e)
		})
	})
}

// addFollower counts an event stream of tenant; false when the tenant
// already holds FollowersPerTenant of them.
func (a *api) addFollower(tenant string) bool {
	a.followersMu.Lock()
	defer a.followersMu.Unlock()
	if a.followers[tenant] >= a.cfg.Limits.FollowersPerTenant {
		return false
	}
	a.followers[tenant]++
	return true
}

func (a *api) removeFollower(tenant string) {
	a.followersMu.Lock()
	defer a.followersMu.Unlock()
	if a.followers[tenant]--; a.followers[tenant] <= 0 {
		delete(a.followers, tenant)
	}
}

func joinStatuses() string {
	s := make([]string, len(agent.RunStatuses))
	for i, st := range agent.RunStatuses {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

func (a *api) step(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "step %q: not a step ordinal (0, 1, …)", r.PathValue("n")))
		return
	}
	snap, err := a.cfg.Service.Step(r.Context(), scope(r), r.PathValue("id"), n)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, 200, snap)
}

// ControlResponse is the body of 202 to a control request, sent once the
// request is committed. RequestID names it in the appliedControl list of the
// event whose commit honors it.
type ControlResponse struct {
	RunID     string `json:"runId"`
	Kind      string `json:"kind"`
	RequestID string `json:"requestId"`
	Recorded  bool   `json:"recorded"`
}

func (a *api) control(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		version := 0
		if kind == agent.KindPolicySwitchRequested {
			b, err := readBody(r)
			if err != nil {
				a.fail(w, r, err)
				return
			}
			var body struct {
				Version *int `json:"version"`
			}
			if err := strictjson.Decode(b, &body); err != nil {
				a.fail(w, r, err)
				return
			}
			if body.Version == nil {
				a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, `$.version: required (body {"version": N})`))
				return
			}
			version = *body.Version
		}
		c, err := a.cfg.Service.Control(r.Context(), scope(r), id, kind, version)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, ControlResponse{RunID: id, Kind: kind, RequestID: c.ID, Recorded: true})
	}
}

func (a *api) devices(w http.ResponseWriter, r *http.Request) {
	devs, err := a.cfg.Service.Devices(r.Context(), scope(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, 200, map[string]any{"devices": devs})
}

// MaxParkedListed bounds GET /v1/outbox/parked's limit.
const MaxParkedListed = 1000

func (a *api) parked(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxParkedListed {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "limit: %q is not a count from 1 to %d", l, MaxParkedListed))
			return
		}
		limit = n
	}
	ps, err := a.cfg.Service.ParkedEvents(r.Context(), limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, 200, map[string]any{"parked": ps})
}

// ReadyResponse is GET /readyz: Status is "ok" (200) or "unavailable"
// (503). Ready and Checks (each dependency's "ok" or its failure) are shown
// only to a caller allowed the details (readyDetails); a load balancer's
// anonymous probe learns nothing about addresses, paths or the outbox.
type ReadyResponse struct {
	Status string            `json:"status"`
	Ready  *bool             `json:"ready,omitempty"`
	Checks map[string]string `json:"checks,omitempty"`
	// ClockSkewMillis is this daemon's clock minus the store's, in
	// milliseconds (Config.ClockSkew; absent when not measured). The fleet
	// decides by the store's clock (leases, queue order, retention); a
	// large skew only makes the daemon's own logs and event ts disagree.
	ClockSkewMillis *int64 `json:"clockSkewMillis,omitempty"`
}

func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	details, err := a.readyDetails(r)
	if errors.Is(err, agent.ErrUnauthenticated) {
		unauthorized(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	for name, f := range a.cfg.Ready {
		if err := f(ctx); err != nil {
			checks[name] = agent.RedactString(err.Error())
			ok = false
		} else {
			checks[name] = "ok"
		}
	}
	resp := ReadyResponse{Status: "ok"}
	st := 200
	if !ok {
		st, resp.Status = http.StatusServiceUnavailable, "unavailable"
	}
	if details {
		resp.Ready, resp.Checks = &ok, checks
		if a.cfg.ClockSkew != nil {
			if d, err := a.cfg.ClockSkew(ctx); err == nil {
				ms := d.Milliseconds()
				resp.ClockSkewMillis = &ms
			}
		}
	}
	writeJSON(w, st, resp)
}

// readyDetails reports whether r may see /readyz's checks: with tokens, an
// admin token's request (a token that is not known is
// agent.ErrUnauthenticated; none or a tenant's: no details); without
// tokens, a request over a loopback connection (the user on the daemon's
// machine, not a peer of a daemon started with --insecure-no-auth).
func (a *api) readyDetails(r *http.Request) (bool, error) {
	on, err := a.auth.enforced(r.Context())
	if err != nil {
		return false, nil
	}
	if on {
		tok := bearer(r)
		if tok == "" {
			return false, nil
		}
		pr, err := agent.Authenticate(r.Context(), a.cfg.Tokens, tok)
		if err != nil {
			if errors.Is(err, agent.ErrUnauthenticated) {
				return false, err
			}
			return false, nil
		}
		return pr.Scope.IsAdmin(), nil
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false, nil
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback(), nil
}
