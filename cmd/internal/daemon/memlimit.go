package daemon

import (
	"runtime/debug"
)

// DefaultMemoryLimit is the Go runtime's soft memory limit (bytes,
// runtime/debug.SetMemoryLimit) the daemon runs under when the environment
// sets no GOMEMLIMIT: 28 MiB.
//
// Why a limit, and this one (issue 26 part 3; docs/decisions.md): at 32
// devices the daemon's live heap after a collection is about 12-15 MB,
// and with GOGC's default the heap grew to twice that before the next
// collection, and the runtime kept the freed pages a while: 40-42 MB of
// anonymous memory beside the 37 MB of the binary's own file-backed pages
// (text, rodata, pclntab), 76-81 MB peak RSS against a 64 MB target. Under
// the limit the collector runs when the runtime's whole footprint (heap,
// stacks, metadata) nears 28 MiB instead, and the scavenger returns free
// pages sooner. 24 MiB reached the target (64.0 MB) but collected 5x as
// often (the live heap sat near the limit) and doubled the daemon's CPU per
// chain; 28 MiB collects about 2x as often as no limit. The limit is soft: a live heap above it (more devices,
// larger payloads) is never refused memory; the collector then runs more
// often, its CPU capped at about half the process's by the runtime, so the
// daemon slows rather than fails. An operator sets GOMEMLIMIT (Go's own
// variable, "off" for none, e.g. 256MiB for a host of many devices) to
// choose another.
const DefaultMemoryLimit int64 = 28 << 20

// applyMemoryLimit puts DefaultMemoryLimit in force unless getenv reports
// GOMEMLIMIT set, which the runtime has already applied at start. It
// returns the limit in force (bytes; math.MaxInt64 means none).
func applyMemoryLimit(getenv func(string) string) int64 {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1) // -1 reads it
	}
	debug.SetMemoryLimit(DefaultMemoryLimit)
	return DefaultMemoryLimit
}
