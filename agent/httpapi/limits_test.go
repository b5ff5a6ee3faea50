package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
)

// closedWithin reports whether the server closes conn (EOF or reset, after
// any response bytes) within d.
func closedWithin(t *testing.T, conn net.Conn, d time.Duration) bool {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

func dial(t *testing.T, e *env) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A body that never arrives no longer holds the connection forever.
func TestSlowBodyIsCutOff(t *testing.T) {
	e := newEnvWith(t, httpapi.Limits{ReadTimeout: 300 * time.Millisecond})
	conn := dial(t, e)
	if _, err := io.WriteString(conn, "POST /v1/runs HTTP/1.1\r\nHost: "+strings.TrimPrefix(e.url, "http://")+"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(t, conn, 10*time.Second) {
		t.Fatal("a request whose body never arrives still holds its connection after 10 s (ReadTimeout 300 ms)")
	}
}

// An idle keep-alive connection is closed after IdleTimeout.
func TestIdleConnectionIsClosed(t *testing.T) {
	e := newEnvWith(t, httpapi.Limits{IdleTimeout: 300 * time.Millisecond})
	conn := dial(t, e)
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: "+strings.TrimPrefix(e.url, "http://")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /healthz: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if !closedWithin(t, conn, 10*time.Second) {
		t.Fatal("an idle keep-alive connection is still open after 10 s (IdleTimeout 300 ms)")
	}
}

func TestHeadersOverMaxHeaderBytes(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest("GET", e.url+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", httpapi.DefaultLimits.MaxHeaderBytes+8<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("headers of %d KiB: %d, want 431", httpapi.DefaultLimits.MaxHeaderBytes>>10+8, resp.StatusCode)
	}
}

// An event stream outlives the server's ReadTimeout and WriteTimeout, and
// its EventWriteTimeout: the write deadline is set again before each event.
func TestFollowOutlivesServerTimeouts(t *testing.T) {
	// EventWriteTimeout bounds one event's write; 1 s leaves room for a
	// write on a loaded 2-core machine under -race (300 ms once cut the
	// stream there).
	l := httpapi.Limits{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, EventWriteTimeout: time.Second}
	e := newEnvWith(t, l)
	id := e.submit(`{"serial":"dev-a"}`)
	resp, err := e.follow(id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The run ends (and its last events are written) well after the server's
	// timeouts and after the first event's write deadline: each event must
	// get its own.
	time.AfterFunc(2*l.EventWriteTimeout+l.ReadTimeout, func() { close(e.node.gate(id)) })
	frames := readSSE(t, resp.Body)
	if len(frames) == 0 || frames[len(frames)-1].event != "end" {
		t.Fatalf("stream cut before its end: %d frames %+v", len(frames), frames)
	}
}

func TestFollowersPerTenantCapped(t *testing.T) {
	e := newEnvWith(t, httpapi.Limits{FollowersPerTenant: 2})
	id := e.submit(`{"serial":"dev-a"}`)
	var open []*http.Response
	for range 2 {
		resp, err := e.follow(id)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("follow: %v %v", resp, err)
		}
		open = append(open, resp)
	}
	resp, err := e.follow(id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "invalid_request_error") {
		t.Fatalf("third follower: %d %s, want 429 in the agent error format", resp.StatusCode, b)
	}
	// Closing a stream frees its place.
	open[0].Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := e.follow(id)
		if err != nil {
			t.Fatal(err)
		}
		st := resp.StatusCode
		resp.Body.Close()
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream's place is still taken after 10 s: %d", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	open[1].Body.Close()
	close(e.node.gate(id))
}

func TestEventAndListParametersValidated(t *testing.T) {
	e := newEnv(t)
	id := e.submit(`{"serial":"dev-a"}`)
	close(e.node.gate(id))
	for _, c := range []struct{ path, lastEventID, want string }{
		{"/v1/runs/" + id + "/events?after=abc", "", "after"},
		{"/v1/runs/" + id + "/events?after=-1", "", "after"},
		{"/v1/runs/" + id + "/events?after=1e3", "", "after"},
		{"/v1/runs/" + id + "/events", "x7", "Last-Event-ID"},
		{"/v1/runs/" + id + "/events?follow=yes", "", "follow"},
		{"/v1/runs?status=RUNING", "", "status"},
		{"/v1/runs?status=PENDING,bogus", "", "status"},
	} {
		req, _ := http.NewRequest("GET", e.url+c.path, nil)
		if c.lastEventID != "" {
			req.Header.Set("Last-Event-ID", c.lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "invalid_request_error") || !strings.Contains(string(b), c.want+":") {
			t.Errorf("%s (Last-Event-ID %q): %d %s, want 400 naming %s", c.path, c.lastEventID, resp.StatusCode, b, c.want)
		}
	}
	for _, p := range []string{"/v1/runs/" + id + "/events?after=0", "/v1/runs?status=pending,FINISHED"} {
		if st, b := e.do("GET", p, ""); st != 200 {
			t.Errorf("%s: %d %s", p, st, b)
		}
	}
}

func TestWrongMethodIs405(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/runs", "POST, GET"},
		{"PUT", "/v1/runs/01J0000000000000000000000/cancel", "POST"},
		{"POST", "/healthz", "GET"},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != c.allow || !strings.Contains(string(b), "invalid_request_error") {
			t.Errorf("%s %s: %d Allow %q %s, want 405 Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), b, c.allow)
		}
	}
	if st, _ := e.do("GET", "/v1/nothing", ""); st != 404 {
		t.Errorf("GET /v1/nothing: %d, want 404", st)
	}
}

// Parked outbox rows are listed for the admin (no tokens configured: the
// local caller is the admin; tenant tokens get 403, auth_test's admin routes).
func TestParkedOutboxListed(t *testing.T) {
	e := newEnv(t)
	id := e.submit(`{"serial":"dev-a"}`)
	close(e.node.gate(id))
	e.waitStatus(id, agent.RunFinished)
	ctx := context.Background()
	evs, err := e.store.Events(ctx, agent.Admin(), id, 0)
	if err != nil || len(evs) == 0 {
		t.Fatal(evs, err)
	}
	if err := e.store.ParkOutbox(ctx, id, evs[0].Sequence, "message of 1258291 bytes is over the NATS server's max_payload of 1048576 bytes"); err != nil {
		t.Fatal(err)
	}
	st, b := e.do("GET", "/v1/outbox/parked", "")
	var got struct{ Parked []agent.ParkedEvent }
	if st != 200 || json.Unmarshal([]byte(b), &got) != nil {
		t.Fatalf("GET /v1/outbox/parked: %d %s", st, b)
	}
	// The relay did not run in this env: every row is unpublished, only
	// the parked one is listed.
	if len(got.Parked) != 1 || got.Parked[0].EventID != evs[0].EventID || !strings.Contains(got.Parked[0].Reason, "max_payload") || got.Parked[0].Bytes == 0 {
		t.Fatalf("parked %+v, want event %s", got.Parked, evs[0].EventID)
	}
	for _, l := range []string{"0", "1001", "x"} {
		if st, b := e.do("GET", "/v1/outbox/parked?limit="+l, ""); st != 400 || !strings.Contains(b, "limit:") {
			t.Errorf("limit=%s: %d %s", l, st, b)
		}
	}
}
