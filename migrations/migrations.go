// Package migrations holds the SQL schema of the agent store, embedded in the
// binary, one directory per dialect (sqlite/ for the embedded default,
// postgres/ for fleet mode), applied with goose's Provider API. Both
// directories define the same tables, columns and constraints; only the
// column types differ.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Dialect names a migrations directory.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// FS returns the migration files of a dialect (NNNNN_name.sql, goose annotations).
func FS(d Dialect) (fs.FS, error) {
	switch d {
	case SQLite, Postgres:
		return fs.Sub(files, string(d))
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q", d)
}

// NewProvider returns a goose Provider over db for dialect d. On Postgres it
// takes a session advisory lock, so daemons starting together migrate once.
// The version table is goose_db_version.
func NewProvider(db *sql.DB, d Dialect) (*goose.Provider, error) {
	fsys, err := FS(d)
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	var gd goose.Dialect
	switch d {
	case SQLite:
		gd = goose.DialectSQLite3
	case Postgres:
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(gd, db, fsys, opts...)
}

// Up applies every pending migration and returns the versions it applied
// (none when the schema is current: a re-run is a no-op).
func Up(ctx context.Context, db *sql.DB, d Dialect) ([]int64, error) {
	p, err := NewProvider(db, d)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up (%s): %w", d, err)
	}
	applied := make([]int64, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// Version is the schema version recorded in db (0 before any migration).
func Version(ctx context.Context, db *sql.DB, d Dialect) (int64, error) {
	p, err := NewProvider(db, d)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

// UpTo applies the pending migrations up to and including version: tests
// fill a database written by an older schema, then Up carries it over.
func UpTo(ctx context.Context, db *sql.DB, d Dialect, version int64) error {
	p, err := NewProvider(db, d)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrations: up to %d (%s): %w", version, d, err)
	}
	return nil
}
