package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// latencyRig is one daemon's event path without devices: an embedded store,
// an embedded NATS server, the streaming relay between them and an outside
// subscriber (an ordered JetStream consumer on a connection of its own, as
// BenchmarkDaemon32's NATS clock) stamping each message's arrival.
type latencyRig struct {
	store *sqlite.Store
	relay *relay.Relay
	mu    sync.Mutex
	at    map[string]time.Time // eventId -> arrival
	got   chan struct{}        // a message arrived (capacity 1)
	// tenants > 1 gives wave's devices tenants T00..T<tenants-1> in turn
	// (else one tenant for all).
	tenants int
}

func newLatencyRig(b *testing.B, so sqlite.Options, inProcess bool) *latencyRig {
	b.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "agent.db"), so)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	rig := &latencyRig{store: store, at: map[string]time.Time{}, got: make(chan struct{}, 1)}
	ns, url := testenv.StartNATS(b, natsbus.EmbeddedOptions{})
	var pub *natsbus.JetStreamPublisher
	if inProcess {
		nc, err := natsbus.Connect(url, nats.InProcessServer(ns))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		if pub, err = natsbus.NewJetStreamPublisher(context.Background(), nc); err != nil {
			b.Fatal(err)
		}
	} else {
		_, pub = testenv.ConnectPublisher(b, url)
	}
	_, sub := testenv.ConnectPublisher(b, url)
	rig.relay = &relay.Relay{Store: rig.store, Publisher: pub}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rig.relay.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	cons, err := sub.JetStream().OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		rig.mu.Lock()
		rig.at[m.Headers().Get(jetstream.MsgIDHeader)] = now
		rig.mu.Unlock()
		select {
		case rig.got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
	return rig
}

// latencySample is one wave's figures.
type latencySample struct {
	commitNATS    []float64 // arrival - CommitStep called (the daemon's figure: ts is taken right before the commit), ms
	committedNATS []float64 // arrival - CommitStep returned: the relay and NATS alone, ms
	commitWait    []float64 // CommitStep's own duration (SQLite's writer queue), ms
	events        int
	cpu           time.Duration // process CPU (user+sys) over the wave
	wall          time.Duration // the wave's start to its last arrival
}

// wave starts devices chains at once, each committing the daemon's warm
// chain shape: run.started, the 4 setup nodes' steps (node.started,
// token_delta, node.finished + snapshot; storetest.NodeStep) and
// run.finished, each commit after a random pause of up to 2*gap (the node's
// work), then waits until every event arrived on NATS.
func (rig *latencyRig) wave(b *testing.B, devices int, gap time.Duration) latencySample {
	b.Helper()
	type commit struct {
		ids        []string
		called, at time.Time
	}
	per := make([][]commit, devices)
	runs := make([]agent.Run, devices)
	for i := range runs {
		tenant := "01HZX0TENANT1234567890"
		if rig.tenants > 1 {
			tenant = fmt.Sprintf("T%02d", i%rig.tenants)
		}
		runs[i] = storetest.NewRun(tenant, fmt.Sprintf("emulator-%d", 5554+2*i))
		if err := rig.store.CreateRun(context.Background(), runs[i]); err != nil {
			b.Fatal(err)
		}
	}
	nodes := []string{"EnsureDevice", "ProvisionApp", "LaunchOrAttach", "WaitIdle"}
	cpu0, t0 := processCPU(), time.Now()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := runs[d]
			var steps []agent.Step
			seq := int64(1)
			steps = append(steps, agent.Step{RunID: r.RunID, Events: []agent.Event{storetest.Event(r, seq, agent.KindRunStarted, `{}`)}})
			seq++
			for i, n := range nodes {
				steps = append(steps, storetest.NodeStep(r, seq, i, n))
				seq += 3
			}
			steps = append(steps, agent.Step{RunID: r.RunID, Events: []agent.Event{storetest.Event(r, seq, agent.KindRunFinished, `{}`)}})
			for i, st := range steps {
				if i > 0 && gap > 0 {
					time.Sleep(rand.N(2 * gap))
				}
				c := commit{called: time.Now()}
				if err := rig.store.CommitStep(context.Background(), st); err != nil {
					b.Error(err)
					return
				}
				c.at = time.Now()
				for _, e := range st.Events {
					c.ids = append(c.ids, e.EventID)
				}
				per[d] = append(per[d], c)
			}
		}()
	}
	close(start)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	var s latencySample
	for _, cs := range per {
		for _, c := range cs {
			s.events += len(c.ids)
		}
	}
	deadline := time.After(30 * time.Second)
	for {
		rig.mu.Lock()
		n := 0
		for _, cs := range per {
			for _, c := range cs {
				for _, id := range c.ids {
					if _, ok := rig.at[id]; ok {
						n++
					}
				}
			}
		}
		rig.mu.Unlock()
		if n == s.events {
			break
		}
		select {
		case <-rig.got:
		case <-deadline:
			b.Fatalf("%d of %d events arrived on NATS in 30 s", n, s.events)
		}
	}
	s.cpu, s.wall = processCPU()-cpu0, time.Since(t0)
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, cs := range per {
		for _, c := range cs {
			s.commitWait = append(s.commitWait, msOf(c.at.Sub(c.called)))
			for _, id := range c.ids {
				s.commitNATS = append(s.commitNATS, msOf(rig.at[id].Sub(c.called)))
				s.committedNATS = append(s.committedNATS, msOf(rig.at[id].Sub(c.at)))
			}
		}
	}
	return s
}

func (s *latencySample) merge(o latencySample) {
	s.commitNATS = append(s.commitNATS, o.commitNATS...)
	s.committedNATS = append(s.committedNATS, o.committedNATS...)
	s.commitWait = append(s.commitWait, o.commitWait...)
	s.events += o.events
	s.cpu += o.cpu
	s.wall += o.wall
}

