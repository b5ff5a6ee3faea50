package pgtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStartPicksAnotherPortWhenTaken: the port probed free is taken by the
// time the server binds (another package's cluster, an ephemeral port), so
// Start must try another instead of failing the test that asked for a
// cluster (seen as "Address already in use" when packages ran in parallel).
func TestStartPicksAnotherPortWhenTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	orig := freePort
	defer func() { freePort = orig }()
	asked := 0
	freePort = func() (int, error) {
		asked++
		if asked == 1 {
			return takenPort, nil
		}
		return orig()
	}
	s, err := Start("")
	if err != nil {
		t.Fatalf("Start with its first port taken: %v", err)
	}
	defer s.Close()
	if s.Port == takenPort || asked != 2 {
		t.Fatalf("port %d after %d asks; the taken one was %d", s.Port, asked, takenPort)
	}
}

// TestClusterCPUCountsABackendsWork: a query that burns CPU in a backend
// shows in the cluster's CPU, read by the data directory Postgres reports,
// and in its client backends' share; a directory with no running server is
// an error, not a zero.
func TestClusterCPUCountsABackendsWork(t *testing.T) {
	s, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
		t.Fatal(err)
	}
	before, err := ClusterCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds0, err := ClusterCPUByKind(dir)
	if err != nil {
		t.Fatal(err)
	}
	// About a second of one core's work, in the backend.
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM generate_series(1, 20000000)`); err != nil {
		t.Fatal(err)
	}
	after, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 100*time.Millisecond {
		t.Fatalf("cluster CPU %v -> %v across a query of 20M rows", before, after)
	}
	kinds1, err := ClusterCPUByKind(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := kinds1["client backend"] - kinds0["client backend"]; d < 100*time.Millisecond {
		t.Fatalf("client backends' CPU grew %v across the query (kinds before %v, after %v)", d, kinds0, kinds1)
	}
	if _, err := ClusterCPU(t.TempDir()); err == nil {
		t.Fatal("ClusterCPU of a directory with no postmaster.pid gave no error")
	}
}
