package snapshots_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// oldSchema is the last schema that wrote each event three times
// (run_events.payload, run_events.envelope, run_outbox.body); rowidSchema the
// last with run_events and agent_state_snapshot as rowid tables plus a key
// index each (migration 00010 stores them WITHOUT ROWID on SQLite).
const (
	oldSchema   = 8
	rowidSchema = 9
)

// oldStore is what the migration test reads back through the new code.
type oldStore interface {
	agent.Store
	agent.ParkedLister
	OutboxCounts(ctx context.Context) (unpublished, parked int64, err error)
	Close() error
}

// fillOldSchema writes, with the statements of schema version (oldSchema or
// rowidSchema; ph: the dialect's placeholder), a run with four events: the
// first published, the second parked, the last two waiting in the outbox;
// and step 0's snapshot. It returns the run and its events' envelopes as the
// old code marshalled them.
func fillOldSchema(t *testing.T, db *sql.DB, ph func(int) string, ts string, version int) (agent.Run, []agent.Event, [][]byte) {
	t.Helper()
	p := func(n int) string {
		s := ""
		for i := 1; i <= n; i++ {
			if i > 1 {
				s += ", "
			}
			s += ph(i)
		}
		return s
	}
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	mustExecArgs(t, db, `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at) VALUES (`+p(10)+`)`,
		r.RunID, r.TenantID, r.ProjectID, string(agent.RunRunning), r.Serial, r.Graph, string(r.Input), r.PolicyVersion, ts, ts)
	step := storetest.NodeStep(r, 1, 0, "EnsureDevice")
	events := append(step.Events, storetest.Event(r, 4, agent.KindRunStarted, `{"note":"<&> \u00e9"}`))
	var envs [][]byte
	for i, e := range events {
		env, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
		subject := fmt.Sprintf("agent.events.%s.%s", e.TenantID, e.RunID)
		if version >= rowidSchema {
			// Schema 9 (00009): the envelope is the event's one copy, the
			// outbox row points at it.
			mustExecArgs(t, db, `INSERT INTO run_events (run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal) VALUES (`+p(8)+`)`,
				e.RunID, e.Sequence, e.EventID, e.Kind, e.TS, e.Checksum, env, 0)
			switch i {
			case 0:
				mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, published_at) VALUES (`+p(5)+`)`, e.RunID, e.Sequence, e.EventID, subject, ts)
			case 1:
				mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, published_at, parked_at, parked_reason) VALUES (`+p(7)+`)`,
					e.RunID, e.Sequence, e.EventID, subject, ts, ts, "too big")
			default:
				mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject) VALUES (`+p(4)+`)`, e.RunID, e.Sequence, e.EventID, subject)
			}
			continue
		}
		mustExecArgs(t, db, `INSERT INTO run_events (run_id, sequence, event_id, kind, ts, payload, checksum, envelope, step_ordinal) VALUES (`+p(9)+`)`,
			e.RunID, e.Sequence, e.EventID, e.Kind, e.TS, string(e.Payload), e.Checksum, env, 0)
		switch i {
		case 0:
			mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, body, published_at) VALUES (`+p(6)+`)`, e.RunID, e.Sequence, e.EventID, subject, env, ts)
		case 1:
			mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, body, published_at, parked_at, parked_reason) VALUES (`+p(8)+`)`,
				e.RunID, e.Sequence, e.EventID, subject, env, ts, ts, "too big")
		default:
			mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, body) VALUES (`+p(5)+`)`, e.RunID, e.Sequence, e.EventID, subject, env)
		}
	}
	sn := step.Snapshot
	mustExecArgs(t, db, `INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at) VALUES (`+p(6)+`)`,
		sn.RunID, sn.StepOrdinal, sn.NodeName, sn.ResumeToken, string(sn.State), ts)
	return r, events, envs
}

// sameJSON: a and b are the same JSON value (Postgres's JSONB respaces
// what it stores).
func sameJSON(a, b []byte) bool {
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}

