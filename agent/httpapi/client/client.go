// Package client is the Go client of the daemon's HTTP API (agent/httpapi):
// submit a run, list runs page by page, read a run's detail, events (or
// follow them over Server-Sent Events), steps and artifacts, and send
// control requests (cancel, pause, resume, policy switch). The CLI's client
// commands use it; other Go programs drive a daemon with it instead of
// hand-written HTTP.
//
// The request and response shapes are the API's own types (httpapi.RunList,
// httpapi.RunDetail, httpapi.ArtifactView, …). A call the daemon refuses
// returns an *Error carrying the HTTP status and the body in the agent error
// format; it matches the agent sentinels the daemon answered for, so
//
//	errors.Is(err, agent.ErrNotFound)       // 404: unknown run (or not this tenant's)
//	errors.Is(err, agent.ErrRunTerminal)    // 409: the run already ended
//	errors.Is(err, agent.ErrUnauthenticated) // 401: no or a bad token
//	errors.Is(err, agent.ErrForbidden)      // 403
//
// hold against a remote daemon as against a local store. A daemon that does
// not answer is an *agent.Error with id network_error. Every message and
// body an error carries is passed through agent.RedactString/RedactJSON.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/service"
)

const (
	// CallTimeout bounds one JSON call (request and whole answer).
	CallTimeout = 30 * time.Second
	// DownloadTimeout bounds one artifact download.
	DownloadTimeout = 5 * time.Minute
	// MaxAnswerBytes bounds a JSON answer read into memory (64 MiB); a
	// larger answer fails to decode.
	MaxAnswerBytes = 64 << 20
	// MaxEventBytes bounds one Server-Sent Event's line (16 MiB).
	MaxEventBytes = 16 << 20
)

// Client calls one daemon's HTTP API. Its zero value is not usable: make one
// with New. A Client is safe for concurrent use.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// New returns a client of the daemon at server, a base URL
// ("http://127.0.0.1:7780"; without a scheme http:// is assumed, a trailing
// slash is dropped). token, when not empty, is sent as Authorization:
// Bearer on every request. hc nil uses a new http.Client (no overall
// timeout: each call bounds itself).
func New(server, token string, hc *http.Client) *Client {
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(server, "/"), hc: hc, token: token}
}

// Base is the daemon's base URL, as errors name it.
func (c *Client) Base() string { return c.base }

// Error is a call the daemon refused (an answer other than 2xx). Error()
// names the run when the call was about one: "unknown run ID (daemon URL)"
// for a 404, "run ID already ended (…)" for a 409, "daemon URL answered
// STATUS: MESSAGE" otherwise.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// RunID is the run the call was about ("" for none).
	RunID string
	// ID and Retryable are errors[0]'s error_id and retryable of the body
	// ("" and false when the body is not the agent error format).
	ID        agent.ErrorID
	Retryable bool
	// Message is the daemon's message (the body's "error", else the body
	// as text), redacted.
	Message string
	// Body is the answer's body as the daemon sent it (the agent error
	// format), redacted; it may be empty or not JSON (a proxy's answer).
	Body json.RawMessage
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Is matches the agent sentinel of the status: 401 agent.ErrUnauthenticated,
// 403 agent.ErrForbidden, 404 agent.ErrNotFound, 409 agent.ErrRunTerminal,
// 429 agent.ErrControlBacklog.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusUnauthorized:
		return target == agent.ErrUnauthenticated
	case http.StatusForbidden:
		return target == agent.ErrForbidden
	case http.StatusNotFound:
		return target == agent.ErrNotFound
	case http.StatusConflict:
		return target == agent.ErrRunTerminal
	case http.StatusTooManyRequests:
		return target == agent.ErrControlBacklog
	}
	return false
}

// Unwrap is the daemon's classification as an *agent.Error (nil when the
// body carried no error_id), so agent.Classify sees what the daemon said.
func (e *Error) Unwrap() error {
	if e.ID == "" {
		return nil
	}
	return &agent.Error{ID: e.ID, Retryable: e.Retryable, Msg: e.Message}
}