// String is the sample's line: latencies, CPU per event and the share of
// the cores the process used.
func (s latencySample) String() string {
	return fmt.Sprintf("commit->NATS p50 %6.2f ms p99 %6.2f ms | committed->NATS p99 %6.2f ms | CommitStep p99 %6.2f ms | CPU %5.1f us/event, %3.0f%% of %d cores | %d events, %.0f/s",
		quantile(s.commitNATS, 0.5), quantile(s.commitNATS, 0.99), quantile(s.committedNATS, 0.99), quantile(s.commitWait, 0.99),
		float64(s.cpu.Microseconds())/float64(s.events), 100*s.cpu.Seconds()/s.wall.Seconds()/float64(runtime.GOMAXPROCS(0)), runtime.GOMAXPROCS(0),
		s.events, float64(s.events)/s.wall.Seconds())
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantile is the nearest-rank quantile q (0-1) of xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures (the machine's
// other load, which the latencies follow), or "?" where there is none.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// processCPU is this process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCommitToNATS: issue 17's "commit -> NATS p99 <= 50 ms at 32
// devices" without devices, side by side in one run. Each side is one
// daemon's event path (latencyRig: embedded store, embedded NATS, streaming
// relay, an outside ordered consumer): "before" with SQLite's defaults
// (sqlite.Options.CheckpointInCommit, DiskSubJournal) and a mark write per
// settled batch, "store" with the store's writer cuts, "marks" also with the
// marks coalesced (markCoalesce), "after" also with the relay's NATS
// connection in-process (nats.InProcessServer; the daemon still dials
// loopback TCP). The sides take turns with waves of latencyDevices chains
// started at once (latencyRig.wave: 6 commits per chain, a random 0 to
// 2*gap apart), latencyWaves waves each, at two loads (gap latencyGap, about
// the daemon's rate at 32 devices, and latencyGap/5), whatever b.N. Printed
// per side: commit -> NATS p50/p99 (CommitStep called -> arrival,
// BenchmarkDaemon32's figure), committed -> NATS p99 (CommitStep returned ->
// arrival: the relay and NATS alone), CommitStep p99, the process's CPU per
// event (everything in it, the other sides' idle rigs included) and its share
// of the cores; then the last side alone at 1, 8 and 32 devices, and the
// machine's load average, which the latencies follow.
func BenchmarkCommitToNATS(b *testing.B) {
	const (
		latencyDevices = 32
		latencyWaves   = 6
		latencyGap     = 50 * time.Millisecond
	)
	defaultCoalesce := relay.SetMarkCoalesce(0)
	defer relay.SetMarkCoalesce(defaultCoalesce)
	sides := []struct {
		name         string
		store        sqlite.Options
		markCoalesce time.Duration
		inProcess    bool
	}{
		// SQLite's defaults (checkpoints in the commit, sub-journal on disk), a mark write per settled batch.
		{"before", sqlite.Options{DiskSubJournal: true, CheckpointInCommit: true}, 0, false},
		// The store's writer cuts alone.
		{"store", sqlite.Options{}, 0, false},
		// And the relay's marks coalesced.
		{"marks", sqlite.Options{}, defaultCoalesce, false},
		// And the relay's connection in-process (no loopback TCP).
		{"after", sqlite.Options{}, defaultCoalesce, true},
	}
	rigs := make([]*latencyRig, len(sides))
	for i, sd := range sides {
		rigs[i] = newLatencyRig(b, sd.store, sd.inProcess)
		relay.SetMarkCoalesce(sd.markCoalesce)
		rigs[i].wave(b, 2, 0) // warm-up: prepared statements, stream, consumer
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "load average before: %s\n", loadAverage())
	b.ResetTimer()
	// Two loads: chains paced like the daemon's (about 1,000 events/s at
	// 32), and commits coming 5x as fast (the cores saturate).
	for _, gap := range []time.Duration{latencyGap, latencyGap / 5} {
		samples := make([]latencySample, len(sides))
		for w := range latencyWaves {
			for i := range sides {
				k := (i + w) % len(sides) // rotate which side goes first
				relay.SetMarkCoalesce(sides[k].markCoalesce)
				samples[k].merge(rigs[k].wave(b, latencyDevices, gap))
			}
		}
		for i, sd := range sides {
			s := samples[i]
			fmt.Fprintf(&tab, "gap %-5v %-6s %2d devices: %v\n", gap, sd.name, latencyDevices, s)
			name := fmt.Sprintf("%s-gap%dms", sd.name, gap.Milliseconds())
			b.ReportMetric(quantile(s.commitNATS, 0.5), name+"-p50-ms")
			b.ReportMetric(quantile(s.commitNATS, 0.99), name+"-p99-ms")
			b.ReportMetric(float64(s.cpu.Microseconds())/float64(s.events), name+"-cpu-us/event")
		}
	}
	last := rigs[len(rigs)-1]
	relay.SetMarkCoalesce(sides[len(sides)-1].markCoalesce)
	for _, devices := range []int{1, 8, 32} {
		var s latencySample
		for range 3 {
			s.merge(last.wave(b, devices, latencyGap))
		}
		fmt.Fprintf(&tab, "gap %-5v %-6s %2d devices: %v\n", latencyGap, sides[len(sides)-1].name, devices, s)
	}
	b.StopTimer()
	fmt.Fprintf(&tab, "load average after: %s", loadAverage())
	b.Log("\n" + tab.String())
	// b.Log keeps a benchmark's first 10 lines: the whole table on stderr.
	fmt.Fprintln(os.Stderr, "BenchmarkCommitToNATS\n"+tab.String())
}
