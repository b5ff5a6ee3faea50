package snapshots_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/migrations"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// positionSchema is the last schema whose Postgres store kept each event's
// publish state on the event row alone (00015 adds the runs' published
// positions, run_publish).
const positionSchema = 13

// publishStates are the runs fillPublishStates writes, by name: each
// event's state as schema 13's relay left it (p: published, w: waiting,
// k: parked). Run a's event 4 was published out of its run's order (a
// single MarkPublished).
var publishStates = map[string]string{"a": "ppwpkw", "b": "ppp", "c": "ww", "d": ""}

// fillPublishStates writes publishStates' runs with schema 13's own
// statements (the step commit's INSERTs; the relay's marks and park as its
// UPDATEs) and returns the runs by name and each event's envelope by
// event id.
func fillPublishStates(t *testing.T, db *sql.DB, ph func(int) string, ts string) (map[string]agent.Run, map[string][]agent.Event, map[string][]byte) {
	t.Helper()
	runs, events, envs := map[string]agent.Run{}, map[string][]agent.Event{}, map[string][]byte{}
	for _, name := range []string{"a", "b", "c", "d"} {
		r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
		runs[name] = r
		mustExecArgs(t, db, `INSERT INTO runs (run_id, tenant_id, project_id, status, serial, graph, input, policy_version, created_at, updated_at) VALUES (`+phs(ph, 10)+`)`,
			r.RunID, r.TenantID, r.ProjectID, string(agent.RunRunning), r.Serial, r.Graph, string(r.Input), r.PolicyVersion, ts, ts)
		for i, state := range publishStates[name] {
			e := storetest.Event(r, int64(i+1), agent.KindNodeStarted, fmt.Sprintf(`{"i":%d}`, i))
			env, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			events[name], envs[e.EventID] = append(events[name], e), env
			mustExecArgs(t, db, `INSERT INTO run_events (run_id, sequence, event_id, kind, ts, checksum, envelope, step_ordinal) VALUES (`+phs(ph, 8)+`)`,
				e.RunID, e.Sequence, e.EventID, e.Kind, e.TS, e.Checksum, env, nil)
			switch state {
			case 'p':
				mustExecArgs(t, db, `UPDATE run_events SET published_at = `+ph(1)+` WHERE run_id = `+ph(2)+` AND sequence = `+ph(3)+` AND published_at IS NULL`, ts, e.RunID, e.Sequence)
			case 'k':
				mustExecArgs(t, db, `UPDATE run_events SET published_at = `+ph(1)+`, parked_at = `+ph(2)+`, parked_reason = `+ph(3)+` WHERE run_id = `+ph(4)+` AND sequence = `+ph(5)+` AND published_at IS NULL`,
					ts, ts, "too big", e.RunID, e.Sequence)
			}
		}
	}
	return runs, events, envs
}

// phs is n placeholders of ph, comma-separated.
func phs(ph func(int) string, n int) string {
	s := ""
	for i := 1; i <= n; i++ {
		if i > 1 {
			s += ", "
		}
		s += ph(i)
	}
	return s
}

