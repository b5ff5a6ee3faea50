package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
)

// runChanges opens GET /v1/runs?<q> as who and returns its `event: run`
// summaries on a channel (closed when the stream ends).
func (e *tenancyEnv) runChanges(who, q string) <-chan httpapi.RunSummary {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/runs?"+q, nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[who])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		e.t.Fatalf("GET /v1/runs?%s as %s: %d %s", q, who, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan httpapi.RunSummary, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "event: "):
				event = l[7:]
			case strings.HasPrefix(l, "data: ") && event == "run":
				var s httpapi.RunSummary
				if json.Unmarshal([]byte(l[6:]), &s) == nil {
					ch <- s
				}
			}
		}
	}()
	return ch
}

// waitRun reads ch until a summary of run id with status want arrives;
// every summary read must be of tenant (the stream's scope).
func waitRun(t *testing.T, ch <-chan httpapi.RunSummary, tenant, id string, want agent.RunStatus) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before run %s was %s", id, want)
			}
			if tenant != "" && s.TenantID != tenant {
				t.Fatalf("a stream of tenant %s sent run %s of tenant %s", tenant, s.RunID, s.TenantID)
			}
			if s.RunID == id && s.Status == want {
				return
			}
		case <-timeout:
			t.Fatalf("no change of run %s to %s within 15 s", id, want)
		}
	}
}

// GET /v1/runs?follow=1 streams each run the caller sees when it appears
// and when its status changes, scoped like the list: tenant acme's stream
// never carries beta's runs; tenant= narrows an admin's stream and the
// list, and a tenant token naming another tenant is 403.
func TestRunsFollow(t *testing.T) {
	e := newTenancyEnv(t)
	old := e.submitAs("acme", `{"serial": "emulator-5554", "apk": "a"}`)
	acme := e.runChanges("acme", "follow=1")
	admin := e.runChanges("admin", "follow=1&tenant=beta")
	waitRun(t, acme, "acme", old, agent.RunRunning) // the current runs first
	b := e.submitAs("beta", `{"serial": "emulator-5556", "apk": "b"}`)
	waitRun(t, admin, "beta", b, agent.RunRunning)
	a := e.submitAs("acme", `{"serial": "emulator-5558", "apk": "c"}`)
	close(e.node.gate(a))
	waitRun(t, acme, "acme", a, agent.RunFinished) // waitRun fails on beta's run b
	close(e.node.gate(b))
	waitRun(t, admin, "beta", b, agent.RunFinished)

	if st, body, _ := e.as("acme", "GET", "/v1/runs?tenant=beta", ""); st != 403 || !strings.Contains(body, "own tenant") {
		t.Errorf("acme listing tenant=beta: %d %s, want 403", st, body)
	}
	if st, body, _ := e.as("acme", "GET", "/v1/runs?follow=1&tenant=beta", ""); st != 403 {
		t.Errorf("acme following tenant=beta: %d %s, want 403", st, body)
	}
	if st, body, _ := e.as("admin", "GET", "/v1/runs?tenant=a%20b", ""); st != 400 || !strings.Contains(body, "tenant") {
		t.Errorf("tenant=a b: %d %s, want 400 naming tenant", st, body)
	}
	if st, body, _ := e.as("admin", "GET", "/v1/runs?follow=yes", ""); st != 400 || !strings.Contains(body, "follow") {
		t.Errorf("follow=yes: %d %s, want 400 naming follow", st, body)
	}
	l := e.page("admin", "tenant=beta")
	if len(l.Runs) != 1 || l.Runs[0].RunID != b {
		t.Errorf("admin tenant=beta lists %+v, want only %s", l.Runs, b)
	}
	if l := e.page("acme", "tenant=acme"); len(l.Runs) != 2 {
		t.Errorf("acme tenant=acme lists %d runs, want 2", len(l.Runs))
	}
}
