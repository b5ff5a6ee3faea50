// Package testenv gives the tests of the snapshots packages (sqlite,
// postgres, relay, natsbus, and the root's inspect) their real backends: a
// fresh embedded store in a temp dir, a fresh database on one real Postgres
// per test binary (snapshots/pgtest), an embedded NATS server on its own
// port and a JetStream publisher connected to it. One copy instead of one
// per package's test files.
package testenv

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// A real Postgres from Debian's postgresql package (snapshots/pgtest),
// started once per test binary on its own port and directory, at the first
// PostgresURL.
var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// Main runs the package's tests (m.Run) and then stops the Postgres server
// PostgresURL started, if any; a package whose tests use PostgresURL calls it
// from its TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if pg.srv != nil {
		pg.srv.Close()
	}
	os.Exit(code)
}

// PostgresURL creates a fresh database and returns its URL. The test fails
// when Postgres is not installed or does not start.
func PostgresURL(t testing.TB) string {
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

// Postgres opens the Postgres store on a fresh database, closed at the
// test's end.
func Postgres(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), PostgresURL(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Embedded opens a fresh embedded store (agent.db in a temp dir), closed at
// the test's end.
func Embedded(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// StartNATS starts an embedded NATS server with o (its Dir a temp dir
// unless set), shut down at the test's end, and returns it and its URL.
func StartNATS(t testing.TB, o natsbus.EmbeddedOptions) (*server.Server, string) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ns, url, err := natsbus.StartEmbeddedWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns, url
}

// ConnectPublisher connects to url (reconnecting every 20 ms) and returns
// the connection and a JetStreamPublisher on it, closed at the test's end.
func ConnectPublisher(t testing.TB, url string) (*nats.Conn, *natsbus.JetStreamPublisher) {
	t.Helper()
	nc, err := natsbus.Connect(url, nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := natsbus.NewJetStreamPublisher(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, pub
}