// checkWaiting checks that s's outbox is exactly want (run name ->
// sequences, in order), with each row's body its envelope, and its counts
// len(want's rows) unpublished and parked parked.
func checkWaiting(t *testing.T, s oldStore, runs map[string]agent.Run, envs map[string][]byte, want map[string][]int64, parked int64) {
	t.Helper()
	rows, err := s.Unpublished(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	n := int64(0)
	for name, r := range runs {
		for _, o := range rows {
			if o.RunID == r.RunID {
				got[name] = append(got[name], o.Sequence)
				if !bytes.Equal(o.Body, envs[o.EventID]) {
					t.Errorf("run %s sequence %d: body %s, want %s", name, o.Sequence, o.Body, envs[o.EventID])
				}
			}
		}
		n += int64(len(want[name]))
	}
	for name := range runs {
		if !slices.Equal(got[name], want[name]) {
			t.Errorf("run %s waits with %v, want %v", name, got[name], want[name])
		}
	}
	if len(rows) != int(n) {
		t.Errorf("%d rows waiting, want %d", len(rows), n)
	}
	u, p, err := s.OutboxCounts(t.Context())
	if err != nil || u != n || p != parked {
		t.Errorf("OutboxCounts = %d, %d (%v); want %d, %d", u, p, err, n, parked)
	}
}

// carriedWaiting is what waits after the carry-over: the events waiting at
// schema 13, not the one published out of order nor the parked one.
var carriedWaiting = map[string][]int64{"a": {3, 6}, "c": {1, 2}}

// Issue 26 part 3: a Postgres database written at schema 13 (each event's
// publish state on its row) is carried over by 00015 (the runs' published
// positions): the same events wait, once, from the runs' first waiting
// event on; an event published out of its run's order and a parked one do
// not; a claim publishes each waiting one once and moves the positions; a
// commit, a single mark out of order and a requeue after it are seen.
func TestRunPublishPositionMigrationPostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	db := dbAt(t, migrations.Postgres, url, positionSchema)
	runs, _, envs := fillPublishStates(t, db, func(n int) string { return fmt.Sprintf("$%d", n) }, "2026-11-28T10:00:00Z")
	db.Close()
	s, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	checkWaiting(t, s, runs, envs, carriedWaiting, 1)
	pos := map[string][2]int64{}
	for name, r := range runs {
		var p [2]int64
		if err := s.Pool().QueryRow(ctx, `SELECT published_seq, committed_seq FROM run_publish WHERE run_id = $1`, r.RunID).Scan(&p[0], &p[1]); err == nil {
			pos[name] = p
		}
	}
	if want := map[string][2]int64{"a": {2, 6}, "b": {3, 3}, "c": {0, 2}}; !mapsEqual(pos, want) {
		t.Errorf("run_publish (published_seq, committed_seq) by run: %v, want %v", pos, want)
	}
	var left []string
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(indexname::text), '{}') FROM pg_indexes WHERE indexname LIKE 'run_events_unpublished%'`).Scan(&left); err != nil || len(left) != 0 {
		t.Errorf("run_events' unpublished indexes after 00015: %v (%v), want none", left, err)
	}

	c, err := s.ClaimOutbox(ctx, 8, 64)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string][]int64{}
	for _, run := range c.Runs() {
		for name, r := range runs {
			if r.RunID == run[0].RunID {
				for _, o := range run {
					claimed[name] = append(claimed[name], o.Sequence)
				}
			}
		}
	}
	if !mapsEqual(claimed, carriedWaiting) {
		t.Errorf("claimed %v, want %v", claimed, carriedWaiting)
	}
	if n, err := c.Finish(ctx, map[string]int64{runs["a"].RunID: 6, runs["c"].RunID: 2}); err != nil || n != 4 {
		t.Errorf("Finish marked %d (%v), want 4", n, err)
	}
	checkWaiting(t, s, runs, envs, nil, 1)

	// A commit after it, a single mark out of order, a requeue.
	step := storetest.NodeStep(runs["c"], 3, 0, "EnsureDevice")
	if err := s.CommitStep(ctx, step); err != nil {
		t.Fatal(err)
	}
	for _, e := range step.Events {
		env, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		envs[e.EventID] = env
	}
	if err := s.MarkPublished(ctx, runs["c"].RunID, 5); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Requeue(ctx, runs["b"].RunID, 2); err != nil || n != 2 {
		t.Errorf("Requeue(b, from 2) = %d, %v; want 2", n, err)
	}
	checkWaiting(t, s, runs, envs, map[string][]int64{"b": {2, 3}, "c": {3, 4}}, 1)
}

func mapsEqual[V any](a, b map[string]V) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// The embedded store's 00015 changes nothing (its one relay reads by its
// cursor): a database written at schema 13 opens with the same events
// waiting.
func TestRunPublishPositionMigrationSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db := dbAt(t, migrations.SQLite, path, positionSchema)
	runs, _, envs := fillPublishStates(t, db, func(int) string { return "?" }, "2026-11-28T10:00:00.000000Z")
	db.Close()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkWaiting(t, s, runs, envs, carriedWaiting, 1)
}
