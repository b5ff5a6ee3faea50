package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestNewTokenShapeAndHash(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if a == b || !LooksLikeToken(a) || !strings.HasPrefix(a, TokenPrefix) || len(a) != len(TokenPrefix)+43 {
		t.Errorf("tokens %q, %q", a, b)
	}
	if h := HashToken(a); len(h) != 64 || h == HashToken(b) || strings.Contains(h, a) {
		t.Errorf("hash %q", h)
	}
	if LooksLikeToken("sgat_short") || LooksLikeToken("Bearer "+a) {
		t.Error("LooksLikeToken accepts what is not a token")
	}
}

// A token is redacted wherever it appears in text or JSON.
func TestTokenRedacted(t *testing.T) {
	tok, _ := NewToken()
	for _, s := range []string{tok, "token " + tok + " leaked", "Authorization: Bearer " + tok, "x=" + tok} {
		if got := RedactString(s); strings.Contains(got, tok) || strings.Contains(got, tok[len(TokenPrefix):]) {
			t.Errorf("RedactString(%q) = %q", s, got)
		}
	}
	js := `{"note":"` + tok + `","nested":{"list":["` + tok + `"]}}`
	if got := string(RedactJSON([]byte(js))); strings.Contains(got, tok) {
		t.Errorf("RedactJSON = %s", got)
	}
}

func TestValidTenantID(t *testing.T) {
	for _, ok := range []string{"acme", "a_b", "A-1", strings.Repeat("x", 64)} {
		if !ValidTenantID(ok) {
			t.Errorf("ValidTenantID(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", strings.Repeat("x", 65), "ä"} {
		if ValidTenantID(bad) {
			t.Errorf("ValidTenantID(%q) = true", bad)
		}
	}
}

func TestPrincipal(t *testing.T) {
	var none *Principal
	if !ScopeOf(none).IsAdmin() || PrincipalFrom(context.Background()) != nil {
		t.Error("no principal (no tokens configured) must be the admin scope")
	}
	acme, _ := Tenant("acme")
	p := &Principal{TokenID: "t1", Scope: acme}
	if ScopeOf(p) != acme {
		t.Error("ScopeOf")
	}
	if PrincipalFrom(WithPrincipal(context.Background(), p)) != p {
		t.Error("WithPrincipal/PrincipalFrom")
	}
	// A principal whose scope was never set is no scope, never every tenant.
	if err := ScopeOf(&Principal{TokenID: "t2"}).Valid(); !errors.Is(err, ErrNoScope) {
		t.Errorf("zero principal scope Valid = %v, want ErrNoScope", err)
	}
}
