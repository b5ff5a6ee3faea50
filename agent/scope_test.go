package agent

import (
	"errors"
	"strings"
	"testing"
)

func TestScope(t *testing.T) {
	acme, err := Tenant("acme")
	if err != nil {
		t.Fatal(err)
	}
	if !acme.Sees("acme") || acme.Sees("beta") || acme.Sees("") || acme.IsAdmin() || acme.TenantID() != "acme" || acme.Valid() != nil {
		t.Errorf("Tenant(acme) = %+v", acme)
	}
	if a := Admin(); !a.Sees("acme") || !a.Sees("beta") || !a.IsAdmin() || a.TenantID() != "" || a.Valid() != nil {
		t.Errorf("Admin() = %+v", a)
	}
	var zero Scope
	if zero.Sees("") || zero.Sees("acme") || !errors.Is(zero.Valid(), ErrNoScope) {
		t.Error("the zero Scope must see nothing and be invalid")
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b", "a\x00", strings.Repeat("x", 65), "ä"} {
		sc, err := Tenant(bad)
		var ae *Error
		if err == nil || !errors.As(err, &ae) || ae.ID != ErrInvalidRequest || sc != (Scope{}) {
			t.Errorf("Tenant(%q) = %+v, %v; want invalid_request_error", bad, sc, err)
		}
	}
}
