package snapshots_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// A real Postgres from Debian's postgresql package, started once per test
// binary on its own port and directory, as the postgres user when the tests
// run as root (postgres refuses to run as root). Fails when not installed:
// tools/setup.sh installs it.
var pg struct {
	once  sync.Once
	dir   string
	port  int
	bin   string
	asPG  bool
	err   error
	dbSeq atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	stopPostgres()
	os.Exit(code)
}

func pgCmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(pg.bin, name)
	if pg.asPG {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func startPostgres() {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		pg.err = fmt.Errorf("postgres not installed (/usr/lib/postgresql/*/bin/initdb)")
		return
	}
	pg.bin = filepath.Dir(bins[len(bins)-1])
	if u, _ := user.Current(); u != nil && u.Uid == "0" {
		pg.asPG = true
	}
	dir, err := os.MkdirTemp("", "screengraph-pg-")
	if err != nil {
		pg.err = err
		return
	}
	pg.dir = dir
	if pg.asPG {
		pu, err := user.Lookup("postgres")
		if err != nil {
			pg.err = err
			return
		}
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			pg.err = err
			return
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pg.err = err
		return
	}
	pg.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	data := filepath.Join(dir, "data")
	if out, err := pgCmd("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		pg.err = fmt.Errorf("initdb: %v\n%s", err, out)
		return
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", pg.port, dir)
	if out, err := pgCmd("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "30", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		pg.err = fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

func stopPostgres() {
	if pg.dir == "" {
		return
	}
	pgCmd("pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(pg.dir)
}

// newPostgresURL creates a fresh database and returns its URL.
func newPostgresURL(t testing.TB) string {
	t.Helper()
	pg.once.Do(startPostgres)
	if pg.err != nil {
		t.Fatalf("no Postgres: %v", pg.err)
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("t%d_%d", os.Getpid(), pg.dbSeq.Add(1))
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, name)
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
	for _, table := range []string{"runs", "run_events", "run_outbox", "agent_state_snapshot", "run_control", "agent_kv", "device_leases", "api_tokens"} {
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
