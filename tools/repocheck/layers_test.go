package repocheck

import (
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The layers of DESIGN.md ("Layout"), checked on the import graph that
// `go list -deps` reports for every package of the module (test files not
// included: tests may wire real adapters together). go test caches a pass
// without knowing the graph changed: run it with -count=1 after moving imports.
//
// Imports flow one way: cmd -> {snapshots, device, adb, appium, emulator,
// policy, nodes} -> agent. Every package may import agent/... except where a
// rule below says less; cmd/ may import anything.

const module = "github.com/screengraph/screengraph-agent/"

// allowed lists, per package (or per tree: a key ending in "/..."), the
// project packages it may import besides agent/... — the adapters' edges
// between each other, decided from the graph as it is and kept this small on
// purpose. The longest matching key wins; a package no key matches fails the
// test until someone decides its layer here.
var allowed = map[string][]string{
	// The domain and the daemon's core: only agent/... (TestAgentImportsOnlyAgent).
	"agent/...": {},
	// Pure, DB-blind, network-blind nodes: ports and parsers only.
	"nodes":  {"device", "device/android", "device/artifacts/apk", "adb/parse", "policy"},
	"policy": {},
	// adb: the transport uses its parsers; the parsers use nothing.
	"adb":       {"adb/parse"},
	"adb/parse": {},
	// appium speaks the device ports' Driver shapes.
	"appium": {"device"},
	// device: the ports the nodes consume, nothing else.
	"device": {},
	// What a device answers to the nodes' shell commands, over the port.
	"device/android": {"device", "adb/parse"},
	// The adb-side implementations of the device ports.
	"device/adbdevice":     {"adb", "adb/parse", "device"},
	"device/artifacts":     {"device/artifacts/apk"},
	"device/artifacts/apk": {},
	"device/evidence":      {"adb/parse", "device"},
	// The emulator lifecycle drives the adb server and implements device.Emulators.
	"emulator": {"adb", "adb/parse", "device", "device/adbdevice"},
	// The simulated emulator is a device of its own: it shares the APK parser
	// and the fixtures, never the daemon's adapters.
	"emulator/sim/...": {"emulator/sim/...", "fixtures", "device/artifacts/apk"},
	// The stores, the relay and the NATS side (docs/decisions.md, "snapshots/
	// split by concern"): the root is their shared contract and imports none
	// of them; the two stores share storekit and never reach NATS, the relay
	// or each other; natsbus knows no store; the relay reaches a store only
	// through the root's ports. Test servers and suites import nothing else.
	"snapshots":                   {},
	"snapshots/sqlite":            {"snapshots", "snapshots/internal/storekit", "migrations"},
	"snapshots/postgres":          {"snapshots", "snapshots/internal/storekit", "migrations"},
	"snapshots/internal/storekit": {"snapshots"},
	"snapshots/relay":             {"snapshots"},
	"snapshots/natsbus":           {"snapshots", "snapshots/natsbus/natsapi"},
	// The NATS control API lives with the rest of the daemon's NATS side
	// but speaks only agent's ports (the service, the HTTP API's errors).
	"snapshots/natsbus/natsapi":  {},
	"snapshots/internal/testenv": {"snapshots/sqlite", "snapshots/postgres", "snapshots/natsbus", "snapshots/pgtest"},
	"snapshots/...":              {"snapshots"},
	"migrations":                 {},
	"fixtures":                   {},
	"examples":                   {},
	"tools/...":                  {},
	"cmd/...":                    {"..."},
	// The host check (`doctor`) probes every adapter of a host: it stands
	// above them (under device/ it ran back up to appium and emulator).
	"cmd/internal/hostcheck": {"adb", "appium", "device/adbdevice", "emulator"},
}

// leaves import no project package at all, not even agent/: the parsers,
// the schema, the shipped data, the repository's own checks.
var leaves = []string{"adb/parse", "migrations", "fixtures", "examples", "tools/..."}

// nodesBanned are what nodes/ must never reach, even through another
// package (style.md habit 10): a store, NATS, HTTP, processes, and the
// transports (adb's client, Appium, the emulator).
var nodesBanned = []string{
	"database/sql", "database/sql/...", "os/exec", "net/http", "net/http/...",
	"github.com/jackc/pgx/...", "github.com/nats-io/...", "modernc.org/sqlite/...", "modernc.org/sqlite",
	module + "snapshots", module + "snapshots/...", module + "adb", module + "appium", module + "appium/...",
	module + "emulator", module + "emulator/...", module + "device/adbdevice", module + "cmd/...",
}

// graph is the module's import graph: every package `go list -deps ./...`
// reports (standard library and modules too) with its direct imports.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	g := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		g[f[0]] = f[1:]
	}
	if len(g) < 50 || !hasKey(g, module+"agent") {
		t.Fatalf("go list gave %d packages", len(g))
	}
	return g
}