// refused turns a non-2xx answer into an *Error.
func (c *Client) refused(status int, body []byte, runID string) error {
	msg := strings.TrimSpace(string(body))
	var rep struct {
		Error  string `json:"error"`
		Errors []struct {
			ErrorID   agent.ErrorID `json:"error_id"`
			Retryable bool          `json:"retryable"`
		} `json:"errors"`
	}
	e := &Error{Status: status, RunID: runID, Body: agent.RedactJSON(body)}
	if json.Unmarshal(body, &rep) == nil {
		if rep.Error != "" {
			msg = rep.Error
		}
		if len(rep.Errors) > 0 {
			e.ID, e.Retryable = rep.Errors[0].ErrorID, rep.Errors[0].Retryable
		}
	}
	e.Message = agent.RedactString(msg)
	switch {
	case status == http.StatusNotFound && runID != "" && !strings.Contains(e.Message, "no route"):
		e.msg = fmt.Sprintf("unknown run %s (daemon %s)", runID, c.base)
	case status == http.StatusConflict && runID != "":
		e.msg = fmt.Sprintf("run %s already ended (%s)", runID, e.Message)
	default:
		e.msg = fmt.Sprintf("daemon %s answered %d: %s", c.base, status, e.Message)
	}
	return e
}

// unreachable is the error of a daemon that does not answer.
func (c *Client) unreachable(err error) error {
	return agent.Wrap(agent.ErrNetwork, err, "no daemon answers at %s (start one with `screengraph-agent serve`, or pass --server URL)", c.base)
}

func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// RunPath is the API path of run runID with suffix ("", "/events", …), the
// id path-escaped.
func RunPath(runID, suffix string) string {
	return "/v1/runs/" + url.PathEscape(runID) + suffix
}

// Call sends method path (relative to the base URL, query included) with
// in as its JSON body (nil: none) and decodes a 2xx answer into out (nil:
// discarded; a *json.RawMessage keeps it as sent). runID names the run in
// errors. Errors: *Error for a refusal; *agent.Error network_error for a
// daemon that does not answer, an answer cut short or not JSON; the call
// is bounded by CallTimeout.
func (c *Client) Call(ctx context.Context, method, path, runID string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "the body of %s %s", method, path)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "--server %s", c.base)
	}
	req.Header.Set("Accept", "application/json")
	c.authorize(req)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return agent.Wrap(agent.ErrNetwork, err, "daemon %s", c.base)
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	if err != nil {
		return agent.Wrap(agent.ErrNetwork, err, "reading the answer of %s", c.base)
	}
	if resp.StatusCode/100 != 2 {
		return c.refused(resp.StatusCode, b, runID)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "the answer of %s %s", method, c.base+path)
		}
	}
	return nil
}

