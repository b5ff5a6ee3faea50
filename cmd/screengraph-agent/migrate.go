package main

import (
	"context"
	"fmt"
	"os"
	"strings"

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
		return exitError{code: 2, err: err}
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
	if c.Output == "json" {
		render.PrintJSON(res)
		return nil
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(os.Stdout, "schema current at version %d\n", res.Version)
		return nil
	}
	vs := make([]string, len(res.Applied))
	for i, v := range res.Applied {
		vs[i] = fmt.Sprint(v)
	}
	fmt.Fprintf(os.Stdout, "applied %s; schema at version %d\n", strings.Join(vs, ", "), res.Version)
	return nil
}
