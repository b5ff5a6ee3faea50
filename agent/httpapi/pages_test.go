package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// page is GET /v1/runs?<q> as who.
func (e *tenancyEnv) page(who, q string) httpapi.RunList {
	e.t.Helper()
	st, b, _ := e.as(who, "GET", "/v1/runs?"+q, "")
	if st != 200 {
		e.t.Fatalf("GET /v1/runs?%s as %s: %d %s", q, who, st, b)
	}
	var l httpapi.RunList
	if err := json.Unmarshal([]byte(b), &l); err != nil {
		e.t.Fatal(err)
	}
	return l
}

// GET /v1/runs pages: a default and a largest limit, a cursor that lists
// every run of the caller's tenant once, newest first, while runs are
// submitted between pages, and never widens the caller's scope.
func TestListRunsPages(t *testing.T) {
	e := newTenancyEnv(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UTC()
	create := func(tenant string, at time.Time) agent.Run {
		r := storetest.NewRun(tenant, "emulator-5558")
		r.Status = agent.RunFinished
		r.CreatedAt, r.UpdatedAt = at, at
		if err := e.store.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var acme []string
	for i := 0; i < 105; i++ {
		tenant := "acme"
		if i%5 == 4 {
			tenant = "beta"
		}
		// Pairs share a created_at: the run id orders them.
		r := create(tenant, base.Add(time.Duration(i/2)*time.Second))
		if tenant == "acme" {
			acme = append(acme, r.RunID)
		}
	}
	// Newest first: reverse creation order, ties by run id descending.
	rs, err := e.store.ListRuns(ctx, mustScope(t, "acme"), agent.RunFilter{})
	if err != nil || len(rs) != len(acme) {
		t.Fatalf("%d acme runs, %v", len(rs), err)
	}
	want := make([]string, len(rs))
	for i, r := range rs {
		want[i] = r.RunID
	}

	// Default limit 100.
	if l := e.page("admin", ""); len(l.Runs) != httpapi.DefaultRunsListed || l.NextCursor == "" {
		t.Errorf("admin, no limit: %d runs, next %q; want %d and a cursor", len(l.Runs), l.NextCursor, httpapi.DefaultRunsListed)
	}
	// acme pages of 7, a run submitted between pages.
	var got []string
	cursor := ""
	for n := 0; ; n++ {
		if n > 30 {
			t.Fatal("no last page")
		}
		q := "limit=7"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		l := e.page("acme", q)
		for _, r := range l.Runs {
			if r.TenantID != "acme" {
				t.Fatalf("acme's page holds %s of %s", r.RunID, r.TenantID)
			}
			got = append(got, r.RunID)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
		create("acme", time.Now().UTC()) // newest: before every page already listed
	}
	if !slices.Equal(got, want) {
		t.Errorf("acme's pages (%d runs) differ from its runs newest first (%d): duplicates or gaps\n got %v\nwant %v", len(got), len(want), got, want)
	}
	// A cursor at beta's run continues acme's list with acme's runs only.
	all := e.page("admin", "limit=1000")
	var betaAt int
	for i, r := range all.Runs {
		if r.TenantID == "beta" && i > 10 {
			betaAt = i
			break
		}
	}
	k := agent.RunKey{CreatedAt: all.Runs[betaAt].CreatedAt, RunID: all.Runs[betaAt].RunID}
	l := e.page("acme", "limit=1000&cursor="+url.QueryEscape(k.Cursor()))
	if len(l.Runs) == 0 {
		t.Fatal("acme after beta's key: nothing")
	}
	for _, r := range l.Runs {
		if r.TenantID != "acme" {
			t.Errorf("acme with beta's cursor sees %s of %s", r.RunID, r.TenantID)
		}
	}
	// Refused: limits out of range, cursors that are not one.
	long := strings.Repeat("A", agent.MaxRunCursorBytes+1)
	for _, q := range []string{"serial=" + strings.Repeat("x", 256), "limit=0", "limit=-1", "limit=1001", "limit=x", "cursor=%21%21", "cursor=" + long,
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("yesterday_01J0")),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z_a b")),
		"cursor=" + base64.RawURLEncoding.EncodeToString([]byte("2026-01-01T00:00:00Z"))} {
		st, b, _ := e.as("acme", "GET", "/v1/runs?"+q, "")
		if st != 400 {
			t.Errorf("GET /v1/runs?%.60s: %d %s, want 400", q, st, b)
			continue
		}
		msg := agentError(t, b, agent.ErrInvalidRequest)
		if name, _, _ := strings.Cut(q, "="); !strings.HasPrefix(strings.TrimPrefix(msg, "invalid_request_error: "), name+":") {
			t.Errorf("GET /v1/runs?%.60s: message %q does not name %s", q, msg, name)
		}
	}
}

func mustScope(t *testing.T, tenant string) agent.Scope {
	t.Helper()
	sc, err := agent.Tenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
