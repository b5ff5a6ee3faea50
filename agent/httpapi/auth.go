package httpapi

// Tenancy of the HTTP API. With Config.Tokens set and at least one token in
// the store (agent.Tokens.HasTokens), every route but the open ones needs
// `Authorization: Bearer <token>`: 401 without one or with an unknown or
// revoked one. A tenant token sees its tenant only: other tenants' runs are
// answered 404 as unknown runs (their existence is not disclosed), a submit
// naming another tenant is 403, devices and leases are filtered. An admin
// token sees everything; so does every caller while no token exists (the
// single-host default).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// openRoutes answer without a token: liveness, readiness (what a load
// balancer probes) and the API description (no data in it).
var openRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /v1/openapi.json": true}

// adminRoutes need an admin token: /metrics aggregates every tenant.
var adminRoutes = map[string]bool{"GET /metrics": true, "GET /v1/outbox/parked": true}

// auth decides whether tokens are enforced. Once the store has a token it
// stays on (HasTokens counts revoked tokens), so the answer is cached then.
type auth struct {
	tokens agent.Tokens
	on     atomic.Bool
}

func (au *auth) enforced(ctx context.Context) (bool, error) {
	if au == nil || au.tokens == nil {
		return false, nil
	}
	if au.on.Load() {
		return true, nil
	}
	has, err := au.tokens.HasTokens(ctx)
	if err != nil {
		return false, err
	}
	if has {
		au.on.Store(true)
	}
	return has, nil
}

// bearer returns the token of an `Authorization: Bearer <token>` header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func unauthorized(w http.ResponseWriter, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="screengraph-agent"`)
	writeError(w, http.StatusUnauthorized, agent.Wrap(agent.ErrPermission, err, "unauthenticated"))
}

func forbidden(w http.ResponseWriter, format string, args ...any) {
	writeError(w, http.StatusForbidden, agent.Wrap(agent.ErrPermission, agent.ErrForbidden, format, args...))
}

// guard wraps the handler of route pattern p: authentication, then the
// tenant check of a run route ({id}) before the handler runs, so no handler
// touches another tenant's run.
func (a *api) guard(p string, h http.HandlerFunc) http.HandlerFunc {
	if openRoutes[p] {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		on, err := a.auth.enforced(r.Context())
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if !on {
			h(w, r)
			return
		}
		pr, err := agent.Authenticate(r.Context(), a.cfg.Tokens, bearer(r))
		if errors.Is(err, agent.ErrUnauthenticated) {
			unauthorized(w, err)
			return
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if adminRoutes[p] && !pr.Admin {
			forbidden(w, "%s needs an admin token", p)
			return
		}
		if id := r.PathValue("id"); id != "" && !pr.Admin {
			run, err := a.cfg.Service.Get(r.Context(), id)
			if err == nil && !pr.Sees(run.TenantID) {
				// Answered exactly like an unknown run.
				err = fmt.Errorf("run %s: %w", id, agent.ErrNotFound)
			}
			if err != nil {
				a.fail(w, r, err)
				return
			}
		}
		h(w, r.WithContext(agent.WithPrincipal(r.Context(), pr)))
	}
}

// tokenInText finds an API token in a request body.
var tokenInText = regexp.MustCompile(agent.TokenPrefix + `[A-Za-z0-9_-]{43}`)

// scopeSubmit checks a run request against the caller: a body carrying an
// API token is refused (run inputs never carry one); with a principal, a
// tenantId must be a valid tenant id and, for a tenant token, its own
// (else 403); without one the token's tenant is set. It returns the body to
// submit, or false after writing the refusal.
func (a *api) scopeSubmit(w http.ResponseWriter, r *http.Request, b []byte) ([]byte, bool) {
	if tokenInText.Match(b) {
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "$: the run request carries an API token; run inputs never carry one (send it as Authorization: Bearer)"))
		return nil, false
	}
	pr := agent.PrincipalFrom(r.Context())
	if pr == nil {
		return b, true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil || obj == nil {
		return b, true // not an object: Submit names the error
	}
	raw, given := obj["tenantId"]
	if given && string(raw) != "null" {
		var tenant string
		if json.Unmarshal(raw, &tenant) != nil || !agent.ValidTenantID(tenant) {
			a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "$.tenantId: 1-64 of A-Z, a-z, 0-9, '_' and '-'"))
			return nil, false
		}
		if !pr.Sees(tenant) {
			forbidden(w, "$.tenantId: the token of tenant %s cannot submit runs for tenant %s", pr.TenantID, tenant)
			return nil, false
		}
		return b, true
	}
	if pr.Admin {
		return b, true // the daemon's default tenant
	}
	obj["tenantId"], _ = json.Marshal(pr.TenantID)
	nb, err := json.Marshal(obj)
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return nb, true
}

// tenantFilter is the tenant a listing is limited to ("" = every tenant).
func tenantFilter(ctx context.Context) string {
	if pr := agent.PrincipalFrom(ctx); pr != nil && !pr.Admin {
		return pr.TenantID
	}
	return ""
}

// ownRun reports whether the run with that id is the tenant's (cached per
// request in seen).
func (a *api) ownRun(ctx context.Context, tenant, runID string, seen map[string]bool) bool {
	if own, ok := seen[runID]; ok {
		return own
	}
	run, err := a.cfg.Service.Get(ctx, runID)
	own := err == nil && run.TenantID == tenant
	seen[runID] = own
	return own
}

// scopeDevices hides, from a tenant token, which run of another tenant holds
// a device and its lease (the device itself is shared hardware and stays
// listed; a run submitted for it waits PENDING until it is free).
func (a *api) scopeDevices(ctx context.Context, devs []service.Device) []service.Device {
	tenant := tenantFilter(ctx)
	if tenant == "" {
		return append([]service.Device{}, devs...)
	}
	seen := map[string]bool{}
	out := make([]service.Device, 0, len(devs))
	for _, d := range devs {
		if d.HeldBy != "" && !a.ownRun(ctx, tenant, d.HeldBy, seen) {
			d.HeldBy, d.Lease = "", nil
		}
		out = append(out, d)
	}
	return out
}

// scopeLeases keeps, for a tenant token, the leases of its runs.
func (a *api) scopeLeases(ctx context.Context, ls []agent.Lease) []agent.Lease {
	tenant := tenantFilter(ctx)
	if tenant == "" {
		return append([]agent.Lease{}, ls...)
	}
	seen := map[string]bool{}
	out := make([]agent.Lease, 0, len(ls))
	for _, l := range ls {
		if a.ownRun(ctx, tenant, l.RunID, seen) {
			out = append(out, l)
		}
	}
	return out
}
