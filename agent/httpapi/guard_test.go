package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

func (e *env) port() string { return e.url[strings.LastIndex(e.url, ":")+1:] }

// runCount is the number of runs in the store.
func (e *env) runCount() int {
	e.t.Helper()
	rs, err := e.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(rs)
}

const guardRun = `{"serial":"emulator-5554"}`

// The attack of issue 13 item 20: a web page rebound to the daemon posts a
// text/plain run with its own Origin. Each of the three checks alone refuses
// it, and nothing is stored.
func TestBrowserAttackRefused(t *testing.T) {
	e := newEnv(t)
	evil := "evil.example:" + e.port()
	for _, c := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"all three", map[string]string{"Host": evil, "Origin": "http://" + evil, "Content-Type": "text/plain"}, http.StatusMisdirectedRequest},
		{"rebinding Host", map[string]string{"Host": evil, "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"rebinding Host same-origin", map[string]string{"Host": evil, "Origin": "http://" + evil, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"Host on another port", map[string]string{"Host": "127.0.0.1:1", "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"Host without port", map[string]string{"Host": "localhost", "Content-Type": "application/json"}, http.StatusMisdirectedRequest},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no content type", map[string]string{}, http.StatusUnsupportedMediaType},
		{"foreign Origin", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, http.StatusForbidden},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, http.StatusForbidden},
		{"foreign Origin, text/plain", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}, http.StatusForbidden},
	} {
		st, body := e.send("POST", "/v1/runs", guardRun, c.headers)
		if st != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, st, body, c.status)
			continue
		}
		id := agent.ErrPermission
		if st == http.StatusUnsupportedMediaType {
			id = agent.ErrInvalidRequest
		}
		agentError(t, body, id)
	}
	if n := e.runCount(); n != 0 {
		t.Errorf("%d runs stored by refused requests", n)
	}
	// Reads through a rebound name are refused too (a page could read them
	// once the browser thinks it is same-origin).
	if st, body := e.send("GET", "/v1/runs", "", map[string]string{"Host": evil}); st != http.StatusMisdirectedRequest {
		t.Errorf("GET /v1/runs with a rebinding Host: %d %s", st, body)
	}
	if st, body := e.send("GET", "/readyz", "", map[string]string{"Host": evil}); st != http.StatusMisdirectedRequest {
		t.Errorf("GET /readyz with a rebinding Host: %d %s", st, body)
	}
}

// curl and the CLI (no Origin), a same-origin page, and every loopback
// spelling of the listen address are served.
func TestBrowserGuardAccepts(t *testing.T) {
	e := newEnv(t)
	p := e.port()
	for _, c := range []struct {
		name    string
		headers map[string]string
	}{
		{"curl", map[string]string{"Content-Type": "application/json"}},
		{"charset", map[string]string{"Content-Type": "application/json; charset=utf-8"}},
		{"localhost", map[string]string{"Host": "localhost:" + p, "Content-Type": "application/json"}},
		{"LocalHost.", map[string]string{"Host": "LocalHost.:" + p, "Content-Type": "application/json"}},
		{"[::1]", map[string]string{"Host": "[::1]:" + p, "Content-Type": "application/json"}},
		{"same-origin", map[string]string{"Origin": e.url, "Content-Type": "application/json"}},
		{"same-origin fetch", map[string]string{"Origin": e.url, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}},
	} {
		if st, body := e.send("POST", "/v1/runs", guardRun, c.headers); st != http.StatusAccepted {
			t.Errorf("%s: %d %s, want 202", c.name, st, body)
		}
	}
	// A control POST without a body needs no Content-Type.
	id := e.submit(guardRun)
	if st, body := e.send("POST", "/v1/runs/"+id+"/cancel", "", nil); st != http.StatusAccepted && st != http.StatusConflict {
		t.Errorf("cancel without a body: %d %s", st, body)
	}
}

// A name configured with --allowed-host is served (any port when none is
// given; that port only when one is); others are not.
func TestAllowedHost(t *testing.T) {
	e := newEnvConfig(t, func(c *httpapi.Config, _ *sqlite.Store) {
		c.AllowedHosts = []string{"agent.lan", "proxy.lan:8443"}
	})
	for _, c := range []struct {
		host   string
		status int
	}{
		{"agent.lan:" + e.port(), 200}, {"AGENT.LAN", 200}, {"agent.lan:9999", 200},
		{"proxy.lan:8443", 200}, {"proxy.lan:" + e.port(), http.StatusMisdirectedRequest},
		{"other.lan:" + e.port(), http.StatusMisdirectedRequest}, {"sub.agent.lan:" + e.port(), http.StatusMisdirectedRequest},
	} {
		if st, body := e.send("GET", "/v1/runs", "", map[string]string{"Host": c.host}); st != c.status {
			t.Errorf("Host %s: %d %s, want %d", c.host, st, body, c.status)
		}
	}
}

func TestCheckAllowedHost(t *testing.T) {
	for _, h := range []string{"agent.lan", "agent.lan:8443", "10.0.0.5", "[fd00::1]:7420", "fd00::1", "localhost"} {
		if err := httpapi.CheckAllowedHost(h); err != nil {
			t.Errorf("CheckAllowedHost(%q) = %v", h, err)
		}
	}
	for _, h := range []string{"", ":80", "a b", "agent.lan:0", "agent.lan:99999", "agent.lan:x", "http://agent.lan", "a..b", strings.Repeat("a", 64) + ".lan"} {
		if err := httpapi.CheckAllowedHost(h); err == nil {
			t.Errorf("CheckAllowedHost(%q) accepted", h)
		}
	}
}
