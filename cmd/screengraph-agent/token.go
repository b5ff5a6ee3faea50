package main

// Tenancy: `token create|list|revoke`, `nats-config`, and serve's wiring of
// API tokens into the HTTP API and the embedded NATS server (serveTenancy).
// The token is printed once, by `token create`; the store keeps its SHA-256
// (and a bcrypt hash for a generated nats-server configuration).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

type tokenCmd struct {
	Create tokenCreateCmd `cmd:"" help:"Make an API token scoped to a tenant (or an admin token) and print it once."`
	List   tokenListCmd   `cmd:"" help:"List the API tokens: id, tenant, admin, created, revoked (never the token)."`
	Revoke tokenRevokeCmd `cmd:"" help:"Revoke an API token by id: refused from then on; its open HTTP streams and embedded-NATS connections end within 5 s (every daemon on the store)."`
}

// tokenStoreFlags locate the store holding the tokens: the embedded store of
// a data dir, or a fleet's Postgres.
type tokenStoreFlags struct {
	DataDir     string `help:"Data directory of the embedded store (default: ~/.local/share/screengraph-agent)." name:"data-dir" type:"path" env:"SCREENGRAPH_DATA_DIR"`
	DatabaseURL string `help:"The fleet's Postgres (a postgres:// URL or libpq keyword/value pairs) instead of the embedded store." name:"database-url" env:"SCREENGRAPH_DATABASE_URL"`
}

// open opens the store of the flags (agentd.OpenAdminStore).
func (f tokenStoreFlags) open(ctx context.Context) (agentd.AdminStore, error) {
	return agentd.OpenAdminStore(ctx, f.DataDir, f.DatabaseURL)
}

// fail reports a token command's failure: the agent error format under
// --output json, exit code 2.
func (f outputFlag) fail(what string, err error) error {
	if f.Output == "json" {
		render.PrintJSON(httpapi.ErrorBody(err, ""))
	}
	return exitError{code: 2, err: fmt.Errorf("%s: %w", what, err)}
}

type tokenCreateCmd struct {
	tokenStoreFlags
	outputFlag
	Tenant string `help:"Tenant the token is scoped to (1-64 of A-Z a-z 0-9 _ -); for --admin, a label." required:""`
	Admin  bool   `help:"An admin token: every tenant's runs, events and control."`
}

// createdToken is what `token create` prints; the only place a token is
// ever shown.
type createdToken struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenantId"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"createdAt"`
	Token     string    `json:"token"`
}

func (c *tokenCreateCmd) Run(ctx context.Context) error {
	tok, rec, err := natsbus.IssueToken(c.Tenant, c.Admin, time.Now())
	if err != nil {
		return c.fail("token create", err)
	}
	st, err := c.open(ctx)
	if err != nil {
		return c.fail("token create", err)
	}
	defer st.Close()
	if err := st.CreateToken(ctx, rec); err != nil {
		return c.fail("token create", err)
	}
	out := createdToken{ID: rec.ID, TenantID: rec.TenantID, Admin: rec.Admin, CreatedAt: rec.CreatedAt.Truncate(time.Microsecond), Token: tok}
	if c.Output == "json" {
		// Not through printJSON: its redaction would hide the token.
		b, _ := json.MarshalIndent(out, "", "  ")
		_, err := os.Stdout.Write(append(b, '\n'))
		return err
	}
	kind := "tenant " + rec.TenantID
	if rec.Admin {
		kind = "admin (" + rec.TenantID + ")"
	}
	fmt.Printf("token id  %s\nscope     %s\ntoken     %s\n", rec.ID, kind, tok)
	fmt.Fprintln(os.Stderr, "Keep the token now: it is not shown again (the store keeps only its hash).")
	return nil
}

type tokenListCmd struct {
	tokenStoreFlags
	outputFlag
}

func (c *tokenListCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return c.fail("token list", err)
	}
	defer st.Close()
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return c.fail("token list", err)
	}
	return render.Tokens(c.Output, ts)
}

type tokenRevokeCmd struct {
	tokenStoreFlags
	outputFlag
	ID string `arg:"" help:"The token's id (from token create or token list)."`
}

func (c *tokenRevokeCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return c.fail("token revoke", err)
	}
	defer st.Close()
	t, err := st.RevokeToken(ctx, c.ID)
	if errors.Is(err, agent.ErrNotFound) {
		err = agent.Wrap(agent.ErrInvalidRequest, err, "no token %s", c.ID)
	}
	if err != nil {
		return c.fail("token revoke", err)
	}
	if c.Output == "json" {
		return render.PrintJSON(t)
	}
	fmt.Printf("token %s (tenant %s) revoked at %s\n", t.ID, t.TenantID, t.RevokedAt.Format(time.RFC3339))
	return nil
}

// natsConfigCmd prints the authorization block of a nats-server
// configuration for an external cluster (serve --nats-url).
type natsConfigCmd struct {
	tokenStoreFlags
	DaemonPassword string `help:"Password of the daemons' own NATS user (screengraph-agent); they connect with --nats-url nats://screengraph-agent:PASSWORD@host:port. Only its bcrypt hash is printed." name:"daemon-password" env:"SCREENGRAPH_NATS_DAEMON_PASSWORD" required:""`
}

func (c *natsConfigCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return exitError{code: 2, err: fmt.Errorf("nats-config: %w", err)}
	}
	defer st.Close()
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return exitError{code: 2, err: fmt.Errorf("nats-config: %w", err)}
	}
	dh, err := bcrypt.GenerateFromPassword([]byte(c.DaemonPassword), bcrypt.DefaultCost)
	if err != nil {
		return exitError{code: 2, err: fmt.Errorf("nats-config: %w", err)}
	}
	return natsbus.WriteAuthConfig(os.Stdout, string(dh), ts)
}
