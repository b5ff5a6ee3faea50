package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// Anonymous /readyz says ok or not ok and nothing else (no addresses, paths,
// NATS URLs or outbox details); an admin token sees each check; without
// tokens the user on the machine (a loopback connection) does.
func TestReadyzAnonymousVsAdmin(t *testing.T) {
	var natsDown atomic.Bool
	var st *sqlite.Store
	e := newEnvConfig(t, func(c *httpapi.Config, s *sqlite.Store) {
		st = s
		c.Tokens = s
		c.ClockSkew = func(context.Context) (time.Duration, error) { return 1500 * time.Millisecond, nil }
		c.Ready = map[string]func(context.Context) error{
			"store": func(context.Context) error { return nil },
			"nats": func(context.Context) error {
				if natsDown.Load() {
					return errors.New("not connected to nats://10.1.2.3:4222 (data dir /srv/agent)")
				}
				return nil
			},
		}
	})
	natsDown.Store(true)
	// No tokens yet: a loopback caller sees the details.
	if code, body := e.send("GET", "/readyz", "", nil); code != 503 || !strings.Contains(body, "10.1.2.3") {
		t.Errorf("no tokens, loopback: %d %s, want 503 with the checks", code, body)
	}
	tokens := map[string]string{}
	for _, k := range []struct {
		name, tenant string
		admin        bool
	}{{"acme", "acme", false}, {"admin", "ops", true}} {
		tok, rec := storetest.NewAPIToken(k.tenant, k.admin)
		if err := st.CreateToken(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		tokens[k.name] = tok
	}
	get := func(tok string) (int, string) {
		h := map[string]string{}
		if tok != "" {
			h["Authorization"] = "Bearer " + tok
		}
		return e.send("GET", "/readyz", "", h)
	}
	minimal := func(who string, wantCode int, wantStatus string) {
		t.Helper()
		code, body := get(tokens[who])
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("%s: %d %s: %v", who, code, body, err)
		}
		if code != wantCode || len(m) != 1 || m["status"] != wantStatus {
			t.Errorf("/readyz as %q: %d %s, want %d {\"status\":%q} only", who, code, body, wantCode, wantStatus)
		}
	}
	minimal("", 503, "unavailable")
	minimal("acme", 503, "unavailable")
	code, body := get(tokens["admin"])
	var full httpapi.ReadyResponse
	if err := json.Unmarshal([]byte(body), &full); err != nil || code != 503 || full.Ready == nil || *full.Ready ||
		full.Checks["store"] != "ok" || !strings.Contains(full.Checks["nats"], "10.1.2.3") || full.ClockSkewMillis == nil || *full.ClockSkewMillis != 1500 {
		t.Errorf("/readyz as admin: %d %s, want 503 with every check and the clock skew (1500 ms)", code, body)
	}
	if code, body := get("sgat_unknown"); code != http.StatusUnauthorized {
		t.Errorf("/readyz with an unknown token: %d %s, want 401", code, body)
	}
	natsDown.Store(false)
	minimal("", 200, "ok")
	if code, body := get(tokens["admin"]); code != 200 || !strings.Contains(body, `"checks"`) {
		t.Errorf("/readyz as admin, ready: %d %s", code, body)
	}
}
