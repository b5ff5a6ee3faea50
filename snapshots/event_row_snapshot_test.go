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
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// snapshotTableSchema is the last schema with every step's snapshot in
// agent_state_snapshot and an event_id key on run_events (00014 puts the
// snapshot on the step's last event row and drops the key).
const snapshotTableSchema = 13

// schema13 is what fillSchema13 wrote: the run, its events and their
// envelopes as the old code marshalled them, and the three snapshots.
type schema13 struct {
	run    agent.Run
	events []agent.Event
	envs   [][]byte
	snaps  []*agent.Snapshot
}

// fillSchema13 writes, with schema 13's own statements (those of
// snapshots/{sqlite,postgres} at that schema: run_events with kind, ts and
// checksum, agent_state_snapshot), a run with step 0 (events 1-3, the first
// published, the second parked) and step 1 (events 4-6, waiting) and their
// snapshots, and a snapshot of step 2, committed without events.
func fillSchema13(t *testing.T, db *sql.DB, ph func(int) string, ts string) schema13 {
	t.Helper()
	p := func(n int) string {
		s := ph(1)
		for i := 2; i <= n; i++ {
			s += ", " + ph(i)
		}
		return s
	}
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	mustExecArgs(t, db, `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at) VALUES (`+p(10)+`)`,
		r.RunID, r.TenantID, r.ProjectID, string(agent.RunRunning), r.Serial, r.Graph, string(r.Input), r.PolicyVersion, ts, ts)
	f := schema13{run: r}
	for step, node := range []string{"EnsureDevice", "ProvisionApp"} {
		st := storetest.NodeStep(r, int64(1+3*step), step, node)
		for _, e := range st.Events {
			env, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			f.events, f.envs = append(f.events, e), append(f.envs, env)
			// The envelope as each store bound it: text on SQLite, bytea on
			// Postgres (both accept []byte).
			mustExecArgs(t, db, `INSERT INTO run_events (run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal) VALUES (`+p(8)+`)`,
				e.RunID, e.Sequence, e.EventID, e.Kind, e.TS, e.Checksum, env, step)
		}
		f.snaps = append(f.snaps, st.Snapshot)
	}
	f.snaps = append(f.snaps, storetest.NodeStep(r, 7, 2, "LaunchOrAttach").Snapshot)
	for _, sn := range f.snaps {
		mustExecArgs(t, db, `INSERT INTO agent_state_snapshot (run_id, step_ordinal, node_name, resume_token, state, created_at) VALUES (`+p(6)+`)`,
			sn.RunID, sn.StepOrdinal, sn.NodeName, sn.ResumeToken, string(sn.State), ts)
	}
	mustExecArgs(t, db, `UPDATE run_events SET published_at = `+ph(1)+` WHERE sequence = 1`, ts)
	mustExecArgs(t, db, `UPDATE run_events SET published_at = `+ph(1)+`, parked_at = `+ph(2)+`, parked_reason = 'too big' WHERE sequence = 2`, ts, ts)
	return f
}

