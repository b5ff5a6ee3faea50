package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store { return testenv.Embedded(t) })
}

func TestEmbeddedReopenKeepsDataAndMigratesOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sub", "agent.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := storetest.NewRun("T", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}

	s2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if evs, err := s2.Events(ctx, agent.Admin(), r.RunID, 0); err != nil || len(evs) != 3 {
		t.Errorf("after reopen: %d events, %v", len(evs), err)
	}
	// The read-only view sees the data and refuses writes.
	ro, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if sn, err := ro.LatestSnapshot(ctx, agent.Admin(), r.RunID); err != nil || sn.NodeName != "EnsureDevice" {
		t.Errorf("read-only LatestSnapshot = %+v, %v", sn, err)
	}
	if err := ro.PutKV(ctx, "k", []byte("v")); !errors.Is(err, snapshots.ErrReadOnly) {
		t.Errorf("read-only PutKV = %v, want ErrReadOnly", err)
	}
	if _, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "missing.db"), sqlite.Options{ReadOnly: true}); err == nil {
		t.Error("read-only open of a missing file succeeded")
	}
}

func TestEmbeddedPragmas(t *testing.T) {
	s := testenv.Embedded(t)
	db, err := sql.Open("sqlite", s.Path()) // the driver snapshots registers
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	v, err := migrations.Version(t.Context(), db, migrations.SQLite)
	if want := latestMigration(t, migrations.SQLite); err != nil || v != want {
		t.Errorf("schema version = %d, %v; want %d (the newest migration)", v, err, want)
	}
}

func TestDataDirXDG(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/xdg/data")
	if d, err := sqlite.DataDir(); err != nil || d != "/xdg/data/screengraph-agent" {
		t.Errorf("DataDir = %q, %v", d, err)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	if p, err := sqlite.DefaultEmbeddedPath(); err != nil || p != "/home/u/.local/share/screengraph-agent/agent.db" {
		t.Errorf("DefaultEmbeddedPath = %q, %v", p, err)
	}
}

func openSQLite(path string) (*sql.DB, error) { return sql.Open("sqlite", path) }

// The store's files are the daemon's own: 0600 whatever the umask, and an
// existing 0644 database (an older version's) is tightened on open.
func TestEmbeddedFilesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRun(context.Background(), agent.Run{RunID: "01J00000000000000000000000", TenantID: "t", Status: agent.RunPending, Graph: "setup", Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %o, want 600", filepath.Base(p), st.Mode().Perm())
			}
		}
	}
	check()
	s.Close()
	os.Chmod(path, 0o644)
	s, err = sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check()
}

// latestMigration is the highest version among d's migration files
// (0000N_name.sql), so the test follows new migrations.
func latestMigration(t *testing.T, d migrations.Dialect) int64 {
	t.Helper()
	fsys, err := migrations.FS(d)
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migration files: %v, %v", names, err)
	}
	var newest int64
	for _, n := range names {
		v, err := strconv.ParseInt(strings.SplitN(n, "_", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("migration file %s: %v", n, err)
		}
		if v > newest {
			newest = v
		}
	}
	return newest
}
