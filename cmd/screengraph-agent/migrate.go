package main

import (
	"context"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

type migrateCmd struct {
	DatabaseURL string `help:"Postgres to migrate (a postgres:// URL or libpq keyword/value pairs); also database-url in --config or SCREENGRAPH_DATABASE_URL." name:"database-url"`
	Config      string `help:"Config file (YAML or JSON), as serve's." type:"existingfile"`
	Output      string `help:"Output format: text or json." default:"text" enum:"text,json"`
}

// Run applies the embedded migrations; serve also does at start.
func (c *migrateCmd) Run(ctx context.Context) error {
	fail := func(err error) error {
		if c.Output == "json" {
			render.PrintJSON(httpapi.ErrorBody(err, ""))
		}
		return cli.ExitError{Code: 2, Err: err}
	}
	cfg, err := (&serveCmd{Config: c.Config, DatabaseURL: c.DatabaseURL}).load()
	if err != nil {
		return fail(err)
	}
	if cfg.DatabaseURL == "" {
		return fail(agent.Errorf(agent.ErrInvalidRequest, "migrate needs --database-url (or database-url in --config, or SCREENGRAPH_DATABASE_URL)"))
	}
	res, err := postgres.Migrate(ctx, cfg.DatabaseURL)
	if err != nil {
		return fail(agent.Wrap(agent.ErrNetwork, err, "migrating %s", postgres.RedactConnString(cfg.DatabaseURL)))
	}
	return render.Migrated(c.Output, res)
}
