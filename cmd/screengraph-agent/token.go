package main

// Tenancy: `token create|list|revoke` through the API's admin token routes,
// and `nats-config`. The token is printed once, by `token create`; the store
// keeps its SHA-256 (and a bcrypt hash for a generated nats-server
// configuration).

import (
	"context"
	"errors"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"

	"golang.org/x/crypto/bcrypt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
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
	return cli.ExitError{Code: 2, Err: fmt.Errorf("%s: %w", what, err)}
}

// tokenFlags locate the tokens' API: the daemon of --server, else the API
// served in this process over the store of --data-dir or --database-url
// (agentd.ServeLocal), as the runs commands do. No default daemon is
// probed: these commands make the first admin token, which no caller has
// yet.
type tokenFlags struct {
	tokenStoreFlags
	outputFlag
	Server string `help:"URL of a daemon whose API makes, lists and revokes the tokens (with an admin --token once tokens exist); default: the store of --data-dir or --database-url, served in this process." placeholder:"URL"`
}

// withTokens calls fn with the client of the tokens' API. A refusal of the
// in-process API is said as the store's (no daemon answered anything).
func (f tokenFlags) withTokens(ctx context.Context, what string, fn func(*client.Client) error) error {
	if f.Server != "" {
		if err := fn(newClient(f.Server)); err != nil {
			return f.failHTTP(what, err)
		}
		return nil
	}
	st, err := f.open(ctx)
	if err != nil {
		return f.fail(what, err)
	}
	cl, done, err := agentd.ServeLocal(st)
	if err != nil {
		st.Close()
		return f.fail(what, err)
	}
	defer done()
	if err := fn(cl); err != nil {
		return f.fail(what, render.LocalError(err))
	}
	return nil
}

type tokenCreateCmd struct {
	tokenFlags
	Tenant string `help:"Tenant the token is scoped to (1-64 of A-Z a-z 0-9 _ -); for --admin, a label." required:""`
	Admin  bool   `help:"An admin token: every tenant's runs, events and control."`
}

func (c *tokenCreateCmd) Run(ctx context.Context) error {
	// Checked before anything is opened: the flag's name in the message.
	if !agent.ValidTenantID(c.Tenant) {
		return c.fail("token create", agent.InvalidTenantID("--tenant", c.Tenant))
	}
	return c.withTokens(ctx, "token create", func(cl *client.Client) error {
		t, err := cl.CreateToken(ctx, c.Tenant, c.Admin)
		if err != nil {
			return err
		}
		return render.CreatedToken(c.Output, t)
	})
}

type tokenListCmd struct {
	tokenFlags
}

func (c *tokenListCmd) Run(ctx context.Context) error {
	return c.withTokens(ctx, "token list", func(cl *client.Client) error {
		ts, err := cl.Tokens(ctx)
		if err != nil {
			return err
		}
		return render.Tokens(c.Output, ts)
	})
}

type tokenRevokeCmd struct {
	tokenFlags
	ID string `arg:"" help:"The token's id (from token create or token list)."`
}

func (c *tokenRevokeCmd) Run(ctx context.Context) error {
	return c.withTokens(ctx, "token revoke", func(cl *client.Client) error {
		t, err := cl.RevokeToken(ctx, c.ID)
		if errors.Is(err, agent.ErrNotFound) {
			return agent.Wrap(agent.ErrInvalidRequest, errors.New(render.LocalMessage(err)), "no token %s", c.ID)
		}
		if err != nil {
			return err
		}
		return render.RevokedToken(c.Output, t)
	})
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
		return cli.ExitError{Code: 2, Err: fmt.Errorf("nats-config: %w", err)}
	}
	defer st.Close()
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return cli.ExitError{Code: 2, Err: fmt.Errorf("nats-config: %w", err)}
	}
	dh, err := bcrypt.GenerateFromPassword([]byte(c.DaemonPassword), bcrypt.DefaultCost)
	if err != nil {
		return cli.ExitError{Code: 2, Err: fmt.Errorf("nats-config: %w", err)}
	}
	return natsbus.WriteAuthConfig(os.Stdout, string(dh), ts)
}
