package snapshots_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// A real Postgres from Debian's postgresql package (snapshots/pgtest),
// started once per test binary on its own port and directory.
var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pg.srv != nil {
		pg.srv.Close()
	}
	os.Exit(code)
}

// newPostgresURL creates a fresh database and returns its URL.
func newPostgresURL(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.err = pgtest.Start("") })
	if pg.err != nil {
		t.Fatalf("no Postgres: %v", pg.err)
	}
	url, err := pg.srv.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return url
}

func newPostgres(t testing.TB) *snapshots.Postgres {
	t.Helper()
	s, err := snapshots.OpenPostgres(context.Background(), newPostgresURL(t), snapshots.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPostgresContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store { return newPostgres(t) })
}

// Two daemons opening the same database at once migrate it once; a reopen
// is a no-op; a commit through one store wakes the other's relay (NOTIFY).
func TestPostgresMigrateConcurrentlyAndNotify(t *testing.T) {
	url := newPostgresURL(t)
	var (
		wg     sync.WaitGroup
		stores [3]*snapshots.Postgres
		errs   [3]error
	)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = snapshots.OpenPostgres(context.Background(), url, snapshots.PostgresOptions{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	for _, v := range []int{1, 2} {
		var n int
		if err := stores[0].Pool().QueryRow(t.Context(), `SELECT count(*) FROM goose_db_version WHERE version_id = $1`, v).Scan(&n); err != nil || n != 1 {
			t.Errorf("migration %d recorded %d times (%v), want once", v, n, err)
		}
	}
	a, b := stores[0], stores[1]
	// Drain the wake-up each listener sends when it starts listening.
	time.Sleep(200 * time.Millisecond)
	select {
	case <-b.Commits():
	default:
	}
	r := storetest.NewRun("T", "emulator-5554")
	if err := a.CreateRun(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := a.CommitStep(t.Context(), storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Commits():
	case <-time.After(5 * time.Second):
		t.Fatal("a commit through store a did not wake store b (LISTEN/NOTIFY)")
	}
}

// The same schema on both dialects: every (table, column) of the SQLite
// migration exists in Postgres and vice versa.
func TestDialectsSameColumns(t *testing.T) {
	p := newPostgres(t)
	e := newEmbedded(t)
	db, err := openSQLite(e.Path())
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
	rows, err := p.Pool().Query(t.Context(), `SELECT table_name || '.' || column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		rows.Scan(&c)
		pgCols[c] = true
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
