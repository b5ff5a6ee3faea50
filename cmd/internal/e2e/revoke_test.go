package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// tokenCLI runs the real binary's token commands.
func tokenCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(buildAgent(t), append([]string{"token"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("token %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return out.String()
}

func createToken(t *testing.T, store []string, args ...string) tokenCreated {
	t.Helper()
	var ct tokenCreated
	out := tokenCLI(t, append(append([]string{"create", "--output", "json"}, store...), args...)...)
	if err := json.Unmarshal([]byte(out), &ct); err != nil || !agent.LooksLikeToken(ct.Token) {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	return ct
}

// sseStream is an open SSE stream of a test: the event names it got and,
// once it ended, when.
type sseStream struct {
	name  string
	ended chan time.Time
	kinds chan []string
}

// openSSE opens url with tok and reads its events until the stream ends.
// It returns once the response headers came (200).
func openSSE(t *testing.T, name, url, tok string) *sseStream {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("%s: %d", name, resp.StatusCode)
	}
	s := &sseStream{name: name, ended: make(chan time.Time, 1), kinds: make(chan []string, 1)}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		var kinds []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if k, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				kinds = append(kinds, k)
			}
		}
		s.ended <- time.Now()
		s.kinds <- kinds
	}()
	return s
}

// endedBy waits for s to end by deadline; it returns when it ended.
func (s *sseStream) endedBy(t *testing.T, deadline time.Time) (time.Time, []string) {
	t.Helper()
	select {
	case at := <-s.ended:
		return at, <-s.kinds
	case <-time.After(time.Until(deadline)):
		t.Fatalf("%s still open %v after the revoke", s.name, agent.RevocationBound)
		return time.Time{}, nil
	}
}

func statusAs(t *testing.T, url, tok string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeRevokeEndsStreams (issue 22, item 4): with the real serve binary
// (embedded store and NATS) and tokens made by the real CLI, a tenant's
// open SSE streams (its run's events, and the runs list, followed) and its
// NATS connection (token auth, a subscription to its events) end within
// agent.RevocationBound of `token revoke`: the streams with an "error" event,
// the NATS connection closed by the server, a reconnect refused and a new
// HTTP request 401. An admin's stream on the same daemon stays open. The
// old daemon kept every one of them open (authorised once, at the start).
func TestServeRevokeEndsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve and the token CLI")
	}
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	store := []string{"--data-dir", d.dataDir}
	acme := createToken(t, store, "--tenant", "acme")
	admin := createToken(t, store, "--tenant", "ops", "--admin")

	// acme's run waits PENDING: its device is leased to someone else.
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hostID, err := device.HostID(context.Background(), d.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(context.Background(), agent.DeviceKey(hostID, "emulator-5990"), "revoke-test", ulid.Make().String(), time.Hour); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(runBody("emulator-5990", "https://127.0.0.1:9/app.apk", strings.Repeat("ab", 32), "", "", nil))
	req, _ := http.NewRequest("POST", d.URL()+"/v1/runs", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+acme.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub SubmitResponseView
	json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit as acme: %d", resp.StatusCode)
	}

	streams := []*sseStream{
		openSSE(t, "acme's run events (follow)", d.URL()+"/v1/runs/"+sub.RunID+"/events?follow=1", acme.Token),
		openSSE(t, "acme's runs (follow)", d.URL()+"/v1/runs?follow=1", acme.Token),
	}
	adminStream := openSSE(t, "admin's runs (follow)", d.URL()+"/v1/runs?follow=1", admin.Token)
	closed := make(chan time.Time, 1)
	nc, err := nats.Connect(d.NATSURL(), nats.Token(acme.Token), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix("acme")),
		nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { closed <- time.Now() }))
	if err != nil {
		t.Fatalf("NATS as acme: %v", err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync(snapshots.SubjectPrefix + ".acme.>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	tokenCLI(t, append([]string{"revoke", acme.ID}, store...)...)
	deadline := t0.Add(agent.RevocationBound)
	for _, s := range streams {
		at, kinds := s.endedBy(t, deadline)
		if len(kinds) == 0 || kinds[len(kinds)-1] != "error" {
			t.Errorf("%s ended without an error event: %v", s.name, kinds)
		}
		t.Logf("%s ended %v after the revoke began", s.name, at.Sub(t0).Round(time.Millisecond))
	}
	select {
	case at := <-closed:
		t.Logf("acme's NATS connection closed %v after the revoke began", at.Sub(t0).Round(time.Millisecond))
	case <-time.After(time.Until(deadline)):
		t.Fatalf("acme's NATS connection still open %v after the revoke (status %v)", agent.RevocationBound, nc.Status())
	}
	if nc2, err := nats.Connect(d.NATSURL(), nats.Token(acme.Token), nats.MaxReconnects(0)); err == nil {
		nc2.Close()
		t.Fatal("NATS accepted the revoked token again")
	}
	if st := statusAs(t, d.URL()+"/v1/runs", acme.Token); st != http.StatusUnauthorized {
		t.Fatalf("a new request with the revoked token: %d", st)
	}
	if st := statusAs(t, d.URL()+"/v1/runs", admin.Token); st != 200 {
		t.Fatalf("the admin token after acme's revoke: %d", st)
	}
	select {
	case <-adminStream.ended:
		t.Fatal("the admin's stream ended with acme's revoke")
	default:
	}
	if log := d.log(); strings.Contains(log, acme.Token) {
		t.Fatal("the token is in serve's log")
	}
}

// SubmitResponseView is POST /v1/runs' 202 body as the tests read it.
type SubmitResponseView struct {
	RunID string `json:"runId"`
}

// TestFleetRevokeEndsStreams: two daemons on one Postgres (and a real
// three-node NATS cluster); a tenant's SSE stream on each; `token revoke
// --database-url` ends both within agent.RevocationBound, and both daemons
// answer the token 401 from then on.
func TestFleetRevokeEndsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres, a NATS cluster and two daemons")
	}
	f := startFleet(t)
	srv := simtest.StartADBServer(t)
	ds := []*daemon{startDaemon(t, srv, f.daemonArgs()...), startDaemon(t, srv, f.daemonArgs()...)}
	store := []string{"--database-url", f.db}
	acme := createToken(t, store, "--tenant", "acme")
	var streams []*sseStream
	for i, d := range ds {
		streams = append(streams, openSSE(t, "acme's runs on daemon "+string(rune('0'+i)), d.URL()+"/v1/runs?follow=1", acme.Token))
	}
	t0 := time.Now()
	tokenCLI(t, append([]string{"revoke", acme.ID}, store...)...)
	for _, s := range streams {
		at, kinds := s.endedBy(t, t0.Add(agent.RevocationBound))
		if len(kinds) == 0 || kinds[len(kinds)-1] != "error" {
			t.Errorf("%s ended without an error event: %v", s.name, kinds)
		}
		t.Logf("%s ended %v after the revoke began", s.name, at.Sub(t0).Round(time.Millisecond))
	}
	for i, d := range ds {
		if st := statusAs(t, d.URL()+"/v1/runs", acme.Token); st != http.StatusUnauthorized {
			t.Fatalf("daemon %d: a new request with the revoked token: %d", i, st)
		}
	}
}
