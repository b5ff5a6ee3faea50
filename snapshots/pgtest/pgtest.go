// Package pgtest runs a real Postgres server for tests: Debian's postgresql
// binaries (initdb, pg_ctl) on a loopback port and a directory of its own,
// as the postgres user when the tests run as root (postgres refuses root).
// Tests of several packages use it: the store contract, the daemon's fleet
// tests (which also restart the server mid-run).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Server is one Postgres cluster (initdb'd data dir) and its server process.
type Server struct {
	Dir  string // holds data/, the socket and log
	Port int
	bin  string
	asPG bool
	seq  atomic.Int64
}

// Start initdb's a cluster under a new directory in parent ("" = the
// system temp dir) and starts it on a free loopback port. Tuned for tests:
// fsync off but synchronous_commit on, so a commit has reached the OS when
// it returns: a crash of the server process (StopServer "immediate") loses
// no committed transaction, a crash of the machine would. 200 connections. Errors: Postgres not installed (tools/setup.sh
// installs Debian's postgresql), initdb or pg_ctl failing (with its log).
func Start(parent string) (*Server, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, errors.New("pgtest: postgres not installed (/usr/lib/postgresql/*/bin/initdb); run tools/setup.sh")
	}
	s := &Server{bin: filepath.Dir(bins[len(bins)-1])}
	if u, _ := user.Current(); u != nil && u.Uid == "0" {
		s.asPG = true
	}
	dir, err := os.MkdirTemp(parent, "screengraph-pg-")
	if err != nil {
		return nil, err
	}
	s.Dir = dir
	if s.asPG {
		pu, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(pu.Uid)
		gid, _ := strconv.Atoi(pu.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		// The postgres user must reach dir through parent.
		os.Chmod(filepath.Dir(dir), 0o755)
	}
	if out, err := s.cmd("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	// A free port can be taken between the probe and the server's bind
	// (by another test's cluster or an outgoing connection's ephemeral
	// port: tests run in parallel packages), so a bind failure picks
	// another port. Restart keeps the port: clients reconnect to it.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.Port = port
		err = s.StartServer()
		if err == nil || attempt == 5 || !strings.Contains(err.Error(), "Address already in use") {
			return s, err
		}
	}
}

// freePort is a loopback TCP port free when asked (a variable so a test can
// hand out a taken one first).
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.asPG {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// StartServer starts the (stopped) server on its port and waits until it
// accepts connections.
func (s *Server) StartServer() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200", s.Port, s.Dir)
	if out, err := s.cmd("pg_ctl", "-D", s.data(), "-o", opts, "-l", filepath.Join(s.Dir, "log"), "-w", "-t", "30", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

// StopServer stops the server: mode "fast" (clients disconnected, a clean
// shutdown) or "immediate" (like a crash: recovery at the next start).
func (s *Server) StopServer(mode string) error {
	if out, err := s.cmd("pg_ctl", "-D", s.data(), "-m", mode, "-w", "-t", "30", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Restart stops the server (mode as StopServer) and starts it again.
func (s *Server) Restart(mode string) error {
	if err := s.StopServer(mode); err != nil {
		return err
	}
	return s.StartServer()
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.StopServer("immediate")
	os.RemoveAll(s.Dir)
}

// URL is the URL of database db (superuser postgres, trust auth).
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// NewDatabase creates an empty database with a fresh name and returns its URL.
func (s *Server) NewDatabase(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.seq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.URL(name), nil
}
