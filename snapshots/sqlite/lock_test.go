package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// The data dir's lock records the daemon instance (its lease holder); the
// next daemon to get the lock reads its dead predecessor's instance, whose
// leases it takes back; a second daemon beside a live one gets no lock.
func TestLockDataDirNamesPredecessor(t *testing.T) {
	dir := t.TempDir()
	f, prev, err := sqlite.LockDataDir(dir, "serve:01AAAAAAAAAAAAAAAAAAAAAAAA")
	if err != nil || prev != "" {
		t.Fatalf("first lock: predecessor %q, %v; want none", prev, err)
	}
	if _, _, err := sqlite.LockDataDir(dir, "serve:01BBBBBBBBBBBBBBBBBBBBBBBB"); err == nil {
		t.Fatal("a second daemon locked a data dir in use")
	}
	f.Close() // the first daemon dies
	f, prev, err = sqlite.LockDataDir(dir, "serve:01CCCCCCCCCCCCCCCCCCCCCCCC")
	if err != nil || prev != "serve:01AAAAAAAAAAAAAAAAAAAAAAAA" {
		t.Fatalf("predecessor %q, %v; want serve:01AAAAAAAAAAAAAAAAAAAAAAAA", prev, err)
	}
	f.Close()
	// `runs resume` locks without an instance: the daemon after it still
	// finds the dead daemon's.
	f, _, err = sqlite.LockDataDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if f, prev, err = sqlite.LockDataDir(dir, "serve:01DDDDDDDDDDDDDDDDDDDDDDDD"); err != nil || prev != "serve:01CCCCCCCCCCCCCCCCCCCCCCCC" {
		t.Fatalf("after resume: predecessor %q, %v; want serve:01CCCCCCCCCCCCCCCCCCCCCCCC", prev, err)
	}
	f.Close()
	b, err := os.ReadFile(filepath.Join(dir, "daemon.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "instance "); n != 1 || !strings.Contains(string(b), "instance serve:01DDDDDDDDDDDDDDDDDDDDDDDD\n") {
		t.Fatalf("lock file %q: want one instance line, the last daemon's", b)
	}
}

// A lock file's record is taken back on its word, so only a whole
// serve:<ulid> counts: "serve:" (every daemon's holder would match it as a
// prefix), another process's kind or a bad id name no predecessor.
func TestLockDataDirIgnoresMalformedInstance(t *testing.T) {
	for _, rec := range []string{
		"instance serve:\n",
		"instance \n",
		"instance run:123\n",
		"instance serve:01AAAA\n",
		"instance serve:host:/data:01AAAAAAAAAAAAAAAAAAAAAAAA\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "daemon.lock"), []byte("pid 1\n"+rec), 0o600); err != nil {
			t.Fatal(err)
		}
		f, prev, err := sqlite.LockDataDir(dir, "serve:01CCCCCCCCCCCCCCCCCCCCCCCC")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if prev != "" {
			t.Errorf("lock record %q: predecessor %q, want none", rec, prev)
		}
	}
}
