package relay_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// BenchmarkCommitToNATSTenants: BenchmarkCommitToNATS's daemon path (the
// "after" side: in-process connection, marks coalesced) with 32 devices of
// one tenant and of 32 tenants, side by side (waves in turn), at the
// daemon's pace and 5x faster. With 32 tenants the streaming relay's chain
// changes tenant at most rows, and each change waits for the ack of the row
// before (issue 22: the condition names no other tenant's eventId). Run it
// on the code before and after a change to the chain to compare.
func BenchmarkCommitToNATSTenants(b *testing.B) {
	const (
		devices = 32
		waves   = 6
		gap     = 50 * time.Millisecond
	)
	sides := []struct {
		name    string
		tenants int
	}{{"1-tenant", 1}, {"32-tenants", 32}}
	rigs := make([]*latencyRig, len(sides))
	for i, sd := range sides {
		rigs[i] = newLatencyRig(b, sqlite.Options{}, true)
		rigs[i].tenants = sd.tenants
		rigs[i].wave(b, 2, 0) // warm-up
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "load average before: %s\n", loadAverage())
	b.ResetTimer()
	for _, g := range []time.Duration{gap, gap / 5} {
		samples := make([]latencySample, len(sides))
		for w := range waves {
			for i := range sides {
				k := (i + w) % len(sides)
				samples[k].merge(rigs[k].wave(b, devices, g))
			}
		}
		for i, sd := range sides {
			s := samples[i]
			fmt.Fprintf(&tab, "gap %-5v %-10s %2d devices: %v\n", g, sd.name, devices, s)
			name := fmt.Sprintf("%s-gap%dms", sd.name, g.Milliseconds())
			b.ReportMetric(quantile(s.commitNATS, 0.5), name+"-p50-ms")
			b.ReportMetric(quantile(s.commitNATS, 0.99), name+"-p99-ms")
		}
	}
	b.StopTimer()
	fmt.Fprintf(&tab, "load average after: %s", loadAverage())
	fmt.Fprintln(os.Stderr, "BenchmarkCommitToNATSTenants\n"+tab.String())
}