func mustExecArgs(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// checkCarriedOver reads the old schema's rows back through the new store
// (migration 00009 applied at its Open): the events byte for byte, the
// outbox's waiting rows with their bodies (now the events' envelopes), the
// parked row with its size; and the run goes on committing.
func checkCarriedOver(t *testing.T, s oldStore, r agent.Run, events []agent.Event, envs [][]byte) {
	t.Helper()
	ctx := t.Context()
	sn, err := s.LatestSnapshot(ctx, agent.Admin(), r.RunID)
	want := storetest.NodeStep(r, 1, 0, "EnsureDevice").Snapshot
	if err != nil || sn.StepOrdinal != 0 || sn.NodeName != want.NodeName || len(sn.ResumeToken) != len(want.ResumeToken) || !sameJSON(sn.State, want.State) || sn.CreatedAt.IsZero() {
		t.Errorf("LatestSnapshot = %+v, %v; want step 0 of EnsureDevice with state %s", sn, err, want.State)
	}
	got, err := s.Events(ctx, agent.Admin(), r.RunID, 0)
	if err != nil || len(got) != len(events) {
		t.Fatalf("Events = %d, %v; want %d", len(got), err, len(events))
	}
	for i, e := range got {
		if env, _ := json.Marshal(e); !bytes.Equal(env, envs[i]) {
			t.Errorf("event %d = %s, want %s", i+1, env, envs[i])
		}
	}
	rows, err := s.Unpublished(ctx, 10)
	if err != nil || len(rows) != 2 {
		t.Fatalf("Unpublished = %v, %v; want events 3 and 4", rows, err)
	}
	for i, o := range rows {
		want := events[2+i]
		if o.Sequence != want.Sequence || o.EventID != want.EventID || !bytes.Equal(o.Body, envs[2+i]) ||
			o.Subject != fmt.Sprintf("agent.events.%s.%s", want.TenantID, want.RunID) {
			t.Errorf("outbox row %d = %d %s %s %s; want %d %s with body %s", i, o.Sequence, o.EventID, o.Subject, o.Body, want.Sequence, want.EventID, envs[2+i])
		}
	}
	parked, err := s.ParkedEvents(ctx, 10)
	if err != nil || len(parked) != 1 || parked[0].Sequence != 2 || parked[0].Bytes != len(envs[1]) || parked[0].Reason != "too big" {
		t.Errorf("ParkedEvents = %+v, %v; want event 2, %d bytes, too big", parked, err, len(envs[1]))
	}
	if u, p, err := s.OutboxCounts(ctx); err != nil || u != 2 || p != 1 {
		t.Errorf("OutboxCounts = %d, %d, %v; want 2, 1", u, p, err)
	}
	if err := s.MarkPublished(ctx, r.RunID, 3); err != nil {
		t.Errorf("MarkPublished(3): %v", err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(r, 5, 1, "ProvisionApp")); err != nil {
		t.Fatalf("CommitStep after the migration: %v", err)
	}
	if rows, err := s.Unpublished(ctx, 10); err != nil || len(rows) != 4 || rows[0].Sequence != 4 || rows[3].Sequence != 7 {
		t.Errorf("Unpublished after a new step = %d rows, %v; want 4..7", len(rows), err)
	}
	// The keys still refuse what they refused (the conflict mapping reads
	// their error text or constraint name).
	if err := s.CommitStep(ctx, storetest.NodeStep(r, 5, 2, "LaunchOrAttach")); !errors.Is(err, agent.ErrSequenceTaken) {
		t.Errorf("CommitStep of sequences 5..7 again = %v, want ErrSequenceTaken", err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(r, 8, 1, "ProvisionApp")); !errors.Is(err, snapshots.ErrSnapshotTaken) {
		t.Errorf("CommitStep of step 1 again = %v, want ErrSnapshotTaken", err)
	}
}

// Issue 26 part 1: a database written by the old schema (each event three
// times) is carried over by migration 00009, on both stores.
func TestEventsOnceMigrationSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db := dbAt(t, migrations.SQLite, path, oldSchema)
	r, events, envs := fillOldSchema(t, db, func(int) string { return "?" }, "2026-11-28T10:00:00.000000Z", oldSchema)
	db.Close()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
}

func TestEventsOnceMigrationPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	db := dbAt(t, migrations.Postgres, url, oldSchema)
	r, events, envs := fillOldSchema(t, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "2026-11-28T10:00:00Z", oldSchema)
	db.Close()
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
}

// Issue 26 part 1, second step: a database written at schema 9
// (agent_state_snapshot a rowid table with its key's index) is carried over
// by migration 00010 (SQLite: WITHOUT ROWID on its key), rows and keys
// intact.
func TestKeyedTablesMigrationSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db := dbAt(t, migrations.SQLite, path, rowidSchema)
	r, events, envs := fillOldSchema(t, db, func(int) string { return "?" }, "2026-11-28T10:00:00.000000Z", rowidSchema)
	db.Close()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
	s.Close()
	// The snapshot stored once, in its key's B-tree: no rowid tree beside
	// an index of the key. run_events keeps its rowid (appends are cheaper
	// there; see the migration).
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ddl string
	if err := db.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'agent_state_snapshot'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(strings.TrimSpace(ddl), "WITHOUT ROWID") {
		t.Errorf("agent_state_snapshot is stored with a rowid: %s", ddl)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'agent_state_snapshot'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("agent_state_snapshot has %d indexes, %v; want none beside its key's tree", n, err)
	}
}

func TestKeyedTablesMigrationPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	db := dbAt(t, migrations.Postgres, url, rowidSchema)
	r, events, envs := fillOldSchema(t, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "2026-11-28T10:00:00Z", rowidSchema)
	db.Close()
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
}

// publishStateSchema is the last schema with a run_outbox table beside
// run_events (00012 moves the publish state onto the event row).
const publishStateSchema = 11

// fillOutboxSchema fills a database at schema 11 as fillOldSchema does and
// adds, for the waiting event 3, an older outbox row already published (a
// sequence enqueued again): the event must come out unpublished, once.
func fillOutboxSchema(t *testing.T, db *sql.DB, ph func(int) string, ts string) (agent.Run, []agent.Event, [][]byte) {
	t.Helper()
	r, events, envs := fillOldSchema(t, db, ph, ts, publishStateSchema)
	e := events[2]
	mustExecArgs(t, db, `INSERT INTO run_outbox (run_id, sequence, event_id, subject, published_at) VALUES (`+ph(1)+`, `+ph(2)+`, `+ph(3)+`, `+ph(4)+`, `+ph(5)+`)`,
		e.RunID, e.Sequence, e.EventID, fmt.Sprintf("agent.events.%s.%s", e.TenantID, e.RunID), ts)
	return r, events, envs
}

// Issue 26 part 1, third step: a database written at schema 11 (events
// with an outbox table pointing at them) is carried over by migration 00012
// (the publish state on the event row), on both stores: the waiting events
// (one of them with a published row beside its waiting one) wait once, the
// published and parked ones do not, the parked one keeps its reason.
func TestEventPublishStateMigrationSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db := dbAt(t, migrations.SQLite, path, publishStateSchema)
	r, events, envs := fillOutboxSchema(t, db, func(int) string { return "?" }, "2026-11-28T10:00:00.000000Z")
	db.Close()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
	s.Close()
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names := queryStrings(t, db, `SELECT name FROM sqlite_master WHERE (type = 'index' AND tbl_name = 'run_events') OR name = 'run_outbox' ORDER BY name`)
	// sqlite_autoindex_run_events_1 is (run_id, sequence); 00014 dropped
	// the event_id key (autoindex 2 until then) and run_events_unpublished
	// (the relay's position is stored instead).
	want := []string{"run_events_parked", "sqlite_autoindex_run_events_1"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("run_events' indexes and run_outbox: %v, want %v", names, want)
	}
}

func TestEventPublishStateMigrationPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	db := dbAt(t, migrations.Postgres, url, publishStateSchema)
	r, events, envs := fillOutboxSchema(t, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "2026-11-28T10:00:00Z")
	db.Close()
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkCarriedOver(t, s, r, events, envs)
	var outbox *string
	if err := s.Pool().QueryRow(t.Context(), `SELECT to_regclass('run_outbox')::text`).Scan(&outbox); err != nil || outbox != nil {
		t.Errorf("run_outbox after 00012: %v, %v; want gone", outbox, err)
	}
}
