package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
)

// envInt is the integer of environment variable k, or def.
func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkFleetPendingBacklog measures what a large backlog of one tenant
// costs the fleet (issue 23 item 5): SCREENGRAPH_BACKLOG_DAEMONS (default 4)
// real daemons share one real Postgres and one adb server with one
// simulated emulator; SCREENGRAPH_BACKLOG_RUNS (default 15000) PENDING runs
// of tenant "bulk" name a device no daemon has (they are copied in with COPY
// from one submitted run, so the set-up is quick). Reported: the rows of the
// runs table Postgres read per second while the fleet idles over that
// backlog (pg_stat_user_tables seq_tup_read + idx_tup_fetch, over 20 s), and
// another tenant's time from submit (202) to RUNNING on the free emulator,
// median and max of b.N (at least 5) runs submitted to the daemons in turn.
// The daemons get an Appium URL nobody serves: a run only has to start.
func BenchmarkFleetPendingBacklog(b *testing.B) {
	nd := envInt("SCREENGRAPH_BACKLOG_DAEMONS", 4)
	backlog := envInt("SCREENGRAPH_BACKLOG_RUNS", 15000)
	ctx := context.Background()
	pg, err := pgtest.Start("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pg.Close)
	// pg_stat_statements: which statements read what.
	conf, err := os.OpenFile(filepath.Join(pg.Dir, "data", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintln(conf, "shared_preload_libraries = 'pg_stat_statements'")
	conf.Close()
	if err := pg.Restart("fast"); err != nil {
		b.Fatal(err)
	}
	db, err := pg.NewDatabase(ctx)
	if err != nil {
		b.Fatal(err)
	}
	srv := simtest.StartADBServer(b)
	emu, _ := launchDefault(b, srv)
	appiumURL := "http://127.0.0.1:" + strconv.Itoa(simtest.FreePort(b))
	var ds []*daemon
	for range nd {
		ds = append(ds, startDaemon(b, srv, "--database-url", db, "--appium", appiumURL))
	}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(b, apk)
	body := func(tenant, device string) map[string]any {
		m := runBody(device, "file://"+apk, sha, "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil)
		m["tenantId"] = tenant
		return m
	}
	first := ds[0].submit(b, body("bulk", "no-such-device"))

	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var tmpl struct {
		project, status, serial, graph, input string
		policy                                int
	}
	if err := conn.QueryRow(ctx, `SELECT project_id, status, serial, graph, input::text, policy_version FROM runs WHERE run_id = $1`, first).
		Scan(&tmpl.project, &tmpl.status, &tmpl.serial, &tmpl.graph, &tmpl.input, &tmpl.policy); err != nil {
		b.Fatal(err)
	}
	rows := make([][]any, 0, backlog-1)
	t0 := time.Now().UTC()
	for i := range backlog - 1 {
		at := t0.Add(time.Duration(i) * time.Microsecond)
		id := ulid.MustNew(ulid.Timestamp(at), rand.Reader).String()
		rows = append(rows, []any{id, "bulk", tmpl.project, tmpl.status, tmpl.serial, tmpl.graph, tmpl.input, tmpl.policy, at, at})
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"runs"},
		[]string{"run_id", "tenant_id", "project_id", "status", "serial", "graph", "input", "policy_version", "created_at", "updated_at"},
		pgx.CopyFromRows(rows)); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	// statements are pg_stat_statements' blocks touched (shared hit +
	// read) per statement of the database, by its text.
	statements := func() map[string]int64 {
		rows, err := conn.Query(ctx, `SELECT query, sum(shared_blks_hit + shared_blks_read)::bigint FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY query`)
		if err != nil {
			b.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var q string
			var n int64
			if err := rows.Scan(&q, &n); err != nil {
				b.Fatal(err)
			}
			out[q] = n
		}
		return out
	}
	// rowsRead is what Postgres has read of runs since its start (the
	// statistics a backend flushes at most every second).
	rowsRead := func() int64 {
		if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			b.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = 'runs'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	time.Sleep(3 * time.Second) // every daemon has seen the backlog
	r0, q0, s0 := rowsRead(), statements(), time.Now()
	time.Sleep(20 * time.Second)
	r1, q1, s1 := rowsRead(), statements(), time.Now()
	perSec := float64(r1-r0) / s1.Sub(s0).Seconds()
	type stmt struct {
		q      string
		blocks int64
	}
	var top []stmt
	for q, n := range q1 {
		top = append(top, stmt{q, n - q0[q]})
	}
	slices.SortFunc(top, func(a, b stmt) int { return int(b.blocks - a.blocks) })
	for _, st := range top[:min(3, len(top))] {
		b.Logf("%d blocks: %.300s", st.blocks, strings.Join(strings.Fields(st.q), " "))
	}
	b.Logf("%d daemons, %d PENDING runs of tenant bulk: %.0f rows of runs read per second", nd, backlog, perSec)

	samples := max(b.N, 5)
	var took []time.Duration
	b.ResetTimer()
	for i := range samples {
		d := ds[i%nd]
		start := time.Now()
		id := d.submit(b, body("other", emu.Serial()))
		for {
			v := d.run(b, id)
			if v.Status != agent.RunPending {
				break
			}
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("run %s still PENDING after 2 min\n%s", id, d.log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		d.call(b, "POST", "/v1/runs/"+id+"/cancel", map[string]any{}, nil)
		d.waitStatus(b, []string{id}, 2*time.Minute, agent.RunCanceled, agent.RunFailed, agent.RunFinished)
	}
	b.StopTimer()
	slices.Sort(took)
	b.Logf("time to RUNNING of tenant other's runs: %v", took)
	b.ReportMetric(perSec, "runs-rows-read/s")
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "ms-to-RUNNING-p50")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "ms-to-RUNNING-max")
}
