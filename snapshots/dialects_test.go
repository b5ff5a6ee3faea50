package snapshots_test

import (
	"database/sql"
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
)

// pgOnlyTables are Postgres's tables the embedded store has no use for:
// run_publish, the runs' published positions that the fleet's relays
// claim and mark (migration 00015; the embedded store's one relay keeps
// the publish state on the event row and reads by its cursor).
var pgOnlyTables = map[string]bool{"run_publish": true}

// The same schema on both dialects: every (table, column) of the SQLite
// migration exists in Postgres and vice versa, but pgOnlyTables'.
func TestDialectsSameColumns(t *testing.T) {
	p := testenv.Postgres(t)
	e := testenv.Embedded(t)
	db, err := sql.Open("sqlite", e.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sqliteCols := map[string]bool{}
	// Every table of the SQLite schema (a table added to one dialect only is
	// what this test is for).
	var tables []string
	trows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'goose_db_version'`)
	if err != nil {
		t.Fatal(err)
	}
	for trows.Next() {
		var name string
		trows.Scan(&name)
		tables = append(tables, name)
	}
	trows.Close()
	for _, table := range tables {
		rows, err := db.Query(`SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c string
			rows.Scan(&c)
			sqliteCols[table+"."+c] = true
		}
		rows.Close()
	}
	pgCols := map[string]bool{}
	rows, err := p.Pool().Query(t.Context(), `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var table, c string
		rows.Scan(&table, &c)
		if !pgOnlyTables[table] {
			pgCols[table+"."+c] = true
		}
	}
	rows.Close()
	for c := range sqliteCols {
		if !pgCols[c] {
			t.Errorf("column %s in SQLite, not in Postgres", c)
		}
	}
	for c := range pgCols {
		if !sqliteCols[c] {
			t.Errorf("column %s in Postgres, not in SQLite", c)
		}
	}
	if len(pgCols) < 30 {
		t.Errorf("only %d Postgres columns found", len(pgCols))
	}
}
