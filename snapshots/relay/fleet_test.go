package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natstest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The fleet's relays: several daemons (each its own Postgres store and NATS
// connection) drain one Postgres outbox into an R3 stream on a real 3-node
// nats-server cluster.

func startCluster(t testing.TB) *natstest.Cluster {
	t.Helper()
	c, err := natstest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nats-server logs:\n%s", c.Logs())
		}
		c.Close()
	})
	return c
}

// connectCluster connects to every node of c and ensures the R3 stream.
func connectCluster(t testing.TB, c *natstest.Cluster) (*nats.Conn, *natsbus.JetStreamPublisher) {
	t.Helper()
	nc, err := natsbus.Connect(c.URLs(), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// A fresh cluster may still be electing its meta leader, and an R3 stream
	// its leader (CI timed out here once): retry ensuring the stream.
	for deadline := time.Now().Add(60 * time.Second); ; {
		pub, err := natsbus.NewJetStreamPublisher(context.Background(), nc, natsbus.WithReplicas(3))
		if err == nil {
			return nc, pub
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		t.Logf("JetStream publisher: %v (retrying)", err)
		time.Sleep(500 * time.Millisecond)
	}
}

func openPostgresAt(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// countingPublisher counts Publish calls per event id (over every relay
// sharing it through its own wrapper) and when each event was first tried.
type countingPublisher struct {
	mu    sync.Mutex
	calls map[string]int
	first map[string]time.Time
}

func newCounting() *countingPublisher {
	return &countingPublisher{calls: map[string]int{}, first: map[string]time.Time{}}
}

// via returns a Publisher that counts into c and publishes through p (also
// pipelined, when p declares Ordered); onAck (optional) runs after each
// acknowledged row.
func (c *countingPublisher) via(p agent.Publisher, n *atomic.Int64, onAck func()) agent.Publisher {
	cp := &countedPublisher{c: c, p: p, n: n, onAck: onAck}
	if caps := snapshots.PublisherCapabilitiesOf(p); caps.Ordered != nil {
		return &countedOrdered{cp, caps}
	}
	return cp
}

func (c *countingPublisher) count(msgID string) {
	c.mu.Lock()
	c.calls[msgID]++
	if _, ok := c.first[msgID]; !ok {
		c.first[msgID] = time.Now()
	}
	c.mu.Unlock()
}

type countedPublisher struct {
	c     *countingPublisher
	p     agent.Publisher
	n     *atomic.Int64
	onAck func()
}

func (cp *countedPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	cp.c.count(msgID)
	err := cp.p.Publish(ctx, subject, msgID, body)
	if err == nil {
		cp.acked()
	}
	return err
}

func (cp *countedPublisher) acked() {
	cp.n.Add(1)
	if cp.onAck != nil {
		cp.onAck()
	}
}

type countedOrdered struct {
	*countedPublisher
	caps snapshots.PublisherCapabilities // the wrapped publisher's
}

// PublisherCapabilities: windows counted by this wrapper; the wrapped
// publisher's tail checks (it declares Tail) passed through as they are.
func (co *countedOrdered) PublisherCapabilities() snapshots.PublisherCapabilities {
	return snapshots.PublisherCapabilities{Ordered: co, Tail: co.caps.Tail}
}

func (co *countedOrdered) PublishOrdered(ctx context.Context, rows []agent.OutboxRow) ([]bool, error) {
	for _, r := range rows {
		co.c.count(r.EventID)
	}
	ok, err := co.caps.Ordered.PublishOrdered(ctx, rows)
	for _, o := range ok {
		if o {
			co.acked()
		}
	}
	return ok, err
}

// createRuns creates n runs on s.
func createRuns(t testing.TB, s agent.Store, n int) []agent.Run {
	t.Helper()
	var out []agent.Run
	for range n {
		r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
		if err := s.CreateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// commitSteadily commits steps (3 events each) round-robin over runs, one
// step every pause, until each run has steps steps; it returns when done.
func commitSteadily(t testing.TB, s agent.Store, runs []agent.Run, steps int, pause time.Duration) {
	t.Helper()
	for step := range steps {
		for _, r := range runs {
			if err := s.CommitStep(context.Background(), storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
				t.Error(err)
				return
			}
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}
}

type runningRelay struct {
	relay  *relay.Relay
	cancel context.CancelFunc
	done   chan error
	acks   *atomic.Int64
}

func startRelay(t testing.TB, r *relay.Relay, acks *atomic.Int64) *runningRelay {
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRelay{relay: r, cancel: cancel, done: make(chan error, 1), acks: acks}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() { rr.stop(t) })
	return rr
}

func (rr *runningRelay) stop(t testing.TB) {
	if rr.cancel == nil {
		return
	}
	rr.cancel()
	rr.cancel = nil
	if err := <-rr.done; err != nil {
		t.Errorf("relay Run: %v", err)
	}
}

// Three relays on three stores (three daemons) drain one outbox while eight
// runs commit, pipelining their claims or publishing one row at a time per
// run: every event is in the stream exactly once and in order per
// run, and no event was handed to a Publisher twice (no two relays ever
// published one row; nothing failed, so nothing was retried).
func TestRelayFleetClaimsEachRowOnce(t *testing.T) {
	for _, oneByOne := range []bool{false, true} {
		t.Run(fmt.Sprintf("oneByOne=%v", oneByOne), func(t *testing.T) { claimsEachRowOnce(t, oneByOne) })
	}
}

func claimsEachRowOnce(t *testing.T, oneByOne bool) {
	url := testenv.PostgresURL(t)
	writer := openPostgresAt(t, url)
	c := startCluster(t)
	counts := newCounting()
	var relays []*runningRelay
	var js jetstream.JetStream
	var pubs []*natsbus.JetStreamPublisher
	for range 3 {
		_, pub := connectCluster(t, c)
		js = pub.JetStream()
		pubs = append(pubs, pub)
		acks := new(atomic.Int64)
		r := &relay.Relay{Store: openPostgresAt(t, url), Publisher: counts.via(pub, acks, nil),
			ClaimRows: 16, Concurrency: 4, ClaimWorkers: 2, PollInterval: 50 * time.Millisecond, OneByOne: oneByOne}
		relays = append(relays, startRelay(t, r, acks))
	}
	runs := createRuns(t, writer, 8)
	const steps = 30
	commitSteadily(t, writer, runs, steps, 200*time.Microsecond)
	waitDrained(t, writer, 30*time.Second)
	for i, rr := range relays {
		rr.stop(t)
		t.Logf("relay %d: %d acks, %+v", i, rr.acks.Load(), rr.relay.Stats())
	}
	total := len(runs) * steps * 3
	checkExactlyOnceInOrder(t, writer, runs, streamEvents(t, js, total))
	twice := 0
	for id, n := range counts.calls {
		if n != 1 {
			twice++
			if twice < 5 {
				t.Errorf("event %s handed to a Publisher %d times", id, n)
			}
		}
	}
	if len(counts.calls) != total || twice > 0 {
		t.Errorf("%d events published, %d of them more than once; want %d, 0", len(counts.calls), twice, total)
	}
	for i, p := range pubs {
		if d := p.Duplicates(); d != 0 {
			t.Errorf("relay %d: %d publishes the stream acknowledged as duplicates (a row stored before was sent again)", i, d)
		}
	}
	var marked int64
	for _, rr := range relays {
		marked += rr.relay.Stats().Published
	}
	if marked != int64(total) {
		t.Errorf("relays marked %d rows, want %d", marked, total)
	}
}

// A relay that dies between its acks and the commit of its claim (its
// Postgres connection is cut, its context canceled) marks nothing of that
// claim; another relay takes the runs over, re-publishes the acked rows (the
// stream deduplicates them) and nothing is lost or reordered. A relay that
// stops cleanly marks what it acked, so the next one publishes nothing twice.
func TestRelayFleetKilledMidBatch(t *testing.T) {
	for _, crash := range []bool{true, false} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			url := testenv.PostgresURL(t)
			writer := openPostgresAt(t, url)
			c := startCluster(t)
			runs := createRuns(t, writer, 4)
			commitSteadily(t, writer, runs, 10, 0) // 120 rows
			_, pubA := connectCluster(t, c)
			_, pubB := connectCluster(t, c)
			counts := newCounting()

			// Relay A: after its 25th ack, cut its store connection (crash) or
			// just stop (clean), mid-claim.
			appA := "relay_a"
			storeA := openPostgresAt(t, url+"&application_name="+appA)
			ctxA, cancelA := context.WithCancel(t.Context())
			acksA := new(atomic.Int64)
			var once sync.Once
			onAck := func() {
				if acksA.Load() != 25 {
					return
				}
				once.Do(func() {
					if crash {
						terminateBackends(t, writer, appA)
					}
					cancelA()
				})
			}
			relayA := &relay.Relay{Store: storeA, Publisher: counts.via(pubA, acksA, onAck), ClaimRows: 8, Concurrency: 2, ClaimWorkers: 1}
			if err := relayA.Run(ctxA); err != nil {
				t.Fatal(err)
			}
			markedA := relayA.Stats().Published
			left, err := writer.Unpublished(t.Context(), 1000)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("relay A: %d acks, %d marked, %d rows left", acksA.Load(), markedA, len(left))
			if int(markedA)+len(left) != 120 {
				t.Errorf("marked %d + left %d != 120", markedA, len(left))
			}
			if crash && acksA.Load()-markedA < 1 {
				t.Errorf("crash: %d acked, %d marked: the claim in flight was marked though its connection was cut", acksA.Load(), markedA)
			}
			if !crash && markedA != acksA.Load() {
				t.Errorf("clean stop: %d acked, %d marked; want equal", acksA.Load(), markedA)
			}

			acksB := new(atomic.Int64)
			relayB := &relay.Relay{Store: openPostgresAt(t, url), Publisher: counts.via(pubB, acksB, nil)}
			if _, err := relayB.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			waitDrained(t, writer, 10*time.Second)
			// B re-publishes what A acked but did not mark, plus at most one
			// row per run A had in flight when it stopped (sent, its ack not
			// awaited); the stream deduplicates all of them.
			unmarked := acksA.Load() - markedA
			if got := pubB.Duplicates(); got < unmarked || got > unmarked+int64(relayA.Concurrency) {
				t.Errorf("relay B: %d duplicate acks, want %d (rows A acked but did not mark) + at most %d in flight", got, unmarked, relayA.Concurrency)
			}
			checkExactlyOnceInOrder(t, writer, runs, streamEvents(t, pubB.JetStream(), 120))
		})
	}
}

// terminateBackends ends every Postgres backend of application app (a
// daemon whose host died: its open transaction rolls back).
func terminateBackends(t testing.TB, s *postgres.Store, app string) {
	var n int
	err := s.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
	if err != nil || n == 0 {
		t.Errorf("terminate backends of %s: %d, %v", app, n, err)
	}
}

// A commit made through another store (another daemon) wakes this relay
// through LISTEN/NOTIFY, far sooner than its one-hour poll interval.
func TestRelayFleetWakesOnOtherDaemonsCommit(t *testing.T) {
	url := testenv.PostgresURL(t)
	writer := openPostgresAt(t, url)
	c := startCluster(t)
	_, pub := connectCluster(t, c)
	acks := new(atomic.Int64)
	rl := &relay.Relay{Store: openPostgresAt(t, url), Publisher: newCounting().via(pub, acks, nil), PollInterval: time.Hour}
	startRelay(t, rl, acks)
	// A probe step published shows the relay past its first pass and
	// listening (the wake-up its LISTEN sends when it begins is taken).
	probe := createRuns(t, writer, 1)
	if err := writer.CommitStep(t.Context(), storetest.NodeStep(probe[0], 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	waitDrained(t, writer, 5*time.Second)
	runs := createRuns(t, writer, 1)
	for step := range 3 {
		start := time.Now()
		if err := writer.CommitStep(t.Context(), storetest.NodeStep(runs[0], int64(1+3*step), step, "EnsureDevice")); err != nil {
			t.Fatal(err)
		}
		waitDrained(t, writer, 5*time.Second) // the poll interval is an hour: NOTIFY woke it
		t.Logf("commit %d -> marked published by the other daemon's relay: %v", step, time.Since(start))
	}
	// The relay counts a claim's rows after its commit returns: the store
	// can show them marked a moment before the counter does.
	deadline := time.Now().Add(5 * time.Second)
	for rl.Stats().Published < 12 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := rl.Stats().Published; got != 12 {
		t.Errorf("published %d, want 12 (the probe step's 3 events and 9)", got)
	}
}

// Strict order per run while NATS fails under the relay: the stream
// leader's node is killed (SIGKILL) mid-stream and restarted, then the whole
// cluster is stopped for an outage (SCREENGRAPH_NATS_OUTAGE, default 3 s)
// while runs keep committing, and started again. Every event ends in the
// stream exactly once, each run's in sequence order. The worst delay from a
// row's first publish attempt to its mark is logged (the duplicate window
// must exceed it).
func TestRelayFleetOrderUnderNATSFailures(t *testing.T) {
	// One relay pipelines nearly every window; two contend for the stream
	// and fall back to one row at a time per run after each broken chain.
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("relays=%d", n), func(t *testing.T) { orderUnderNATSFailures(t, n) })
	}
}

func orderUnderNATSFailures(t *testing.T, nRelays int) {
	outage := 3 * time.Second
	if v := os.Getenv("SCREENGRAPH_NATS_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		outage = d
	}
	url := testenv.PostgresURL(t)
	writer := openPostgresAt(t, url)
	c := startCluster(t)
	_, pub := connectCluster(t, c)
	counts := newCounting()
	var relays []*runningRelay
	var pubs []*natsbus.JetStreamPublisher
	for range nRelays {
		_, p := connectCluster(t, c)
		pubs = append(pubs, p)
		acks := new(atomic.Int64)
		r := &relay.Relay{Store: openPostgresAt(t, url), Publisher: counts.via(p, acks, nil), Concurrency: 8,
			PublishTimeout: 500 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 100 * time.Millisecond}
		relays = append(relays, startRelay(t, r, acks))
	}
	runs := createRuns(t, writer, 8)
	// 60 steps per run: 0-39 committed while the relays publish through the
	// node kill, 40-59 while the whole cluster is down.
	const steps, before = 60, 40
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		commitSteadily(t, writer, runs, before, 2*time.Millisecond)
	}()

	// Kill the stream leader's node once the relays are publishing.
	waitAcks(t, relays, 200)
	leader := streamLeader(t, pub.JetStream(), c)
	t.Logf("killing the stream leader n%d", leader)
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	waitAcks(t, relays, 400)
	if err := c.Start(leader); err != nil {
		t.Fatal(err)
	}
	<-committed
	waitAcks(t, relays, 600)
	t.Logf("stopping the whole cluster for %v", outage)
	down := time.Now()
	if err := c.StopAll(); err != nil {
		t.Fatal(err)
	}
	for step := before; step < steps; step++ { // runs go on: the outbox grows
		for _, r := range runs {
			if err := writer.CommitStep(t.Context(), storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
				t.Fatal(err)
			}
		}
	}
	left, err := writer.Unpublished(t.Context(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("outbox during the outage: %d rows unpublished", len(left))
	time.Sleep(time.Until(down.Add(outage)))
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if n := c.Restarts(); n > 0 {
		t.Logf("the cluster found no meta leader after its restart: stopped and started %d more time(s)", n)
	}
	drainStart := time.Now()
	waitDrained(t, writer, 60*time.Second)
	t.Logf("cluster back after %v; outbox drained %v later", time.Since(down)-time.Since(drainStart), time.Since(drainStart))
	for i, rr := range relays {
		rr.stop(t)
		t.Logf("relay %d: %+v, windows %+v, duplicates %d", i, rr.relay.Stats(), pubs[i].OrderedStats(), pubs[i].Duplicates())
	}
	total := len(runs) * steps * 3
	checkExactlyOnceInOrder(t, writer, runs, streamEvents(t, pub.JetStream(), total))
	if t.Failed() {
		dumpDisorder(t, pub.JetStream(), total)
	}

	// Worst first-attempt -> marked delay. A run's events are marked by its
	// position (run_publish, migration 00015), whose marked_at is the last
	// move: an event was marked no later than that (an upper bound).
	rows, err := writer.Pool().Query(t.Context(), `SELECT e.event_id, coalesce(e.published_at, p.marked_at) FROM run_events e
		JOIN run_publish p ON p.run_id = e.run_id AND (e.sequence <= p.published_seq OR e.published_at IS NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		id string
		at time.Time
	}, error) {
		var v struct {
			id string
			at time.Time
		}
		return v, r.Scan(&v.id, &v.at)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != total {
		t.Errorf("%d events marked published, want %d", len(marks), total)
	}
	var worst time.Duration
	for _, m := range marks {
		if d := m.at.Sub(counts.first[m.id]); d > worst {
			worst = d
		}
	}
	t.Logf("worst delay from a row's first publish attempt to its mark: %v (outage %v, duplicate window %v)", worst, outage, natsbus.DuplicateWindow)
	if worst >= natsbus.DuplicateWindow {
		t.Errorf("worst relay delay %v exceeds the duplicate window %v", worst, natsbus.DuplicateWindow)
	}
}

func waitAcks(t *testing.T, relays []*runningRelay, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got int64
		for _, rr := range relays {
			got += rr.acks.Load()
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays acked %d publishes, waited for %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// streamLeader is the index of the node leading AGENT_EVENTS.
func streamLeader(t *testing.T, js jetstream.JetStream, c *natstest.Cluster) int {
	t.Helper()
	st, err := js.Stream(t.Context(), snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	var i int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &i); err != nil || i >= c.Len() {
		t.Fatalf("leader %q", info.Cluster.Leader)
	}
	return i
}

// dumpDisorder logs, around each message of the stream that breaks its
// run's order, the stored messages with their stream sequence, Nats-Msg-Id
// and Nats-Expected-Last-Msg-Id, so a failure shows whether the stream
// stored a row whose condition named a message that was not its
// predecessor.
func dumpDisorder(t *testing.T, js jetstream.JetStream, total int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Log(err)
		return
	}
	type stored struct {
		seq          uint64
		id, expected string
		run          string
		runSeq       int64
	}
	var all []stored
	for len(all) < total && ctx.Err() == nil {
		batch, err := cons.Fetch(total-len(all), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Log(err)
			return
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var e agent.Event
			_ = json.Unmarshal(m.Data(), &e)
			md, _ := m.Metadata()
			var seq uint64
			if md != nil {
				seq = md.Sequence.Stream
			}
			all = append(all, stored{seq, m.Headers().Get(jetstream.MsgIDHeader), m.Headers().Get(jetstream.ExpectedLastMsgIDHeader), e.RunID, e.Sequence})
		}
		if got == 0 {
			break
		}
	}
	t.Logf("stream read for the dump: %d of %d messages", len(all), total)
	next := map[string]int64{}
	show := map[int]bool{}
	for i, s := range all {
		if s.runSeq != next[s.run]+1 {
			for j := max(0, i-10); j < min(len(all), i+4); j++ {
				show[j] = true
			}
		}
		next[s.run] = s.runSeq
	}
	for i, s := range all {
		if show[i] {
			prev := ""
			if i > 0 {
				prev = all[i-1].id
			}
			t.Logf("stream seq %d: run %s seq %d id %s expected-last %q (previous stored %s)", s.seq, s.run[len(s.run)-4:], s.runSeq, s.id, s.expected, prev)
		}
	}
}
