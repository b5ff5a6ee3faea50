package repocheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Function size limits (issue 24, "One type per node"): outside the
// simulator no function of non-test code is longer than maxFuncLines lines
// (from `func` to its closing brace) or above cyclomatic complexity
// maxCyclomatic (gocyclo's count: 1, plus one per if, for, range, case
// clause and select case other than default, && and ||; closures count
// toward the function that holds them).
const (
	maxFuncLines  = 80
	maxCyclomatic = 15
)

// funcSizeExempt are the trees the limits do not apply to: the simulated
// emulator (a model of Android's shell tools and services, parsing argument
// forms the way toybox does).
var funcSizeExempt = []string{"emulator/sim/..."}

// funcSizeDebt lists the functions over the limits when the check came in,
// as "<package dir>.<function>" ("agent/service.(*Service).schedule"), with
// lines/cyclomatic then. Each is someone's part to shrink; the test fails
// when one listed is within the limits (remove it here) and for any new one.
// nodes/, device/android, device/adbdevice and device/artifacts have none.
var funcSizeDebt = map[string]string{}

// Cyclomatic is gocyclo's complexity of fn (see maxCyclomatic).
func cyclomatic(fn ast.Node) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if x.List != nil {
				c++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// funcName is "<package dir>.<name>", with the receiver's type for a method.
func funcName(dir string, fd *ast.FuncDecl) string {
	name := fd.Name.Name
	if fd.Recv != nil && len(fd.Recv.List) > 0 {
		t := fd.Recv.List[0].Type
		star := ""
		if s, ok := t.(*ast.StarExpr); ok {
			t, star = s.X, "*"
		}
		switch x := t.(type) {
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		}
		if id, ok := t.(*ast.Ident); ok {
			name = "(" + star + id.Name + ")." + name
		}
	}
	return dir + "." + name
}

// funcSizes measures every function of the module's non-test Go files
// outside funcSizeExempt: name -> "lines/cyclomatic" for those over a limit.
func funcSizes(t *testing.T) (over map[string]string, checked int) {
	t.Helper()
	fset := token.NewFileSet()
	over = map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "node_modules", "bin":
				return filepath.SkipDir
			}
			for _, ex := range funcSizeExempt {
				if matches(ex, rel) {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			checked++
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if cc := cyclomatic(fd); lines > maxFuncLines || cc > maxCyclomatic {
				over[funcName(filepath.ToSlash(filepath.Dir(rel)), fd)] = fmt.Sprintf("%d/%d", lines, cc)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return over, checked
}

func TestFunctionSize(t *testing.T) {
	over, checked := funcSizes(t)
	if checked < 1000 {
		t.Fatalf("only %d functions measured", checked)
	}
	var bad []string
	for name, size := range over {
		if _, ok := funcSizeDebt[name]; !ok {
			bad = append(bad, fmt.Sprintf("%s: %s lines/cyclomatic, limits %d/%d", name, size, maxFuncLines, maxCyclomatic))
		}
	}
	for name := range funcSizeDebt {
		if _, ok := over[name]; !ok {
			bad = append(bad, name+": within the limits now (or gone): remove it from funcSizeDebt")
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d functions measured; %d over the limits, all listed in funcSizeDebt", checked, len(over))
}

// The measure itself, on known shapes.
func TestCyclomatic(t *testing.T) {
	src := `package x
func a() {}
func b(x int) int {
	if x > 0 && x < 9 || x == 20 { return 1 }
	for i := range 3 { _ = i }
	switch x { case 1, 2: ; case 3: ; default: }
	f := func() { if x == 1 {} }
	f()
	return 0
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 1, "b": 1 + 1 + 2 + 1 + 2 + 1}
	for _, d := range f.Decls {
		fd := d.(*ast.FuncDecl)
		if got := cyclomatic(fd); got != want[fd.Name.Name] {
			t.Errorf("%s: cyclomatic %d, want %d", fd.Name.Name, got, want[fd.Name.Name])
		}
	}
}
