package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sleepAllowed names the test functions ("dir/file.go:Func", a method as
// "Type.Method") whose time.Sleep is not a wait on something: the polling
// helpers, which sleep between two looks at a condition and give up at a
// deadline, and fakes that model a slow peer. Everything else waits on a
// condition (a channel, a hook, polled state through one of these helpers)
// or runs on synctest's fake clock. Add an entry only with its reason.
var sleepAllowed = map[string]string{
	// Fakes that model a slow peer: the sleep is the peer's latency.
	"appium/local_test.go:TestAppiumWatchBusyIsNotDead": "a status probe that takes its own timeout (Appium busy)",
	"nodes/wait_idle_evidence_test.go:shotDevice":       "a device whose screencap takes a given time",

	// Measurement windows: a rate or a negative ("never") is observed over a span.
	"agent/httpapi/ui_devices_browser_test.go:TestUIBrowserDevicesLeases":       "the requests a devices tab makes in a 4 s window",
	"cmd/internal/e2e/livescreen_test.go:BenchmarkLiveScreen32":                 "live screen frames delivered and daemon CPU over a 10 s window (a benchmark, not run by go test)",
	"agent/service/fleet_controlplane_bench_test.go:BenchmarkFleetControlPlane": "Postgres CPU, renewals and WAL over the idle and hold windows (a benchmark, not run by go test)",
	"emulator/sim/console_test.go:TestUnauthorizedForever":                      "still unauthorized 2 s after a profile that never authorizes",

	// Seeded chaos and load schedules: when the next fault or commit lands,
	// and how long a fault lasts (replayable with the seed), not a wait.
	"cmd/internal/e2e/control_stress_test.go:TestServeControlStress":    "the seeded instants of the daemon's kills",
	"cmd/internal/e2e/crash_test.go:TestServeCrashResume":               "the seeded instants of SIGKILL and SIGTERM",
	"cmd/internal/e2e/fleet_test.go:TestFleetChaos":                     "the seeded gaps between faults and how long a killed daemon stays dead (a takeover's span is the --lease-ttl the test sets)",
	"snapshots/relay/bench_latency_test.go:latencyRig.wave":             "the gaps between a benchmark's commits",
	"snapshots/relay/fleet_test.go:commitSteadily":                      "the pace of a writer's commits",
	"snapshots/relay/fleet_test.go:orderUnderNATSFailures":              "how long the NATS outage lasts",
	"snapshots/relay/stream_test.go:commitWhile":                        "the seeded pace of the writers' commits",
	"snapshots/relay/stream_test.go:TestRelayStreamCleanStopMarksAcked": "the seeded instant of the stop, mid-stream",
	"snapshots/relay/stream_test.go:TestRelayStreamsThroughNATSRestart": "the seeded instant of the NATS shutdown and the outage's length",

	// Fixed waits with no hook yet in the code under test (to be replaced).
	"cmd/internal/e2e/sched_bench_test.go:BenchmarkFleetPendingBacklog": "WAIT: a 3 s warm-up until every daemon saw the backlog, then rows read per second over a 20 s window (a benchmark: go test does not run it)",
}

// sleepCall is one time.Sleep in a test file.
type sleepCall struct {
	pos    string // file:line
	fn     string // dir/file.go:Func
	bubble bool   // inside a synctest.Test/Run func literal: fake time
	poll   bool   // the interval of a loop that looks at a condition up to a deadline
}

// testSleeps finds every time.Sleep call in the *_test.go files under dir.
func testSleeps(t *testing.T, dir string) []sleepCall {
	t.Helper()
	fset := token.NewFileSet()
	var calls []sleepCall
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "node_modules", "bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") || d.Name() == "sleeps_test.go" {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				rt := fd.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if id, ok := rt.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			var stack []ast.Node
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				stack = append(stack, n)
				if isSelectorCall(n, "time", "Sleep") {
					calls = append(calls, sleepCall{pos: fset.Position(n.Pos()).String(), fn: rel + ":" + name, bubble: inBubble(stack), poll: inPoll(stack)})
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

func isSelectorCall(n ast.Node, pkg, fn string) bool {
	c, ok := n.(*ast.CallExpr)
	if !ok {
		return false
	}
	s, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != fn {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// inBubble reports whether the innermost enclosing call of synctest.Test or
// synctest.Run holds the sleep in its function literal: there the clock is
// synctest's fake one and a sleep advances it without waiting.
func inBubble(stack []ast.Node) bool {
	for i := len(stack) - 1; i > 0; i-- {
		if _, ok := stack[i].(*ast.FuncLit); !ok {
			continue
		}
		if isSelectorCall(stack[i-1], "synctest", "Test") || isSelectorCall(stack[i-1], "synctest", "Run") {
			return true
		}
	}
	return false
}

// inPoll reports whether the sleep is the interval of a polling loop: a
// statement of the innermost for loop's body (or its post statement) where
// that loop gives up at a deadline or a bound (a loop condition, or it names
// a deadline, time.Since, time.Until, time.Now, time.After or a context's
// Done or Err). Such a sleep
// paces the looks at a condition; the wait ends when the condition holds.
func inPoll(stack []ast.Node) bool {
	for i := len(stack) - 1; i > 0; i-- {
		if _, ok := stack[i].(*ast.FuncLit); ok {
			return false
		}
		loop, ok := stack[i].(*ast.ForStmt)
		if !ok {
			continue
		}
		// The sleep must sit directly in the loop (as a statement of its
		// body, possibly under an if/else) or be its post statement, not
		// in a nested loop.
		bounded := loop.Cond != nil // for i := 0; i < 50 && !ok; ... or for errors.Is(err, busy)
		ast.Inspect(loop, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				if strings.Contains(strings.ToLower(n.Name), "deadline") {
					bounded = true
				}
			case *ast.CallExpr:
				for _, f := range []string{"Since", "Until", "Now", "After"} {
					if isSelectorCall(n, "time", f) {
						bounded = true
					}
				}
				if s, ok := n.Fun.(*ast.SelectorExpr); ok && (s.Sel.Name == "Done" || s.Sel.Name == "Err") {
					bounded = true
				}
			}
			return !bounded
		})
		return bounded
	}
	return false
}

// TestNoSleepsAsWaits fails on a real-clock time.Sleep in a test outside the
// allow-listed polling helpers and fakes: a fixed sleep either waits too
// long (the suite's time) or too little (a flake under load).
func TestNoSleepsAsWaits(t *testing.T) {
	calls := testSleeps(t, root)
	var bad []string
	bubbles, polls, allowed := 0, 0, 0
	used := map[string]bool{}
	for _, c := range calls {
		switch {
		case c.bubble:
			bubbles++
		case c.poll:
			polls++
		case sleepAllowed[c.fn] != "":
			allowed++
			used[c.fn] = true
		default:
			bad = append(bad, c.pos+" in "+c.fn)
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("real-clock time.Sleep used as a wait: %s (wait on a condition, or run on synctest's clock)", b)
	}
	for fn := range sleepAllowed {
		if !used[fn] {
			t.Errorf("sleepAllowed names %s, which has no time.Sleep: remove the entry", fn)
		}
	}
	waits := 0
	for _, why := range sleepAllowed {
		if strings.HasPrefix(why, "WAIT:") {
			waits++
		}
	}
	t.Logf("%d allow-listed functions still wait a fixed time (WAIT:)", waits)
	t.Logf("%d time.Sleep calls in tests: %d on synctest's fake clock, %d pacing a polling loop with a deadline, %d in %d allow-listed functions, %d used as waits outside them", len(calls), bubbles, polls, allowed, len(sleepAllowed), len(bad))
}

// TestSleepClasses checks the three classes on a file of each: a sleep in a
// synctest bubble, the interval of a polling loop, and a fixed wait.
func TestSleepClasses(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { time.Sleep(time.Hour) })
}

func TestPoll(t *testing.T) {
	for deadline := time.Now().Add(time.Second); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("late")
		}
	}
}

func TestFixed(t *testing.T) {
	go func() { time.Sleep(300 * time.Millisecond) }()
	time.Sleep(700 * time.Millisecond)
}

func done() bool { return true }
`
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got := map[string][3]int{}
	for _, c := range testSleeps(t, dir) {
		n := got[c.fn]
		switch {
		case c.bubble:
			n[0]++
		case c.poll:
			n[1]++
		default:
			n[2]++
		}
		got[c.fn] = n
	}
	want := map[string][3]int{"x_test.go:TestBubble": {1, 0, 0}, "x_test.go:TestPoll": {0, 1, 0}, "x_test.go:TestFixed": {0, 0, 2}}
	for fn, w := range want {
		if got[fn] != w {
			t.Errorf("%s: [bubble poll fixed] %v, want %v", fn, got[fn], w)
		}
	}
}
