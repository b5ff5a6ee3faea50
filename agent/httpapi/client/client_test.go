package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/agent/httpapi/httpapitest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// gateNode is the graph's only node: it waits until its run's gate is
// opened, then finishes the run with a progress line.
type gateNode struct{ httpapitest.Gates }

func (n *gateNode) Name() string { return "Gate" }

func (n *gateNode) gate(id string) chan struct{} { return n.Gate(id) }

func (n *gateNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	out := &agenttest.Output{Echo: "gate", Attempt: in.Attempt}
	select {
	case <-n.gate(in.Run.RunID):
	case <-ctx.Done():
		return agent.NodeResult{Output: out, Err: ctx.Err()}
	}
	return agent.NodeResult{Output: out, Next: agent.End, Deltas: []agent.TokenDelta{{Kind: "log", Text: "gate opened"}}}
}

func prepare(_ context.Context, runID string, body []byte) (agent.Run, error) {
	var req struct {
		Serial string `json:"serial"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Serial == "" {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.serial: required")
	}
	return agent.Run{RunID: runID, Serial: req.Serial, Graph: "test", Input: body, TenantID: "acme", PolicyVersion: 1}, nil
}

type env struct {
	t     *testing.T
	store *sqlite.Store
	blobs *blobs.Dir
	node  *gateNode
	url   string
	token string // an admin token: the API requires one
}

// newEnv serves the real HTTP API (httpapi over service over the embedded
// store) as serve does, with authentication on (an admin token exists).
func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir, err := blobs.NewDir(filepath.Join(t.TempDir(), "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	tok, rec := storetest.NewAPIToken("ops", true)
	if err := st.CreateToken(ctx, rec); err != nil {
		t.Fatal(err)
	}
	node := &gateNode{}
	srv := httpapitest.Start(t, httpapitest.Config{Store: st, Node: node, Prepare: servicetest.Prepare(prepare),
		Service: func(c *service.Config) { c.Artifacts, c.Blobs = st, dir },
		API:     func(c *httpapi.Config) { c.Tokens = st }})
	return &env{t: t, store: st, blobs: dir, node: node, url: srv.URL, token: tok}
}

func (e *env) client() *client.Client { return client.New(e.url, e.token, nil) }

// waitStatus polls the run through the client until it has status want.
func (e *env) waitStatus(c *client.Client, id string, want agent.RunStatus) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := c.Run(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if d.Status == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s is %s, want %s", id, d.Status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A run driven through the client alone: submitted, followed over SSE
// while it runs (the stream ends with the run), read back, and control
// requests on it answered (202 while it runs, 409 once it ended, 404 for
// an unknown run), each refusal a typed *client.Error.
func TestSubmitFollowGetControl(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()

	sub, err := c.Submit(ctx, map[string]string{"serial": "emulator-5554"})
	if err != nil || sub.RunID == "" || (sub.Status != agent.RunPending && sub.Status != agent.RunRunning) {
		t.Fatalf("Submit = %+v, %v", sub, err)
	}
	id := sub.RunID
	e.waitStatus(c, id, agent.RunRunning)

	// Pause and resume of another run: each recorded, each honored at the
	// node boundary.
	sub2, err := c.Submit(ctx, map[string]string{"serial": "emulator-5556"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitStatus(c, sub2.RunID, agent.RunRunning)
	if r, err := c.Pause(ctx, sub2.RunID); err != nil || !r.Recorded || r.RunID != sub2.RunID || r.Kind != agent.KindPauseRequested || r.RequestID == "" {
		t.Fatalf("Pause = %+v, %v", r, err)
	}
	close(e.node.gate(sub2.RunID))
	e.waitStatus(c, sub2.RunID, agent.RunPaused)
	if r, err := c.Resume(ctx, sub2.RunID); err != nil || !r.Recorded || r.Kind != agent.KindResumeRequested {
		t.Fatalf("Resume = %+v, %v", r, err)
	}
	e.waitStatus(c, sub2.RunID, agent.RunFinished)

	var (
		followed []agent.Event
		done     = make(chan error, 1)
	)
	go func() {
		done <- c.Follow(ctx, id, 0, func(ev agent.Event) error {
			followed = append(followed, ev)
			if ev.Kind == agent.KindRunStarted {
				close(e.node.gate(id)) // the stream is open: let the run end
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Follow = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Follow did not end with the run")
	}
	evs, err := c.Events(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || len(followed) != len(evs) {
		t.Fatalf("followed %d events, Events has %d", len(followed), len(evs))
	}
	for i := range evs {
		if followed[i].EventID != evs[i].EventID || followed[i].Sequence != int64(i+1) || followed[i].Checksum != evs[i].Checksum {
			t.Errorf("event %d: followed %+v, listed %+v", i, followed[i], evs[i])
		}
	}
	if last := evs[len(evs)-1].Kind; last != agent.KindRunFinished {
		t.Errorf("last event %s, want %s", last, agent.KindRunFinished)
	}
	// after= skips what was seen; a follow of an ended run ends at once.
	if tail, err := c.Events(ctx, id, int64(len(evs)-1)); err != nil || len(tail) != 1 || tail[0].Sequence != int64(len(evs)) {
		t.Errorf("Events(after %d) = %d events, %v", len(evs)-1, len(tail), err)
	}
	var again []agent.Event
	if err := c.Follow(ctx, id, int64(len(evs)-2), func(ev agent.Event) error { again = append(again, ev); return nil }); err != nil || len(again) != 2 {
		t.Errorf("Follow(after %d) of an ended run = %d events, %v", len(evs)-2, len(again), err)
	}

	d, err := c.Run(ctx, id)
	if err != nil || d.Status != agent.RunFinished || d.Events != len(evs) || d.Steps != 1 || d.Serial != "emulator-5554" {
		t.Fatalf("Run = %+v, %v", d, err)
	}
	if r := client.RunRow(d); r.RunID != id || r.TenantID != "acme" || string(r.Input) != `{"serial":"emulator-5554"}` {
		t.Errorf("RunRow = %+v", r)
	}
	if sn, err := c.Step(ctx, id, 0); err != nil || sn.RunID != id || sn.StepOrdinal != 0 {
		t.Errorf("Step(0) = %+v, %v", sn, err)
	}

	// 409: the run ended.
	_, err = c.Cancel(ctx, id)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || !errors.Is(err, agent.ErrRunTerminal) || errors.Is(err, agent.ErrNotFound) ||
		!strings.HasPrefix(err.Error(), "run "+id+" already ended (") || ce.RunID != id || !json.Valid(ce.Body) {
		t.Errorf("Cancel of an ended run = %#v", err)
	}
	if _, err := c.SwitchPolicy(ctx, id, 1); !errors.Is(err, agent.ErrRunTerminal) {
		t.Errorf("SwitchPolicy of an ended run = %v", err)
	}
	// 404: unknown run, for reads and control alike.
	unknown := ulid.Make().String()
	for name, call := range map[string]func() error{
		"Run":   func() error { _, err := c.Run(ctx, unknown); return err },
		"Pause": func() error { _, err := c.Pause(ctx, unknown); return err },
		"Events": func() error {
			_, err := c.Events(ctx, unknown, 0)
			return err
		},
		"Follow": func() error { return c.Follow(ctx, unknown, 0, func(agent.Event) error { return nil }) },
	} {
		err := call()
		if !errors.As(err, &ce) || ce.Status != http.StatusNotFound || !errors.Is(err, agent.ErrNotFound) ||
			err.Error() != "unknown run "+unknown+" (daemon "+e.url+")" || ce.ID != agent.ErrInvalidRequest {
			t.Errorf("%s(unknown run) = %v", name, err)
		}
		// The daemon's classification reaches agent.Classify.
		if got := agent.Classify(err).ID; got != agent.ErrInvalidRequest {
			t.Errorf("%s: Classify = %s, want %s", name, got, agent.ErrInvalidRequest)
		}
	}
	// 400: a run request the daemon refuses.
	if _, err := c.Submit(ctx, map[string]string{}); !errors.As(err, &ce) || ce.Status != http.StatusBadRequest ||
		ce.ID != agent.ErrInvalidRequest || !strings.Contains(ce.Message, "$.serial: required") {
		t.Errorf("Submit(no serial) = %v", err)
	}
}

// Every run is listed once, newest first, page by page through
// NextCursor; the last page has none.
func TestListRunsCursor(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	var ids []string
	for range 5 {
		sub, err := c.Submit(ctx, map[string]string{"serial": "emulator-5554"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.RunID)
	}
	var listed []string
	o := client.ListOptions{Limit: 2}
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages of 2 for 5 runs: %v", listed)
		}
		page, err := c.ListRuns(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Runs {
			listed = append(listed, r.RunID)
			if sr := client.SummaryRun(r); sr.RunID != r.RunID || sr.Graph != "test" || sr.TenantID != "acme" {
				t.Errorf("SummaryRun = %+v", sr)
			}
		}
		if page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	slices.Reverse(ids)
	if !slices.Equal(listed, ids) {
		t.Errorf("listed %v, want newest first %v", listed, ids)
	}
	// Filters reach the daemon: no run of another serial; a bad status is a 400.
	if page, err := c.ListRuns(ctx, client.ListOptions{Serial: "emulator-5556"}); err != nil || len(page.Runs) != 0 {
		t.Errorf("ListRuns(serial emulator-5556) = %+v, %v", page, err)
	}
	if _, err := c.ListRuns(ctx, client.ListOptions{Status: "NOPE"}); !client.IsRefusal(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "is not a run status") {
		t.Errorf("ListRuns(status NOPE) = %v", err)
	}
	if _, err := c.ListRuns(ctx, client.ListOptions{Cursor: "garbage"}); !client.IsRefusal(err, http.StatusBadRequest) {
		t.Errorf("ListRuns(cursor garbage) = %v", err)
	}
	for _, id := range ids {
		close(e.node.gate(id))
	}
}

// Without a token, or with a wrong one, every call is a 401 that matches
// agent.ErrUnauthenticated and carries the agent error format; the token
// itself never shows in the error.
func TestUnauthorized(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, tok := range map[string]string{"none": "", "wrong": "sgt_" + strings.Repeat("x", 40)} {
		c := client.New(e.url, tok, nil)
		_, err := c.ListRuns(ctx, client.ListOptions{})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || !errors.Is(err, agent.ErrUnauthenticated) ||
			errors.Is(err, agent.ErrForbidden) || ce.ID != agent.ErrPermission || !json.Valid(ce.Body) {
			t.Errorf("%s token: ListRuns = %#v", name, err)
			continue
		}
		var rep agent.ErrorReport
		if err := json.Unmarshal(ce.Body, &rep); err != nil || rep.Success || len(rep.Errors) != 1 || rep.Errors[0].Category != agent.CategoryAuth {
			t.Errorf("%s token: body %s is not the agent error format (%v)", name, ce.Body, err)
		}
		if tok != "" && (strings.Contains(err.Error(), tok) || strings.Contains(string(ce.Body), tok)) {
			t.Errorf("%s token: the token shows in %q / %s", name, err, ce.Body)
		}
		if _, err := c.Submit(ctx, map[string]string{"serial": "emulator-5554"}); !errors.Is(err, agent.ErrUnauthenticated) {
			t.Errorf("%s token: Submit = %v", name, err)
		}
	}
	if page, err := e.client().ListRuns(ctx, client.ListOptions{}); err != nil || len(page.Runs) != 0 {
		t.Errorf("admin token: ListRuns = %+v, %v", page, err)
	}
}

// A daemon that does not answer is a network_error naming it; Alive says
// false, and true for the test daemon.
func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := client.New(addr, "", nil)
	if c.Base() != "http://"+addr {
		t.Errorf("Base = %q", c.Base())
	}
	_, err = c.Run(context.Background(), ulid.Make().String())
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrNetwork || !strings.Contains(err.Error(), "no daemon answers at http://"+addr) {
		t.Errorf("Run against no daemon = %v", err)
	}
	if c.Alive(context.Background()) {
		t.Error("Alive = true with no daemon")
	}
	if e := newEnv(t); !e.client().Alive(context.Background()) {
		t.Error("Alive = false for a running daemon")
	}
}

// Artifacts lists a run's evidence and SaveArtifact downloads each into a
// directory, checked against the listed size and sha256: an existing file
// is never overwritten, a download that does not check out leaves no file.
func TestArtifactsDownload(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := storetest.NewRun("acme", "emulator-5554")
	if err := e.store.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	step := storetest.NodeStep(r, 1, 0, "WaitIdle")
	shot := storetest.NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", png)
	step.Artifacts = []agent.Artifact{shot}
	if err := e.blobs.Put(ctx, blobs.Sum(png), png); err != nil {
		t.Fatal(err)
	}
	if err := e.store.CommitStep(ctx, step); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	arts, err := c.Artifacts(ctx, r.RunID)
	if err != nil || len(arts) != 1 || arts[0].ArtifactID != shot.ArtifactID || arts[0].SHA256 != blobs.Sum(png) || arts[0].Bytes != int64(len(png)) {
		t.Fatalf("Artifacts = %+v, %v", arts, err)
	}
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	name, err := c.SaveArtifact(ctx, root, r.RunID, arts[0])
	if err != nil || name != httpapi.ArtifactFileName(shot.ArtifactID, "screenshot", "image/png") {
		t.Fatalf("SaveArtifact = %q, %v", name, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != string(png) {
		t.Fatalf("saved %q, %v", b, err)
	}
	// The file exists: refused, left as it was.
	if _, err := c.SaveArtifact(ctx, root, r.RunID, arts[0]); agent.Classify(err).ID != agent.ErrInvalidRequest {
		t.Errorf("SaveArtifact over an existing file = %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != string(png) {
		t.Errorf("the existing file changed: %q", b)
	}
	// A listing the bytes do not match: no file is left.
	bad := arts[0]
	bad.SHA256 = strings.Repeat("0", 64)
	dir2 := t.TempDir()
	root2, err := os.OpenRoot(dir2)
	if err != nil {
		t.Fatal(err)
	}
	defer root2.Close()
	if _, err := c.SaveArtifact(ctx, root2, r.RunID, bad); agent.Classify(err).ID != agent.ErrNetwork || !strings.Contains(err.Error(), "listed") {
		t.Errorf("SaveArtifact with a wrong sha256 = %v", err)
	}
	if left, _ := os.ReadDir(dir2); len(left) != 0 {
		t.Errorf("a download that did not check out left %v", left)
	}
	// Another run's id: 404, nothing written.
	if _, err := c.SaveArtifact(ctx, root2, ulid.Make().String(), arts[0]); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("SaveArtifact of an unknown run = %v", err)
	}
	if left, _ := os.ReadDir(dir2); len(left) != 0 {
		t.Errorf("a refused download left %v", left)
	}
}

// An answer that is not the agent error format (a proxy's page) is still
// a typed refusal with the status, its text as the message.
func TestRefusalNotAgentFormat(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	_, err := client.New(srv.URL, "", nil).ListRuns(context.Background(), client.ListOptions{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadGateway || ce.ID != "" || ce.Message != "bad gateway" ||
		err.Error() != "daemon "+srv.URL+" answered 502: bad gateway" || errors.Unwrap(err) != nil {
		t.Errorf("ListRuns through a proxy's 502 = %#v", err)
	}
}
