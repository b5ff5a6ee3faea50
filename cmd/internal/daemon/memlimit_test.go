package daemon

import (
	"runtime/debug"
	"testing"
)

// TestApplyMemoryLimit: without GOMEMLIMIT the daemon runs under
// DefaultMemoryLimit; with it, the runtime's value (set at start from the
// variable) stays.
func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	const operator = 300 << 20
	debug.SetMemoryLimit(operator) // as the runtime applies GOMEMLIMIT=300MiB
	if got := applyMemoryLimit(func(k string) string {
		if k == "GOMEMLIMIT" {
			return "300MiB"
		}
		return ""
	}); got != operator || debug.SetMemoryLimit(-1) != operator {
		t.Fatalf("GOMEMLIMIT set: limit %d (runtime %d), want the operator's %d", got, debug.SetMemoryLimit(-1), operator)
	}
	if got := applyMemoryLimit(func(string) string { return "" }); got != DefaultMemoryLimit || debug.SetMemoryLimit(-1) != DefaultMemoryLimit {
		t.Fatalf("no GOMEMLIMIT: limit %d (runtime %d), want %d", got, debug.SetMemoryLimit(-1), DefaultMemoryLimit)
	}
}