// Alive reports whether the daemon answers GET /healthz with 200 within
// 500 ms.
func (c *Client) Alive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Submit posts a run request (the JSON of `run --input`: a
// json.RawMessage, a map or a struct) to POST /v1/runs and returns the
// accepted run's id and status. A request the daemon refuses is an *Error
// with Status 400 and ID invalid_request_error.
func (c *Client) Submit(ctx context.Context, request any) (httpapi.SubmitResponse, error) {
	var r httpapi.SubmitResponse
	err := c.Call(ctx, "POST", "/v1/runs", "", request, &r)
	return r, err
}

// ListOptions filter GET /v1/runs; zero fields do not filter.
type ListOptions struct {
	// Limit is the page size (1 to httpapi.MaxRunsListed; 0: the daemon's
	// default, httpapi.DefaultRunsListed).
	Limit int
	// Serial keeps the runs of that device name; Status those in these
	// statuses (comma-separated, e.g. "RUNNING,PAUSED").
	Serial, Status string
	// Cursor continues a listing: the NextCursor of the previous page.
	Cursor string
}

// ListRuns returns a page of the runs the token sees, newest first; the
// page's NextCursor, when set, is the Cursor of the next page.
func (c *Client) ListRuns(ctx context.Context, o ListOptions) (httpapi.RunList, error) {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Serial != "" {
		q.Set("serial", o.Serial)
	}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var l httpapi.RunList
	err := c.Call(ctx, "GET", "/v1/runs?"+q.Encode(), "", nil, &l)
	return l, err
}

// Run returns GET /v1/runs/{id}: the run's summary, input, outputs, node
// timings, event and step counts, and the error report of a FAILED run.
func (c *Client) Run(ctx context.Context, runID string) (httpapi.RunDetail, error) {
	var d httpapi.RunDetail
	err := c.Call(ctx, "GET", RunPath(runID, ""), runID, nil, &d)
	return d, err
}

// RunRow is d as the run row it describes (agent.Run without the graph,
// which the API does not show).
func RunRow(d httpapi.RunDetail) agent.Run {
	r := SummaryRun(d.RunSummary)
	r.Input = d.Input
	return r
}

// SummaryRun is a listed run as an agent.Run (no input: the list does not
// carry it).
func SummaryRun(s httpapi.RunSummary) agent.Run {
	return agent.Run{RunID: s.RunID, TenantID: s.TenantID, ProjectID: s.ProjectID, Status: s.Status, Serial: s.Serial,
		Graph: s.Graph, PolicyVersion: s.PolicyVersion, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// Events returns the run's events with sequence > after, by sequence.
func (c *Client) Events(ctx context.Context, runID string, after int64) ([]agent.Event, error) {
	var body struct {
		Events []agent.Event `json:"events"`
	}
	err := c.Call(ctx, "GET", RunPath(runID, "/events?after="+strconv.FormatInt(after, 10)), runID, nil, &body)
	return body.Events, err
}

// Step returns the state snapshot the run committed at step n (0-based).
// A step the run has not reached is an *Error with Status 404.
func (c *Client) Step(ctx context.Context, runID string, n int) (agent.Snapshot, error) {
	var sn agent.Snapshot
	err := c.Call(ctx, "GET", RunPath(runID, "/steps/"+strconv.Itoa(n)), runID, nil, &sn)
	return sn, err
}

// Devices returns GET /v1/devices: the daemon's devices with their
// readiness, leases and quarantine.
func (c *Client) Devices(ctx context.Context) ([]service.Device, error) {
	var body struct {
		Devices []service.Device `json:"devices"`
	}
	err := c.Call(ctx, "GET", "/v1/devices", "", nil, &body)
	return body.Devices, err
}

// Cancel, Pause and Resume ask the daemon to cancel, pause or resume the
// run at its next node boundary: a 202 whose ControlResponse says the
// request was recorded. Errors: agent.ErrNotFound (404) for an unknown
// run, agent.ErrRunTerminal (409) for one that already ended.
func (c *Client) Cancel(ctx context.Context, runID string) (httpapi.ControlResponse, error) {
	return c.control(ctx, runID, "cancel", nil)
}

// Pause: see Cancel.
func (c *Client) Pause(ctx context.Context, runID string) (httpapi.ControlResponse, error) {
	return c.control(ctx, runID, "pause", nil)
}

// Resume: see Cancel.
func (c *Client) Resume(ctx context.Context, runID string) (httpapi.ControlResponse, error) {
	return c.control(ctx, runID, "resume", nil)
}

// SwitchPolicy switches the run to policy version from its next node on
// (an unknown version is a 400); errors as Cancel's.
func (c *Client) SwitchPolicy(ctx context.Context, runID string, version int) (httpapi.ControlResponse, error) {
	return c.control(ctx, runID, "policy", map[string]int{"version": version})
}

func (c *Client) control(ctx context.Context, runID, route string, body any) (httpapi.ControlResponse, error) {
	var r httpapi.ControlResponse
	err := c.Call(ctx, "POST", RunPath(runID, "/"+route), runID, body, &r)
	return r, err
}

// Follow streams the run's events with sequence > after from GET
// /v1/runs/{id}/events?follow=1 (Server-Sent Events) and calls fn with each,
// in sequence order, until the daemon ends the stream (the run ended: nil),
// fn fails (its error), or ctx ends (ctx.Err()). A stream closed before
// its end event is an *agent.Error network_error; a refusal an *Error (also
// when the daemon ends the stream because its token was revoked: 401).
// Follow is not bounded by CallTimeout: a run may take long.
func (c *Client) Follow(ctx context.Context, runID string, after int64, fn func(agent.Event) error) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+RunPath(runID, "/events?follow=1&after="+strconv.FormatInt(after, 10)), nil)
	if err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "--server %s", c.base)
	}
	req.Header.Set("Accept", "text/event-stream")
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.refused(resp.StatusCode, b, runID)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), MaxEventBytes)
	var kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if kind == "end" {
				return nil
			}
			if kind == "error" {
				// The daemon ended the stream: its token was revoked
				// (the agent error format of the 401 a new request gets).
				return c.refused(http.StatusUnauthorized, []byte(data), runID)
			}
			if data != "" {
				var e agent.Event
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return agent.Wrap(agent.ErrNetwork, err, "event stream of run %s", runID)
				}
				if err := fn(e); err != nil {
					return err
				}
			}
			kind, data = "", ""
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return agent.Errorf(agent.ErrNetwork, "the daemon %s closed the event stream of run %s before the run ended: %v", c.base, runID, sc.Err())
}

