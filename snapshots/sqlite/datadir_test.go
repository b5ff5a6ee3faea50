package sqlite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// TestPrepareDataDir: a data dir an older version created 0755 becomes the
// owner's only, with tmp/; a data dir that is a regular file is the user's
// error naming it.
func TestPrepareDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.PrepareDataDir(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "tmp"): 0o700} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want a directory %v", p, fi, err, want)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := sqlite.PrepareDataDir(file)
	if agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "data dir "+file) {
		t.Errorf("a file as data dir: %v", err)
	}
}

// TestPredecessorPrefix: the instance the lock named, else the holders of a
// daemon of before instance ids on this host and data dir.
func TestPredecessorPrefix(t *testing.T) {
	if got := sqlite.PredecessorPrefix("d", "serve:01JDQ0000000000000000000AB"); got != "serve:01JDQ0000000000000000000AB" {
		t.Errorf("with an instance: %q", got)
	}
	host, _ := os.Hostname()
	if got := sqlite.PredecessorPrefix("d/./data/", ""); got != "serve:"+host+":d/data:" {
		t.Errorf("without: %q", got)
	}
}
