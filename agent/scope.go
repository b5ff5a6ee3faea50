package agent

import (
	"errors"
	"fmt"
)

// Scope is whose runs a caller may read and control: every tenant's (Admin)
// or one tenant's (Tenant). It is decided once, from the caller's token (or,
// with no tokens configured, the daemon's single-host default: Admin), and
// passed to the service and to every store read; request bytes never decide
// it. The zero Scope is no scope at all: store reads refuse it with an error
// wrapping ErrNoScope, so a forgotten scope never means "every tenant".
type Scope struct {
	tenant string
	admin  bool
}

// ErrNoScope: a read was asked with the zero Scope (neither admin nor a
// tenant). It is a programming error, answered as internal_error.
var ErrNoScope = errors.New("no scope: a read must be scoped to admin or to one tenant")

// Admin is the scope of every tenant: admin tokens, the daemon's own work
// (scheduler, engine, relay) and the local CLI on the store file.
func Admin() Scope { return Scope{admin: true} }

// Tenant is the scope of one tenant. id must be a valid tenant id
// (ValidTenantID: 1-64 of A-Z, a-z, 0-9, '_' and '-'); otherwise the error
// is an *Error invalid_request_error naming the rule.
func Tenant(id string) (Scope, error) {
	if !ValidTenantID(id) {
		return Scope{}, InvalidTenantID("tenantId", id)
	}
	return Scope{tenant: id}, nil
}

// InvalidTenantID is the invalid_request_error for a tenant id that breaks
// the rule, at JSON path or flag where (the id itself is quoted, cut to 80
// bytes).
func InvalidTenantID(where, id string) error {
	if len(id) > 80 {
		id = id[:80] + "…"
	}
	return Errorf(ErrInvalidRequest, "%s: tenant id %q must be 1-64 of A-Z, a-z, 0-9, '_' and '-'", where, id)
}

// IsAdmin reports whether s is the admin scope.
func (s Scope) IsAdmin() bool { return s.admin }

// TenantID is the tenant of a tenant scope ("" for admin and the zero Scope).
func (s Scope) TenantID() string { return s.tenant }

// Valid is nil for Admin() and Tenant(id), an error wrapping ErrNoScope for
// the zero Scope.
func (s Scope) Valid() error {
	if s.admin || s.tenant != "" {
		return nil
	}
	return ErrNoScope
}

// Sees reports whether s may read and control runs of tenant (false for the
// zero Scope).
func (s Scope) Sees(tenant string) bool {
	return s.admin || (s.tenant != "" && s.tenant == tenant)
}

// String is "admin", "tenant <id>" or "no scope".
func (s Scope) String() string {
	switch {
	case s.admin:
		return "admin"
	case s.tenant != "":
		return fmt.Sprintf("tenant %s", s.tenant)
	}
	return "no scope"
}