// Artifacts lists the run's evidence (GET /v1/runs/{id}/artifacts).
func (c *Client) Artifacts(ctx context.Context, runID string) ([]httpapi.ArtifactView, error) {
	var list httpapi.ArtifactsResponse
	err := c.Call(ctx, "GET", RunPath(runID, "/artifacts"), runID, nil, &list)
	return list.Artifacts, err
}

// SaveArtifact downloads artifact a of the run into root under
// httpapi.ArtifactFileName (no separators; os.Root refuses any escape,
// symlinks included), created exclusively (an existing file is an
// invalid_request_error and is left alone), and checks it against the
// listed size and sha256: a file that does not check out, or whose
// download fails, is removed (network_error). At most
// agent.MaxArtifactBytes are read; bounded by DownloadTimeout. It returns
// the file's name in root.
func (c *Client) SaveArtifact(ctx context.Context, root *os.Root, runID string, a httpapi.ArtifactView) (string, error) {
	name := httpapi.ArtifactFileName(a.ArtifactID, a.Kind, a.ContentType)
	ctx, cancel := context.WithTimeout(ctx, DownloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+RunPath(runID, "/artifacts/"+url.PathEscape(a.ArtifactID)), nil)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--server %s", c.base)
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return "", c.refused(resp.StatusCode, b, runID)
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--download: %s", name)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, agent.MaxArtifactBytes+1))
	if err == nil {
		if sum := sha256.Sum256(data); int64(len(data)) != a.Bytes || hex.EncodeToString(sum[:]) != a.SHA256 {
			err = fmt.Errorf("artifact %s: got %d bytes with sha256 %s, listed %d bytes with %s", a.ArtifactID, len(data), hex.EncodeToString(sum[:]), a.Bytes, a.SHA256)
		}
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
		return "", agent.Wrap(agent.ErrNetwork, err, "downloading artifact %s", a.ArtifactID)
	}
	return name, nil
}

// IsRefusal reports whether err is a refusal by the daemon with that HTTP
// status.
func IsRefusal(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// CreateToken makes an API token (POST /v1/tokens, admin only): the
// record and the token itself, which no later call shows again. Errors:
// *Error 400 invalid_request_error for a tenant id outside the rule, 401
// or 403 (agent.ErrForbidden) for a caller that is not admin.
func (c *Client) CreateToken(ctx context.Context, tenant string, admin bool) (httpapi.CreatedToken, error) {
	var t httpapi.CreatedToken
	err := c.Call(ctx, "POST", "/v1/tokens", "", httpapi.TokenRequest{TenantID: tenant, Admin: admin}, &t)
	return t, err
}

// Tokens lists every API token, oldest first, without the tokens or their
// hashes (GET /v1/tokens, admin only).
func (c *Client) Tokens(ctx context.Context) ([]agent.APIToken, error) {
	ts := []agent.APIToken{}
	err := c.Call(ctx, "GET", "/v1/tokens", "", nil, &ts)
	return ts, err
}

// RevokeToken revokes the token with that id (DELETE /v1/tokens/{id},
// admin only) and returns it with its RevokedAt. Errors: *Error 404
// (agent.ErrNotFound) for an unknown id.
func (c *Client) RevokeToken(ctx context.Context, id string) (agent.APIToken, error) {
	var t agent.APIToken
	err := c.Call(ctx, "DELETE", "/v1/tokens/"+url.PathEscape(id), "", nil, &t)
	return t, err
}