func hasKey(g map[string][]string, k string) bool { _, ok := g[k]; return ok }

// matches reports whether pkg is pattern, or under it for "x/...".
func matches(pattern, pkg string) bool {
	if pattern == "..." {
		return true
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == tree || strings.HasPrefix(pkg, tree+"/")
	}
	return pkg == pattern
}

// rule returns the key of allowed that governs pkg (longest match), "" if none.
func rule(pkg string) string {
	best := ""
	for k := range allowed {
		if matches(k, pkg) && len(strings.TrimSuffix(k, "/...")) > len(strings.TrimSuffix(best, "/...")) {
			best = k
		}
	}
	return best
}

// chain returns the shortest import chain from "from" to a package matching
// one of targets, as "a -> b -> c", or "" when none is reachable.
func chain(g map[string][]string, from string, targets []string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != from && slices.ContainsFunc(targets, func(t string) bool { return matches(t, p) }) {
			var path []string
			for q := p; q != ""; q = prev[q] {
				path = append([]string{strings.TrimPrefix(q, module)}, path...)
			}
			return strings.Join(path, " -> ")
		}
		for _, n := range g[p] {
			if _, seen := prev[n]; !seen {
				prev[n] = p
				queue = append(queue, n)
			}
		}
	}
	return ""
}

func projectPackages(g map[string][]string) []string {
	var ps []string
	for p := range g {
		if strings.HasPrefix(p, module) {
			ps = append(ps, strings.TrimPrefix(p, module))
		}
	}
	sort.Strings(ps)
	return ps
}

// TestLayerImports: every project package imports only the project packages
// its layer allows (agent/... always), as the table above says.
func TestLayerImports(t *testing.T) {
	g := graph(t)
	for _, p := range projectPackages(g) {
		k := rule(p)
		if k == "" {
			t.Errorf("%s belongs to no layer of tools/repocheck/layers_test.go: decide what it may import and add it to allowed (and docs/layout.md)", p)
			continue
		}
		for _, imp := range g[module+p] {
			q, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if matches("agent/...", q) && !slices.Contains(leaves, k) {
				continue // imports flow toward agent/ (TestAgentImportsOnlyAgent checks agent's own)
			}
			if !slices.ContainsFunc(allowed[k], func(a string) bool { return matches(a, q) }) {
				may := fmt.Sprintf("only agent/... and %v", allowed[k])
				if slices.Contains(leaves, k) {
					may = "no project package"
				}
				t.Errorf("%s imports %s: layer %q may import %s (tools/repocheck/layers_test.go, docs/layout.md)", p, q, k, may)
			}
		}
	}
}

