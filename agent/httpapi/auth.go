package httpapi

// Tenancy of the HTTP API. With Config.Tokens set and at least one token in
// the store (agent.Tokens.HasTokens), every route but the open ones needs
// `Authorization: Bearer <token>`: 401 without one or with an unknown or
// revoked one. The token decides the caller's agent.Scope, passed to every
// service call: a tenant token sees its tenant only (other tenants' runs are
// answered 404 as unknown runs, their existence is not disclosed; a submit
// naming another tenant is 403; devices show and leases list only its runs'
// leases). An admin token sees everything; so does every caller while no
// token exists (the single-host default).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/screengraph/screengraph-agent/agent"
)

// openRoutes answer without a token: liveness, readiness (what a load
// balancer probes) and the API description (no data in it).
var openRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /v1/openapi.json": true}

// adminRoutes need an admin token: /metrics aggregates every tenant; the
// token routes make, list and revoke every tenant's tokens.
var adminRoutes = map[string]bool{"GET /metrics": true, "GET /v1/outbox/parked": true,
	"POST /v1/tokens": true, "GET /v1/tokens": true, "DELETE /v1/tokens/{id}": true}

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
// admin check of admin routes. The caller's scope rides in the request's
// context (scope); the service and the store answer a run of another tenant
// exactly like an unknown one.
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
			// No token exists: every caller is the single host's admin.
			h(w, r.WithContext(context.WithValue(r.Context(), openKey{}, true)))
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
		if adminRoutes[p] && !pr.Scope.IsAdmin() {
			forbidden(w, "%s needs an admin token", p)
			return
		}
		ctx := agent.WithPrincipal(r.Context(), pr)
		if a.cfg.Revocations != nil {
			// The request (an SSE stream, a long poll) lives no longer than
			// its token: canceled within the watch's interval of a revoke.
			var stop func()
			ctx, stop = a.cfg.Revocations.Watch(ctx, pr.TokenID)
			defer stop()
		}
		h(w, r.WithContext(ctx))
	}
}

// openKey marks a request served while tokens are not enforced.
type openKey struct{}

// seesDetails reports whether r's caller may see what a failure says of the
// daemon's insides (the store's address, user, database): an admin token,
// or any caller while no token exists. A caller whose token could not be
// checked (the store is down) may not.
func seesDetails(r *http.Request) bool {
	if p := agent.PrincipalFrom(r.Context()); p != nil {
		return p.Scope.IsAdmin()
	}
	open, _ := r.Context().Value(openKey{}).(bool)
	return open
}

// scope is the caller's scope: its token's, or Admin while no token exists
// (the single-host default).
func scope(r *http.Request) agent.Scope {
	return agent.ScopeOf(agent.PrincipalFrom(r.Context()))
}

// tokenInText finds an API token in a request body.
var tokenInText = regexp.MustCompile(agent.TokenPrefix + `[A-Za-z0-9_-]{43}`)

// refuseToken refuses a run request carrying an API token (run inputs never
// carry one; it would be stored and shown in the run's input). It looks at
// the raw bytes and, when the body spells anything with a JSON escape
// ("sgat\u005f…"), at every key and string as decoded.
func refuseToken(b []byte) error {
	refused := agent.Errorf(agent.ErrInvalidRequest, "$: the run request carries an API token; run inputs never carry one (send it as Authorization: Bearer)")
	if tokenInText.Match(b) {
		return refused
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token() // keys and strings come decoded
		if err != nil {
			// Not JSON (or the end): the strict decoder says what is wrong.
			return nil
		}
		if s, ok := tok.(string); ok && tokenInText.MatchString(s) {
			return refused
		}
	}
}
