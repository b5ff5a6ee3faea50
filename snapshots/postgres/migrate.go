package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/screengraph/screengraph-agent/migrations"
)

// MigrateResult is what Migrate did: the versions it applied (none
// when the schema was current) and the schema version now.
type MigrateResult struct {
	Applied []int64 `json:"applied"`
	Version int64   `json:"version"`
}

// Migrate applies the embedded Postgres migrations to the database
// at url under goose's session advisory lock (daemons and `migrate` running
// together migrate once). Errors: the database unreachable, or a migration
// failing (its transaction rolled back, later ones not applied).
func Migrate(ctx context.Context, url string) (MigrateResult, error) {
	pool, err := newPool(ctx, url)
	if err != nil {
		return MigrateResult{}, fmt.Errorf("snapshots: postgres: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return MigrateResult{}, fmt.Errorf("snapshots: postgres: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	applied, err := migrations.Up(ctx, db, migrations.Postgres)
	if err != nil {
		return MigrateResult{Applied: applied}, err
	}
	p, err := migrations.NewProvider(db, migrations.Postgres)
	if err != nil {
		return MigrateResult{Applied: applied}, err
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrateResult{Applied: applied}, fmt.Errorf("snapshots: schema version: %w", err)
	}
	if applied == nil {
		applied = []int64{}
	}
	return MigrateResult{Applied: applied, Version: v}, nil
}