// TestAgentImportsOnlyAgent: agent/ and everything under it (the service,
// the HTTP and NATS APIs, retention, strict JSON) reach no project package
// outside agent/, directly or through a module.
func TestAgentImportsOnlyAgent(t *testing.T) {
	g := graph(t)
	outside := []string{}
	for _, p := range projectPackages(g) {
		if !matches("agent/...", p) {
			outside = append(outside, module+p)
		}
	}
	n := 0
	for _, p := range projectPackages(g) {
		if !matches("agent/...", p) {
			continue
		}
		n++
		if c := chain(g, module+p, outside); c != "" {
			t.Errorf("agent layer reaches outside agent/: %s", c)
		}
	}
	if n < 5 {
		t.Fatalf("only %d agent packages listed", n)
	}
}

// TestNodesReachNoIO: nodes/ is DB-blind and network-blind; it reaches the
// device, Appium and the emulator only through the ports passed to it.
func TestNodesReachNoIO(t *testing.T) {
	g := graph(t)
	if !hasKey(g, module+"nodes") {
		t.Fatal("nodes not listed")
	}
	for _, b := range nodesBanned {
		if c := chain(g, module+"nodes", []string{b}); c != "" {
			t.Errorf("nodes reaches %s: %s", strings.TrimPrefix(b, module), c)
		}
	}
}

// TestAdaptersReachNoOtherAdapter: beyond the direct edges of the table, no
// adapter reaches through a chain a package its layer may not import (e.g.
// appium -> device -> adb would make appium depend on the adb transport).
func TestAdaptersReachNoOtherAdapter(t *testing.T) {
	g := graph(t)
	adapters := []string{"adb", "adb/...", "appium", "appium/...", "emulator", "emulator/...",
		"snapshots", "snapshots/...", "device", "device/..."}
	for _, p := range projectPackages(g) {
		if !slices.ContainsFunc(adapters, func(a string) bool { return matches(a, p) }) {
			continue
		}
		k := rule(p)
		var banned []string
		for _, q := range projectPackages(g) {
			if q == p || matches("agent/...", q) || !slices.ContainsFunc(adapters, func(a string) bool { return matches(a, q) }) {
				continue
			}
			if !reachableAllowed(k, q) {
				banned = append(banned, module+q)
			}
		}
		if c := chain(g, module+p, banned); c != "" {
			t.Errorf("%s reaches an adapter its layer %q may not import: %s", p, k, c)
		}
	}
}

// reachableAllowed: q is allowed to k directly, or through what k allows
// (the transitive closure of the table).
func reachableAllowed(k, q string) bool {
	seen := map[string]bool{}
	var walk func(k string) bool
	walk = func(k string) bool {
		if seen[k] {
			return false
		}
		seen[k] = true
		for _, a := range allowed[k] {
			if matches(a, q) {
				return true
			}
			if sub := rule(strings.TrimSuffix(a, "/...")); sub != "" && walk(sub) {
				return true
			}
		}
		return false
	}
	return walk(k)
}

// top is a project package's top-level folder: its layer in the one-way
// order cmd -> {snapshots, device, adb, appium, emulator, policy, nodes} ->
// agent ("device/hostcheck" -> "device").
func top(pkg string) string {
	t, _, _ := strings.Cut(pkg, "/")
	return t
}

// TestImportsRunOneWay: no import runs back up. A package of folder A that
// imports one of folder B, while B's packages reach A's (appium -> device,
// emulator -> device), makes A and B stand above each other: the table may
// allow both edges, this test refuses the pair (device/hostcheck importing
// appium and emulator did, issue 24). agent/ is below every folder, cmd/
// above every one.
func TestImportsRunOneWay(t *testing.T) {
	g := graph(t)
	n := 0
	for _, p := range projectPackages(g) {
		for _, imp := range g[module+p] {
			q, ok := strings.CutPrefix(imp, module)
			if !ok || top(q) == top(p) {
				continue
			}
			n++
			if c := chain(g, imp, []string{module + top(p), module + top(p) + "/..."}); c != "" {
				t.Errorf("%s imports %s, which reaches back into %s/ (%s): one of them must move (tools/repocheck/layers_test.go, docs/layout.md)", p, q, top(p), c)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d imports across folders", n)
	}
}
