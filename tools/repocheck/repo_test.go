// Package repocheck guards the repository itself: tests that would pass only in
// the original checkout, and build outputs committed by mistake.
package repocheck

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const root = "../.."

// Absolute prefixes of a developer's checkout, and parts of paths that only
// a checkout has: a Go file naming one reads a file that a fresh clone
// elsewhere does not have. (Fake homes such as "/home/u" in XDG tests are fine.)
var (
	checkoutPrefixes = []string{"/work/", "/root/"}
	checkoutParts    = []string{"/.cache/", "/node_modules/", "/fixtures/", "/testdata/"}
)

func TestNoAbsoluteCheckoutPaths(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || d.Name() == "repo_test.go" {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if !strings.HasPrefix(s, "/") {
				return true
			}
			hit := false
			for _, pre := range checkoutPrefixes {
				hit = hit || strings.HasPrefix(s, pre)
			}
			for _, part := range checkoutParts {
				hit = hit || strings.Contains(s, part)
			}
			if hit {
				bad = append(bad, fset.Position(lit.Pos()).String()+": "+s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Errorf("absolute checkout path (find files relative to the package instead): %s", b)
	}
}

// TestNoBuildOutputsTracked fails when git tracks an executable binary (ELF)
// or any file over 5 MiB.
func TestNoBuildOutputsTracked(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range bytes.Split(out, []byte{0}) {
		if len(name) == 0 {
			continue
		}
		p := filepath.Join(root, string(name))
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Size() > 5<<20 {
			t.Errorf("%s is tracked and %d bytes: build outputs and large blobs stay out of git", name, st.Size())
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if n == 4 && bytes.Equal(head, []byte("\x7fELF")) {
			t.Errorf("%s is a tracked ELF binary: ignore build outputs", name)
		}
	}
}
