package migrations_test

import (
	"database/sql"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/screengraph/screengraph-agent/migrations"
)

func TestSQLiteUpTwiceIsNoOp(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	applied, err := migrations.Up(ctx, db, migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(applied, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Errorf("first Up applied %v, want [1 ... 15]", applied)
	}
	again, err := migrations.Up(ctx, db, migrations.SQLite)
	if err != nil || len(again) != 0 {
		t.Errorf("second Up applied %v, %v; want nothing", again, err)
	}
	if v, err := migrations.Version(ctx, db, migrations.SQLite); err != nil || v != applied[len(applied)-1] {
		t.Errorf("Version = %d, %v; want %d (the last migration)", v, err, applied[len(applied)-1])
	}
	for _, table := range []string{"runs", "run_events", "agent_state_snapshot", "run_control", "agent_kv", "device_leases", "api_tokens", "device_sightings"} {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s: %d, %v", table, n, err)
		}
	}
	// The outbox is the events' own publish state (00012): no table of its own.
	var outbox int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'run_outbox'`).Scan(&outbox); err != nil || outbox != 0 {
		t.Errorf("run_outbox: %d, %v; want none", outbox, err)
	}
	mustExec(t, db, `INSERT INTO runs (run_id, tenant_id, status, created_at, updated_at) VALUES ('r', 't', 'PENDING', 'x', 'x')`)
	mustExec(t, db, `INSERT INTO run_events (run_id, sequence, event_id, envelope) VALUES ('r', 1, 'e1', '{}')`)
	if _, err := db.Exec(`INSERT INTO run_events (run_id, sequence, event_id, envelope) VALUES ('r', 1, 'e2', '{}')`); err == nil {
		t.Error("run_events accepted (r, 1) twice")
	}
	// Parked events (00005, 00012): out of the queue, with their reason.
	mustExec(t, db, `UPDATE run_events SET published_at = 'x', parked_at = 'x', parked_reason = 'too big' WHERE run_id = 'r' AND published_at IS NULL`)
	// One active lease per device (partial unique index on the device key);
	// released ones are history; one serial on two hosts is two devices;
	// fencing tokens grow.
	mustExec(t, db, `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at, released_at, release_reason) VALUES ('h1/d', 'd', 'h', 'r', 'x', 'x', 'x', 'x', 'finished')`)
	mustExec(t, db, `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES ('h1/d', 'd', 'h', 'r', 'x', 'x', 'x')`)
	if _, err := db.Exec(`INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES ('h1/d', 'd', 'h2', 'r2', 'x', 'x', 'x')`); err == nil {
		t.Error("a second active lease of device h1/d was accepted")
	}
	mustExec(t, db, `INSERT INTO device_leases (device, serial, holder, run_id, acquired_at, renewed_at, expires_at) VALUES ('h2/d', 'd', 'h', 'r3', 'x', 'x', 'x')`)
	var tokens []int64
	rows, err := db.Query(`SELECT fencing_token FROM device_leases ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tok int64
		rows.Scan(&tok)
		tokens = append(tokens, tok)
	}
	rows.Close()
	if !slices.Equal(tokens, []int64{1, 2, 3}) {
		t.Errorf("fencing tokens %v, want [1 2 3] (the refused insert takes none)", tokens)
	}
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Both dialects carry the same migration versions and names.
func TestDialectsInStep(t *testing.T) {
	names := func(d migrations.Dialect) []string {
		fsys, err := migrations.FS(d)
		if err != nil {
			t.Fatal(err)
		}
		m, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	s, p := names(migrations.SQLite), names(migrations.Postgres)
	if len(s) == 0 || !slices.Equal(s, p) {
		t.Errorf("sqlite migrations %v, postgres %v: must match", s, p)
	}
	if _, err := migrations.FS("mysql"); err == nil {
		t.Error("FS(mysql) = nil error")
	}
}
