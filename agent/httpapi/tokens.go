package httpapi

// The admin token routes (issue 24 part 4): the `token create|list|revoke`
// commands go through them, to a daemon or to the API served in the CLI's
// process over a data dir (cmd/internal/daemon.ServeLocal). Admin only
// (adminRoutes): a tenant token is answered 403. A created token's secret is
// in the create answer and nowhere else: the store keeps its hashes, the
// list and revoke answers are agent.APIToken (whose hashes never marshal),
// and no event or log line names it.

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// tokenRoutes are the admin token routes.
var tokenRoutes = []Route{{"POST", "/v1/tokens"}, {"GET", "/v1/tokens"}, {"DELETE", "/v1/tokens/{id}"}}

// TokenAdmin serves the token routes (Config.TokenAdmin).
type TokenAdmin struct {
	// Store keeps the tokens.
	Store agent.Tokens
	// Issue makes a token for a tenant (or an admin token labelled with
	// tenant) at now: the secret, shown once, and the record to store
	// (snapshots/natsbus.IssueToken). Errors: invalid_request_error for a
	// tenant id outside agent.ValidTenantID's rule.
	Issue func(tenant string, admin bool, now time.Time) (secret string, rec agent.APIToken, err error)
}

// TokenRequest is the body of POST /v1/tokens.
type TokenRequest struct {
	// TenantID is the tenant the token is scoped to (1-64 of A-Z a-z 0-9 _
	// -); for an admin token, a label.
	TenantID string `json:"tenantId"`
	// Admin makes an admin token: every tenant's runs, events and control.
	Admin bool `json:"admin"`
}

// CreatedToken is the body of 201 to POST /v1/tokens: the record and, the
// only time it is ever shown, the token itself. CreatedAt is truncated to
// the microsecond, as the stores keep it.
type CreatedToken struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token"`
}

func (a *api) tokenHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/tokens":        a.createToken,
		"GET /v1/tokens":         a.listTokens,
		"DELETE /v1/tokens/{id}": a.revokeToken,
	}
}

// tokenAdmin is the configured TokenAdmin, or nil after answering 404
// (an API built without one, e.g. in a test).
func (a *api) tokenAdmin(w http.ResponseWriter, r *http.Request) *TokenAdmin {
	if ta := a.cfg.TokenAdmin; ta != nil && ta.Store != nil && ta.Issue != nil {
		return ta
	}
	writeError(w, http.StatusNotFound, agent.Errorf(agent.ErrInvalidRequest, "%s %s: this API manages no tokens", r.Method, r.URL.Path))
	return nil
}

// createToken answers POST /v1/tokens: 201 CreatedToken; 400 for a body
// that is not a TokenRequest (strict JSON) or a tenant id outside the rule.
func (a *api) createToken(w http.ResponseWriter, r *http.Request) {
	ta := a.tokenAdmin(w, r)
	if ta == nil {
		return
	}
	b, err := readBody(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var req TokenRequest
	if err := strictjson.Decode(b, &req); err != nil {
		a.fail(w, r, agent.Errorf(agent.ErrInvalidRequest, "%s", agent.Classify(err).Msg))
		return
	}
	if !agent.ValidTenantID(req.TenantID) {
		a.fail(w, r, agent.InvalidTenantID("tenantId", req.TenantID))
		return
	}
	secret, rec, err := ta.Issue(req.TenantID, req.Admin, time.Now())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := ta.Store.CreateToken(r.Context(), rec); err != nil {
		a.fail(w, r, agent.Wrap(agent.ErrProcess, err, "storing token %s", rec.ID))
		return
	}
	out, err := json.Marshal(CreatedToken{ID: rec.ID, TenantID: rec.TenantID, Admin: rec.Admin,
		CreatedAt: rec.CreatedAt.Truncate(time.Microsecond), Token: secret})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// Not through writeJSON: its redaction would hide the one copy of the
	// token the caller gets. Nothing between here and the caller keeps it.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "/v1/tokens/"+rec.ID)
	w.WriteHeader(http.StatusCreated)
	w.Write(append(out, '\n'))
}

// listTokens answers GET /v1/tokens: every token, oldest first, as a bare
// JSON array of agent.APIToken (no hash; an object key named like "tokens"
// would be redacted whole by writeJSON).
func (a *api) listTokens(w http.ResponseWriter, r *http.Request) {
	ta := a.tokenAdmin(w, r)
	if ta == nil {
		return
	}
	ts, err := ta.Store.ListTokens(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if ts == nil {
		ts = []agent.APIToken{}
	}
	writeJSON(w, http.StatusOK, ts)
}

// revokeToken answers DELETE /v1/tokens/{id}: 200 with the revoked token
// (a second revoke keeps the first time); 404 for an unknown id.
func (a *api) revokeToken(w http.ResponseWriter, r *http.Request) {
	ta := a.tokenAdmin(w, r)
	if ta == nil {
		return
	}
	t, err := ta.Store.RevokeToken(r.Context(), r.PathValue("id"))
	if err != nil {
		// Unknown: "api token ID: not found", 404.
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
