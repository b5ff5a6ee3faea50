package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The fleet's NATS side, measured on a real 3-node nats-server cluster
// (Debian's 2.9.10, R3 stream) and a real Postgres (fsync off: a test
// server), all on loopback on this machine.

// BenchmarkRelayVsRawJetStream: side by side in one run, for 1 and 8
// concurrent runs: the relay draining b.N events committed through Postgres
// (CommitStep, beforehand) into AGENT_EVENTS (claims, publish + ack per
// event, strictly in order per run, marks) against the same envelopes
// published straight to a twin stream (same settings, R3) with JetStream
// async publishing (PublishAsync, every run's events at once, then wait for
// all acks: no order guarantee under failure). Reports relay-events/s,
// raw-events/s and relay/raw (the target: >= 0.5 at 8 runs).
func BenchmarkRelayVsRawJetStream(b *testing.B) {
	c := startCluster(b)
	url := testenv.PostgresURL(b)
	s := openPostgresAt(b, url)
	nc, pub := connectCluster(b, c)
	js := pub.JetStream()
	raw := natsbus.StreamConfigFor(3)
	raw.Name, raw.Subjects = "RAW_EVENTS", []string{"raw.>"}
	if _, err := natsbus.EnsureStream(context.Background(), js, raw); err != nil {
		b.Fatal(err)
	}
	_ = nc
	for _, runs := range []int{1, 8} {
		b.Run(fmt.Sprintf("runs=%d", runs), func(b *testing.B) {
			perRun := (b.N/runs/3 + 1) * 3
			rs := createRuns(b, s, runs)
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Add(1)
				go func() { defer wg.Done(); commitSteadily(b, s, []agent.Run{r}, perRun/3, 0) }()
			}
			wg.Wait()
			all, err := s.Unpublished(context.Background(), runs*perRun+1)
			if err != nil || len(all) != runs*perRun {
				b.Fatalf("outbox has %d rows (%v), want %d", len(all), err, runs*perRun)
			}
			var rows [][]agent.OutboxRow
			for i, row := range all {
				row.Subject = "raw." + row.Subject
				if i == 0 || all[i-1].RunID != row.RunID {
					rows = append(rows, nil)
				}
				rows[len(rows)-1] = append(rows[len(rows)-1], row)
			}
			total := runs * perRun
			rl := &relay.Relay{Store: s, Publisher: pub, Concurrency: runs}
			b.ResetTimer()
			n, err := rl.Drain(context.Background())
			b.StopTimer()
			if err != nil || n != total {
				b.Fatalf("drained %d of %d: %v", n, total, err)
			}
			relayRate := float64(n) / b.Elapsed().Seconds()

			start := time.Now()
			publishRawAsync(b, js, rows)
			rawRate := float64(total) / time.Since(start).Seconds()
			b.ReportMetric(relayRate, "relay-events/s")
			b.ReportMetric(rawRate, "raw-events/s")
			b.ReportMetric(relayRate/rawRate, "relay/raw")
		})
	}
}

// publishRawAsync publishes every run's rows with PublishAsync (one
// goroutine per run, Nats-Msg-Id set) and waits for every ack.
func publishRawAsync(b testing.TB, js jetstream.JetStream, runs [][]agent.OutboxRow) {
	var wg sync.WaitGroup
	for _, rows := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			futs := make([]jetstream.PubAckFuture, 0, len(rows))
			for _, row := range rows {
				f, err := js.PublishAsync(row.Subject, row.Body, jetstream.WithMsgID(row.EventID))
				for errors.Is(err, jetstream.ErrTooManyStalledMsgs) { // 4,000 acks outstanding: wait, as a producer would
					time.Sleep(time.Millisecond)
					f, err = js.PublishAsync(row.Subject, row.Body, jetstream.WithMsgID(row.EventID))
				}
				if err != nil {
					b.Error(err)
					return
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Error(err)
					return
				case <-time.After(30 * time.Second):
					b.Error("async publish: no ack in 30 s")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkCommitToDelivery: events committed at a steady 1,000 events/s
// (a 3-event node step every 3 ms, round-robin over 8 runs, through
// Postgres CommitStep) while a relay runs (woken by NOTIFY); an ordered
// JetStream consumer outside the relay stamps each arrival. Latency = arrival
// - the return of the CommitStep that committed the event; reports p50 and
// p99 in ms and the rate reached. Runs 3 s whatever b.N.
func BenchmarkCommitToDelivery(b *testing.B) {
	c := startCluster(b)
	url := testenv.PostgresURL(b)
	writer := openPostgresAt(b, url)
	_, pub := connectCluster(b, c)
	_, subPub := connectCluster(b, c)
	rl := &relay.Relay{Store: openPostgresAt(b, url), Publisher: pub, Concurrency: 8}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
	)
	// A fresh R3 stream may still be electing its leader (a CI run timed
	// out here once): retry the consumer's creation for a while.
	var (
		cons jetstream.Consumer
		err  error
	)
	for deadline := time.Now().Add(60 * time.Second); ; {
		cons, err = subPub.JetStream().OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		b.Logf("ordered consumer: %v (retrying)", err)
		time.Sleep(500 * time.Millisecond)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		mu.Lock()
		arrived[m.Headers().Get(jetstream.MsgIDHeader)] = now
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()

	runs := createRuns(b, writer, 8)
	const (
		window = 3 * time.Second
		every  = 3 * time.Millisecond // 3 events per step: 1,000 events/s
	)
	committed := map[string]time.Time{}
	b.ResetTimer()
	{
		start := time.Now()
		for i := 0; ; i++ {
			next := start.Add(time.Duration(i) * every)
			if next.Sub(start) >= window {
				break
			}
			time.Sleep(time.Until(next))
			r := runs[i%len(runs)]
			step := storetest.NodeStep(r, int64(1+3*(i/len(runs))), i/len(runs), "EnsureDevice")
			if err := writer.CommitStep(context.Background(), step); err != nil {
				b.Fatal(err)
			}
			at := time.Now()
			for _, e := range step.Events {
				committed[e.EventID] = at
			}
		}
		rate := float64(len(committed)) / time.Since(start).Seconds()
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			got := len(arrived)
			mu.Unlock()
			if got >= len(committed) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d events arrived", got, len(committed))
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StopTimer()
		var lat []time.Duration
		mu.Lock()
		for id, at := range committed {
			lat = append(lat, max(arrived[id].Sub(at), 0))
		}
		mu.Unlock()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(rate, "committed-events/s")
	}
}
