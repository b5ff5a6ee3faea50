package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
)

// The admin token routes: a tenant token is refused (403, permission_error)
// on each and changes nothing; the admin makes a token whose secret is in
// the create answer only (not redacted there, never in the list or the
// revoke answer, whose records carry no hash), and the token authenticates
// until the admin revokes it. A body outside TokenRequest or a tenant id
// outside the rule is 400; an unknown id 404.
func TestTokenRoutesAdminOnly(t *testing.T) {
	e := newTenancyEnv(t)
	before, _ := e.store.ListTokens(t.Context())
	for _, rt := range []struct{ method, path, body string }{
		{"POST", "/v1/tokens", `{"tenantId":"acme","admin":true}`}, {"GET", "/v1/tokens", ""}, {"DELETE", "/v1/tokens/" + before[0].ID, ""},
	} {
		st, b, _ := e.as("acme", rt.method, rt.path, rt.body)
		if st != http.StatusForbidden {
			t.Errorf("%s %s with a tenant token: %d, want 403: %s", rt.method, rt.path, st, b)
			continue
		}
		agentError(t, b, agent.ErrPermission)
	}
	if after, _ := e.store.ListTokens(t.Context()); len(after) != len(before) || after[0].RevokedAt != nil {
		t.Fatalf("a tenant token's refused calls changed the tokens: %+v", after)
	}

	st, b, h := e.as("admin", "POST", "/v1/tokens", `{"tenantId":"gamma"}`)
	var ct httpapi.CreatedToken
	if st != http.StatusCreated || json.Unmarshal([]byte(b), &ct) != nil || !agent.LooksLikeToken(ct.Token) || ct.TenantID != "gamma" || ct.Admin {
		t.Fatalf("POST /v1/tokens as admin: %d %s", st, b)
	}
	if h.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q on the answer carrying a token", h.Get("Cache-Control"))
	}
	e.tokens["gamma"] = ct.Token
	if st, b, _ := e.as("gamma", "GET", "/v1/runs", ""); st != 200 {
		t.Errorf("the made token is refused: %d %s", st, b)
	}
	st, list, _ := e.as("admin", "GET", "/v1/tokens", "")
	var ts []agent.APIToken
	if st != 200 || json.Unmarshal([]byte(list), &ts) != nil || len(ts) != len(before)+1 {
		t.Fatalf("GET /v1/tokens: %d %s", st, list)
	}
	stored, _ := e.store.ListTokens(t.Context())
	for _, tok := range stored {
		if strings.Contains(list, tok.Hash) {
			t.Errorf("the list shows a token's hash:\n%s", list)
		}
	}
	for _, tok := range e.tokens {
		if strings.Contains(list, tok) {
			t.Errorf("the list shows a token:\n%s", list)
		}
	}
	st, b, _ = e.as("admin", "DELETE", "/v1/tokens/"+ct.ID, "")
	var rev agent.APIToken
	if st != 200 || json.Unmarshal([]byte(b), &rev) != nil || rev.ID != ct.ID || rev.RevokedAt == nil || strings.Contains(b, ct.Token) {
		t.Fatalf("DELETE /v1/tokens/%s: %d %s", ct.ID, st, b)
	}
	if st, b, _ := e.as("gamma", "GET", "/v1/runs", ""); st != http.StatusUnauthorized {
		t.Errorf("the revoked token: %d %s", st, b)
	}

	for _, bad := range []string{`{"tenantId":"a.b"}`, `{"tenantId":"acme","scope":"x"}`, `{"tenantid":"acme"}`, `{}`, `[]`} {
		if st, b, _ := e.as("admin", "POST", "/v1/tokens", bad); st != http.StatusBadRequest {
			t.Errorf("POST /v1/tokens %s: %d, want 400: %s", bad, st, b)
		} else {
			agentError(t, b, agent.ErrInvalidRequest)
		}
	}
	if st, b, _ := e.as("admin", "DELETE", "/v1/tokens/01J0000000000000000000NONE", ""); st != http.StatusNotFound || !strings.Contains(b, "not found") {
		t.Errorf("DELETE of an unknown token: %d %s", st, b)
	}
}

// An API built without a TokenAdmin answers the token routes 404 in the
// agent error format (nothing to manage), even to the admin of an open API.
func TestTokenRoutesWithoutTokenAdmin(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/v1/tokens"} {
		if st, b := e.do("GET", p, ""); st != http.StatusNotFound {
			t.Errorf("GET %s: %d %s", p, st, b)
		} else {
			agentError(t, b, agent.ErrInvalidRequest)
		}
	}
}