// check13CarriedOver reads schema 13's rows back through the new store
// (00014 applied at its Open): every snapshot, from the event rows or the
// table; the events byte for byte, each step's own; the publish state; and
// the run goes on committing, its keys refusing what they refused.
func check13CarriedOver(t *testing.T, s oldStore, f schema13) {
	t.Helper()
	ctx := t.Context()
	for _, want := range f.snaps {
		sn, err := s.Snapshot(ctx, agent.Admin(), f.run.RunID, want.StepOrdinal)
		if err != nil || sn.NodeName != want.NodeName || sn.ResumeToken != want.ResumeToken || !sameJSON(sn.State, want.State) || sn.CreatedAt.IsZero() {
			t.Errorf("Snapshot(%d) = %+v, %v; want %s with token %s", want.StepOrdinal, sn, err, want.NodeName, want.ResumeToken)
		}
	}
	if sn, err := s.LatestSnapshot(ctx, agent.Admin(), f.run.RunID); err != nil || sn.StepOrdinal != 2 || sn.NodeName != "LaunchOrAttach" {
		t.Errorf("LatestSnapshot = %+v, %v; want step 2 (the one without events)", sn, err)
	}
	got, err := s.Events(ctx, agent.Admin(), f.run.RunID, 0)
	if err != nil || len(got) != len(f.events) {
		t.Fatalf("Events = %d, %v; want %d", len(got), err, len(f.events))
	}
	for i, e := range got {
		if env, _ := json.Marshal(e); !bytes.Equal(env, f.envs[i]) {
			t.Errorf("event %d = %s, want %s", i+1, env, f.envs[i])
		}
	}
	se := s.(snapshots.StepEventer)
	for step, want := range [][]int64{{1, 2, 3}, {4, 5, 6}, nil} {
		evs, err := se.StepEvents(ctx, f.run.RunID, step)
		var seqs []int64
		for _, e := range evs {
			seqs = append(seqs, e.Sequence)
		}
		if err != nil || !reflect.DeepEqual(seqs, want) {
			t.Errorf("StepEvents(%d) = %v, %v; want %v", step, seqs, err, want)
		}
	}
	if rows, err := s.Unpublished(ctx, 10); err != nil || len(rows) != 4 || rows[0].Sequence != 3 {
		t.Errorf("Unpublished = %d rows, %v; want events 3..6", len(rows), err)
	}
	if u, p, err := s.OutboxCounts(ctx); err != nil || u != 4 || p != 1 {
		t.Errorf("OutboxCounts = %d, %d, %v; want 4, 1", u, p, err)
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(f.run, 7, 3, "WaitIdle")); err != nil {
		t.Fatalf("CommitStep of step 3 after the migration: %v", err)
	}
	if sn, err := s.LatestSnapshot(ctx, agent.Admin(), f.run.RunID); err != nil || sn.StepOrdinal != 3 {
		t.Errorf("LatestSnapshot after step 3 = %+v, %v", sn, err)
	}
	for _, step := range []int{0, 1, 2, 3} {
		if err := s.CommitStep(ctx, storetest.NodeStep(f.run, 10, step, "WaitIdle")); !errors.Is(err, snapshots.ErrSnapshotTaken) {
			t.Errorf("CommitStep of step %d again = %v, want ErrSnapshotTaken", step, err)
		}
	}
	if err := s.CommitStep(ctx, storetest.NodeStep(f.run, 7, 4, "WaitIdle")); !errors.Is(err, agent.ErrSequenceTaken) {
		t.Errorf("CommitStep of sequences 7..9 again = %v, want ErrSequenceTaken", err)
	}
}

// snapshotPlaces reads where each snapshot is stored: the sequences of the
// event rows carrying one, and agent_state_snapshot's step ordinals.
func snapshotPlaces(t *testing.T, db *sql.DB) (onEvents []int64, inTable []int) {
	t.Helper()
	rows, err := db.Query(`SELECT sequence FROM run_events WHERE node_name IS NOT NULL ORDER BY sequence`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q int64
		rows.Scan(&q)
		onEvents = append(onEvents, q)
	}
	rows.Close()
	rows, err = db.Query(`SELECT step_ordinal FROM agent_state_snapshot ORDER BY step_ordinal`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int
		rows.Scan(&n)
		inTable = append(inTable, n)
	}
	rows.Close()
	return onEvents, inTable
}

// Issue 26 part 1, fourth step: a database written at schema 13 is carried
// over by migration 00014, on both stores: steps 0 and 1's snapshots move
// onto their last events (sequences 3 and 6), step 2's (no events) stays
// in agent_state_snapshot, and step 3 committed after it goes on its own
// last event (9); run_events keeps only the (run_id, sequence) key and the
// parked events' index on SQLite (the relay's position is stored in
// agent_kv), and the partial indexes of unpublished events on Postgres.
func TestEventRowSnapshotMigrationSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db := dbAt(t, migrations.SQLite, path, snapshotTableSchema)
	f := fillSchema13(t, db, func(int) string { return "?" }, "2026-11-28T10:00:00.000000Z")
	db.Close()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check13CarriedOver(t, s, f)
	s.Close()
	db, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	onEvents, inTable := snapshotPlaces(t, db)
	if !reflect.DeepEqual(onEvents, []int64{3, 6, 9}) || !reflect.DeepEqual(inTable, []int{2}) {
		t.Errorf("snapshots on event rows %v and in agent_state_snapshot %v; want [3 6 9] and [2]", onEvents, inTable)
	}
	names := queryStrings(t, db, `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'run_events' ORDER BY name`)
	if want := []string{"run_events_parked", "sqlite_autoindex_run_events_1"}; !reflect.DeepEqual(names, want) {
		t.Errorf("run_events' indexes: %v, want %v (the (run_id, sequence) key and the parked events')", names, want)
	}
	// The relay's stored position: below event 3, the first waiting one
	// (1 published, 2 parked), where the migration put it; the marks and the
	// new step above moved nothing past it.
	var cursor string
	if err := db.QueryRow(`SELECT CAST(value AS TEXT) FROM agent_kv WHERE key = 'relay.embedded.cursor'`).Scan(&cursor); err != nil || cursor != "2" {
		t.Errorf("relay cursor = %q, %v; want 2", cursor, err)
	}
}

func TestEventRowSnapshotMigrationPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	db := dbAt(t, migrations.Postgres, url, snapshotTableSchema)
	defer db.Close()
	f := fillSchema13(t, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "2026-11-28T10:00:00Z")
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check13CarriedOver(t, s, f)
	onEvents, inTable := snapshotPlaces(t, db)
	if !reflect.DeepEqual(onEvents, []int64{3, 6, 9}) || !reflect.DeepEqual(inTable, []int{2}) {
		t.Errorf("snapshots on event rows %v and in agent_state_snapshot %v; want [3 6 9] and [2]", onEvents, inTable)
	}
	names := queryStrings(t, db, `SELECT indexname FROM pg_indexes WHERE tablename = 'run_events' ORDER BY indexname`)
	// 00015 drops the two partial indexes of unpublished events (the runs'
	// published positions, run_publish, find them).
	if want := []string{"run_events_parked", "run_events_run_sequence_key"}; !reflect.DeepEqual(names, want) {
		t.Errorf("run_events' indexes: %v, want %v", names, want)
	}
}

// checkDown14 takes the database at path (url) down to 13 (14 last), after three node steps were committed on 14, and checks schema
// 13's rows are whole: the three snapshots back in agent_state_snapshot,
// kind, ts and checksum back from each envelope; then up again.
func checkDown14(t *testing.T, db *sql.DB, d migrations.Dialect, s oldStore) {
	t.Helper()
	ctx := t.Context()
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	var events []agent.Event
	for step := range 3 {
		st := storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")
		if err := s.CommitStep(ctx, st); err != nil {
			t.Fatal(err)
		}
		events = append(events, st.Events...)
	}
	s.Close()
	p, err := migrations.NewProvider(db, d)
	if err != nil {
		t.Fatal(err)
	}
	// Down to 13: the later migrations (00015) first, then 14.
	if res, err := p.DownTo(ctx, 13); err != nil || len(res) == 0 || res[len(res)-1].Source.Version != 14 {
		t.Fatalf("DownTo(13) = %v, %v; want 14 undone last", res, err)
	}
	var snaps int
	if err := db.QueryRow(`SELECT count(*) FROM agent_state_snapshot`).Scan(&snaps); err != nil || snaps != 3 {
		t.Errorf("agent_state_snapshot after Down: %d rows, %v; want 3", snaps, err)
	}
	for _, e := range events {
		var kind, ts, sum string
		if err := db.QueryRow(`SELECT kind, ts, checksum FROM run_events WHERE event_id = '`+e.EventID+`'`).Scan(&kind, &ts, &sum); err != nil ||
			kind != e.Kind || ts != e.TS || sum != e.Checksum {
			t.Errorf("event %d after Down: %s %s %s, %v; want %s %s %s", e.Sequence, kind, ts, sum, err, e.Kind, e.TS, e.Checksum)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("Up again: %v", err)
	}
}

// Migration 00014's Down gives schema 13 its rows back, on both stores.
func TestEventRowSnapshotMigrationDownSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkDown14(t, db, migrations.SQLite, s)
	var idx int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'run_events_unpublished'`).Scan(&idx); err != nil || idx != 0 {
		t.Errorf("run_events_unpublished after Down and Up: %d, %v; want none", idx, err)
	}
}

func TestEventRowSnapshotMigrationDownPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkDown14(t, db, migrations.Postgres, s)
}
