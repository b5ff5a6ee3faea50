package natsbus_test

import (
	"fmt"
	"testing"

	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// BenchmarkSendChain: the streaming relay's chain on the in-process server
// (the daemon's connection), rows sent back to back with at most
// snapshots.ChainInFlight acks outstanding. tenants=1: one tenant's 8 runs
// interleaved (every condition an eventId); tenants=8/runs: 8 tenants, each
// run's rows together as a group commit gives them (a change of tenant every
// 8 rows); tenants=8/rows: 8 tenants interleaved row by row (a change of
// tenant at every row, the worst case: each row waits for the ack of the
// one before).
func BenchmarkSendChain(b *testing.B) {
	for _, bc := range []struct {
		name    string
		tenants int
		runLen  int
	}{{"tenants=1", 1, 1}, {"tenants=8/runs", 8, 8}, {"tenants=8/rows", 8, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			_, url := testenv.StartNATS(b, natsbus.EmbeddedOptions{})
			nc, pub := testenv.ConnectPublisher(b, url)
			_ = nc
			ctx := b.Context()
			var acks []snapshots.ChainAck
			waited := 0
			i := 0
			for b.Loop() {
				k := i / bc.runLen // the k-th group of rows of one run
				tenant := fmt.Sprintf("t%d", k%bc.tenants)
				run := fmt.Sprintf("r%d", k%8)
				row := chainRow(tenant, run, i)
				a, err := pub.SendChain(ctx, row)
				if err != nil {
					b.Fatal(err)
				}
				acks = append(acks, a)
				i++
				for len(acks)-waited >= snapshots.ChainInFlight {
					if _, err := acks[waited].Wait(ctx); err != nil {
						b.Fatal(err)
					}
					waited++
				}
			}
			for ; waited < len(acks); waited++ {
				if _, err := acks[waited].Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
