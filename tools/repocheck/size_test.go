package repocheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxNodesLines bounds the non-test Go lines under nodes/ (issue 24 part 2):
// the nodes keep their own logic; device shell commands and their parsing
// go to device/android or adb/parse, generic helpers to agent/.
const maxNodesLines = 4000

// nonTestLines counts the lines (newlines, as wc -l does) of the .go files
// under dir, _test.go files left out: what
// `find DIR -name '*.go' ! -name '*_test.go' | xargs cat | wc -l` prints.
func nonTestLines(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		n += bytes.Count(b, []byte("\n"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestNodesSize(t *testing.T) {
	n := nonTestLines(t, filepath.Join(root, "nodes"))
	if n < 1000 {
		t.Fatalf("nodes/ has %d non-test lines: not the nodes package?", n)
	}
	if n >= maxNodesLines {
		t.Errorf("nodes/ has %d non-test lines, want under %d: move device shell commands and their parsing to device/android (or adb/parse) and generic helpers to agent/, rather than squeezing lines", n, maxNodesLines)
	}
	t.Logf("nodes/: %d non-test lines (limit %d)", n, maxNodesLines)
}
