package snapshots_test

import (
	"database/sql"
	"testing"

	"github.com/screengraph/screengraph-agent/migrations"
)

// dbAt opens the database at source (a SQLite file path or a Postgres
// URL) through dialect d's driver and migrates it up to version: a
// database as that schema left it, for a migration test to fill with
// that schema's own statements. The caller closes it.
func dbAt(t *testing.T, d migrations.Dialect, source string, version int64) *sql.DB {
	t.Helper()
	driver := "sqlite"
	if d == migrations.Postgres {
		driver = "pgx"
	}
	db, err := sql.Open(driver, source)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.UpTo(t.Context(), db, d, version); err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db
}

// queryStrings returns the one text column of q's rows, in order.
func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
