package main

// The CLI's client of the daemon's HTTP API (agent/httpapi): cancel, pause,
// resume and policy switch, and `runs list|show|events|inspect` when a
// daemon answers. Everything printed goes through agent.RedactJSON /
// agent.RedactString.

import (
	"bufio"
	"bytes"
	"context"
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
	"github.com/screengraph/screengraph-agent/snapshots"
)

// defaultServer is the daemon the client commands talk to by default.
const defaultServer = "http://" + DefaultListen

// serverFlags locate the daemon.
type serverFlags struct {
	Server string `help:"URL of the daemon's HTTP API (default http://${default_listen})." env:"SCREENGRAPH_SERVER" placeholder:"URL"`
}

// clientToken is the API token of --token / SCREENGRAPH_TOKEN (main sets it).
var clientToken string

// client calls the daemon's HTTP API.
type client struct {
	base  string
	hc    *http.Client
	token string // sent as Authorization: Bearer when set
}

func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

func newClient(server string) *client {
	if server == "" {
		server = defaultServer
	}
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	tok := clientToken
	if tok == "" {
		tok = os.Getenv("SCREENGRAPH_TOKEN")
	}
	return &client{base: strings.TrimRight(server, "/"), hc: &http.Client{}, token: tok}
}

// apiError is a call the daemon refused: its HTTP status and its body in
// the agent error format.
type apiError struct {
	status int
	body   json.RawMessage
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// errorBody is what `--output json` prints for a failed call: the daemon's
// body as it sent it, else the agent error format of err.
func errorBody(err error) any {
	var ae *apiError
	if errors.As(err, &ae) && json.Valid(ae.body) && len(bytes.TrimSpace(ae.body)) > 0 {
		return ae.body
	}
	return httpapi.ErrorBody(err, "")
}

// failHTTP reports a failed client command: the agent error format under
// --output json; the message (redacted by main) otherwise; exit code 2.
func (f outputFlag) failHTTP(what string, err error) error {
	if f.Output == "json" {
		printJSON(errorBody(err))
	}
	return exitError{code: 2, err: fmt.Errorf("%s: %w", what, err)}
}

func runPath(runID, suffix string) string {
	return "/v1/runs/" + url.PathEscape(runID) + suffix
}

// unreachable is the error of a daemon that does not answer.
func (c *client) unreachable(err error) error {
	return agent.Wrap(agent.ErrNetwork, err, "no daemon answers at %s (start one with `screengraph-agent serve`, or pass --server URL)", c.base)
}

// refused turns a non-2xx answer into an apiError whose message names the
// run: 404 -> unknown run, 409 -> the run already ended.
func (c *client) refused(status int, body []byte, runID string) error {
	msg := strings.TrimSpace(string(body))
	var rep agent.ErrorReport
	if json.Unmarshal(body, &rep) == nil && rep.Error != "" {
		msg = rep.Error
	}
	msg = agent.RedactString(msg)
	e := &apiError{status: status, body: agent.RedactJSON(body)}
	switch {
	case status == http.StatusNotFound && runID != "" && !strings.Contains(msg, "no route"):
		e.msg = fmt.Sprintf("unknown run %s (daemon %s)", runID, c.base)
	case status == http.StatusConflict && runID != "":
		e.msg = fmt.Sprintf("run %s already ended (%s)", runID, msg)
	default:
		e.msg = fmt.Sprintf("daemon %s answered %d: %s", c.base, status, msg)
	}
	return e
}

// call sends a JSON request (in may be nil) and decodes a 2xx answer into
// out (a *json.RawMessage keeps it as sent). runID names the run in errors.
func (c *client) call(ctx context.Context, method, path, runID string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
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
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
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

// alive reports whether a daemon answers /healthz (within 500 ms).
func (c *client) alive(ctx context.Context) bool {
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

// daemonFor picks where the runs commands read: the daemon named by
// --server (or SCREENGRAPH_SERVER); else, when no --data-dir names a local
// store, the default daemon if one answers; nil means the local store.
func (f serverFlags) daemonFor(ctx context.Context, s storeFlags) *client {
	return f.daemonUnless(ctx, s.DataDir != "")
}

// daemonUnless is the daemon of --server; else, unless a flag names a local
// source (localNamed), the default daemon if one answers; else nil.
func (f serverFlags) daemonUnless(ctx context.Context, localNamed bool) *client {
	if f.Server != "" {
		return newClient(f.Server)
	}
	if localNamed {
		return nil
	}
	if c := newClient(""); c.alive(ctx) {
		return c
	}
	return nil
}

// follow streams the run's events with sequence > after from the daemon's
// Server-Sent Events endpoint and calls fn with each, until the run ends.
func (c *client) follow(ctx context.Context, runID string, after int64, fn func(agent.Event) error) error {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+runPath(runID, "/events?follow=1&after="+strconv.FormatInt(after, 10)), nil)
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
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if kind == "end" {
				return nil
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

// followLocal polls the local store for the run's events until it ends
// (`runs events --follow` without a daemon).
func followLocal(ctx context.Context, st agent.Store, runID string, after int64, fn func(agent.Event) error) error {
	return service.FollowStore(ctx, st, agent.Admin(), runID, after, nil, 200*time.Millisecond, fn)
}

// eventPrinter prints followed events as they arrive: a table row each
// (text) or one JSON object a line (json), redacted. The payload is printed
// whole (a token_delta's text is what the reader follows).
func eventPrinter(output string) func(agent.Event) error {
	header := false
	return func(e agent.Event) error {
		e.Payload = agent.RedactJSON(e.Payload)
		if output == "json" {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(os.Stdout, "%s\n", agent.RedactJSON(b))
			return err
		}
		if !header {
			fmt.Fprintf(os.Stdout, "%-5s  %-24s  %-30s  %-26s  %-13s  %s\n", "SEQ", "TS", "KIND", "EVENT ID", "CHECKSUM", "PAYLOAD")
			header = true
		}
		_, err := fmt.Fprintf(os.Stdout, "%-5d  %-24s  %-30s  %-26s  %-13s  %s\n", e.Sequence, e.TS, e.Kind, e.EventID, clip(e.Checksum, 12), e.Payload)
		return err
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ---- runs list|show|events|inspect through the daemon ----

func (c *runsListCmd) viaDaemon(ctx context.Context, cl *client) error {
	q := url.Values{}
	if c.Limit > 0 {
		q.Set("limit", strconv.Itoa(c.Limit))
	}
	if c.Serial != "" {
		q.Set("serial", c.Serial)
	}
	if c.Status != "" {
		q.Set("status", c.Status)
	}
	if c.Cursor != "" {
		q.Set("cursor", c.Cursor)
	}
	var raw json.RawMessage
	if err := cl.call(ctx, "GET", "/v1/runs?"+q.Encode(), "", nil, &raw); err != nil {
		return c.failHTTP("runs list", err)
	}
	if c.Output == "json" {
		return printJSON(raw)
	}
	var body struct {
		Runs       []agent.Run `json:"runs"`
		NextCursor string      `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return c.failHTTP("runs list", err)
	}
	if err := writeRuns(body.Runs); err != nil {
		return err
	}
	printNextPage(body.NextCursor)
	return nil
}

// detail gets GET /v1/runs/{id} and the run row it describes.
func (cl *client) detail(ctx context.Context, runID string) (httpapi.RunDetail, agent.Run, error) {
	var d httpapi.RunDetail
	if err := cl.call(ctx, "GET", runPath(runID, ""), runID, nil, &d); err != nil {
		return d, agent.Run{}, err
	}
	s := d.RunSummary
	return d, agent.Run{RunID: s.RunID, TenantID: s.TenantID, ProjectID: s.ProjectID, Status: s.Status, Serial: s.Serial,
		Input: d.Input, PolicyVersion: s.PolicyVersion, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}, nil
}

func (c *runsShowCmd) viaDaemon(ctx context.Context, cl *client) error {
	d, r, err := cl.detail(ctx, c.RunID)
	if err != nil {
		return c.failHTTP("runs show", err)
	}
	// Each step commits one agent.node.finished: the latest step is Steps-1.
	var state *agent.RunState
	if d.Steps > 0 {
		var sn agent.Snapshot
		if cl.call(ctx, "GET", runPath(c.RunID, "/steps/"+strconv.Itoa(d.Steps-1)), c.RunID, nil, &sn) == nil {
			if rs, err := agent.DecodeRunState(sn); err == nil {
				state = &rs
			}
		}
	}
	last := int64(d.Events) // sequences are 1..n without gaps
	if c.Output == "json" {
		return printJSON(map[string]any{"run": r, "state": state, "lastSequence": last})
	}
	writeShow(r, state, last)
	return nil
}

func (c *runsEventsCmd) viaDaemon(ctx context.Context, cl *client) error {
	if c.Follow {
		if err := cl.follow(ctx, c.RunID, c.After, eventPrinter(c.Output)); err != nil {
			return c.failHTTP("runs events", err)
		}
		return nil
	}
	var raw json.RawMessage
	if err := cl.call(ctx, "GET", runPath(c.RunID, "/events?after="+strconv.FormatInt(c.After, 10)), c.RunID, nil, &raw); err != nil {
		return c.failHTTP("runs events", err)
	}
	if c.Output == "json" {
		return printJSON(raw)
	}
	var body struct {
		Events []agent.Event `json:"events"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return c.failHTTP("runs events", err)
	}
	return snapshots.WriteEvents(os.Stdout, redactEvents(body.Events))
}

func (c *runsInspectCmd) viaDaemon(ctx context.Context, cl *client) error {
	d, r, err := cl.detail(ctx, c.RunID)
	if err != nil {
		return c.failHTTP("runs inspect", err)
	}
	n := c.Step
	if n < 0 {
		n = d.Steps - 1
	}
	if n < 0 || n >= d.Steps {
		return c.failHTTP("runs inspect", snapshots.NoStep(c.RunID, n, d.Steps))
	}
	v := snapshots.StepView{Run: r, LastSequence: int64(d.Events), Events: []agent.Event{}}
	if err := cl.call(ctx, "GET", runPath(c.RunID, "/steps/"+strconv.Itoa(n)), c.RunID, nil, &v.Snapshot); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			err = snapshots.NoStep(c.RunID, n, d.Steps) // the run is known: the step is not
		}
		return c.failHTTP(fmt.Sprintf("runs inspect step %d", n), err)
	}
	// The step's node events (started, token deltas, finished), by the
	// stepOrdinal of their payloads.
	var body struct {
		Events []agent.Event `json:"events"`
	}
	if err := cl.call(ctx, "GET", runPath(c.RunID, "/events"), c.RunID, nil, &body); err != nil {
		return c.failHTTP("runs inspect", err)
	}
	for _, e := range body.Events {
		var p struct {
			StepOrdinal *int `json:"stepOrdinal"`
		}
		if strings.HasPrefix(e.Kind, "agent.node.") && json.Unmarshal(e.Payload, &p) == nil && p.StepOrdinal != nil && *p.StepOrdinal == n {
			v.Events = append(v.Events, e)
		}
	}
	if c.Output == "json" {
		return printJSON(v)
	}
	v.Snapshot.State = agent.RedactJSON(v.Snapshot.State)
	v.Events = redactEvents(v.Events)
	return snapshots.WriteStepView(os.Stdout, v)
}

// ---- cancel, pause, resume, policy switch ----

type controlFlags struct {
	serverFlags
	outputFlag
}

// control POSTs a control request for the run and reports it.
func (f controlFlags) control(ctx context.Context, what, runID, route string, body any) error {
	cl := newClient(f.Server)
	var raw json.RawMessage
	if err := cl.call(ctx, "POST", runPath(runID, "/"+route), runID, body, &raw); err != nil {
		return f.failHTTP(what, err)
	}
	if f.Output == "json" {
		return printJSON(raw)
	}
	fmt.Printf("%s of run %s recorded\n", what, runID)
	return nil
}

type cancelCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *cancelCmd) Run(ctx context.Context) error {
	return c.control(ctx, "cancel", c.RunID, "cancel", nil)
}

type pauseCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *pauseCmd) Run(ctx context.Context) error {
	return c.control(ctx, "pause", c.RunID, "pause", nil)
}

type resumeCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *resumeCmd) Run(ctx context.Context) error {
	return c.control(ctx, "resume", c.RunID, "resume", nil)
}

type policyCmd struct {
	Switch policySwitchCmd `cmd:"" help:"Switch a run to another policy version from its next node on."`
}

type policySwitchCmd struct {
	controlFlags
	RunID   string `arg:"" help:"The run's ULID."`
	Version int    `help:"Policy version to switch to." required:""`
}

func (c *policySwitchCmd) Run(ctx context.Context) error {
	return c.control(ctx, fmt.Sprintf("policy switch to v%d", c.Version), c.RunID, "policy", map[string]int{"version": c.Version})
}
