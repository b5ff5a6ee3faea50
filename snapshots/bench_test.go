package snapshots_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// BenchmarkCommitStep: one node's step per op (started, token_delta,
// finished + 3 outbox rows + the snapshot) in one transaction, on the
// embedded store (WAL, synchronous=NORMAL) in a temp dir.
func BenchmarkCommitStep(b *testing.B) {
	b.Run("embedded", func(b *testing.B) { benchCommitStep(b, newEmbedded(b)) })
	// Postgres from Debian's package, fsync=off (a test server): the cost of
	// the round trips and locks, not of the disk.
	b.Run("postgres", func(b *testing.B) { benchCommitStep(b, newPostgres(b)) })
}

func benchCommitStep(b *testing.B, s agent.Store) {
	r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	if err := s.CreateRun(context.Background(), r); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	step := 0
	b.ReportAllocs()
	for b.Loop() {
		if err := s.CommitStep(ctx, storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
			b.Fatal(err)
		}
		step++
	}
	b.ReportMetric(float64(step)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkRelay: the relay's Drain of b.N events (committed beforehand, in
// node steps) to the embedded JetStream: each batch read is one pipelined
// window (PublishOrdered, Nats-Expected-Last-Msg-Id chain), its acked
// prefixes marked in one write. runs=1 is one run's events; runs=8 has 8
// runs' events interleaved in each window.
func BenchmarkRelay(b *testing.B) {
	for _, runs := range []int{1, 8} {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			s := newEmbedded(b)
			_, url := startNATS(b, snapshots.EmbeddedNATSOptions{})
			_, pub := connectPublisher(b, url)
			perRun := (b.N/runs/3 + 1) * 3
			commitRuns(b, s, runs, perRun)
			relay := &snapshots.Relay{Store: s, Publisher: pub, Concurrency: runs}
			b.ResetTimer()
			n, err := relay.Drain(context.Background())
			b.StopTimer()
			if err != nil || n != runs*perRun {
				b.Fatalf("drained %d of %d: %v", n, runs*perRun, err)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
		})
	}
}

// BenchmarkRawJetStreamPublish: the same envelopes published straight to
// JetStream (Nats-Msg-Id, wait for the ack), no store: the relay's ceiling.
func BenchmarkRawJetStreamPublish(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("runs=%d", workers), func(b *testing.B) {
			_, url := startNATS(b, snapshots.EmbeddedNATSOptions{})
			_, pub := connectPublisher(b, url)
			r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
			body := []byte(fmt.Sprintf(`{"eventId":"%s","runId":"%s","tenantId":"%s","sequence":1,"kind":"%s","version":"1","payload":{"nodeName":"EnsureDevice","stepOrdinal":0},"checksum":"0000000000000000000000000000000000000000000000000000000000000000"}`,
				ulid.Make(), r.RunID, r.TenantID, agent.KindNodeStarted))
			subject := snapshots.Subject(r.TenantID, r.RunID, agent.KindNodeStarted)
			ids := make([]string, b.N)
			for i := range ids {
				ids[i] = ulid.Make().String()
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < b.N; i += workers {
						if err := pub.Publish(context.Background(), subject, ids[i], body); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
		})
	}
}
