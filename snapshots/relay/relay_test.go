package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// commitRuns creates runs and commits steps of 3 events until each run has
// perRun events (a multiple of 3); it returns the run ids.
func commitRuns(t testing.TB, s agent.Store, runs, perRun int) []agent.Run {
	t.Helper()
	var out []agent.Run
	for range runs {
		r := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
		if err := s.CreateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	for step := 0; step*3 < perRun; step++ {
		for _, r := range out {
			if err := s.CommitStep(context.Background(), storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// orderingPublisher checks the relay's promise on every call: a run's
// sequence n+1 is published only after n was acked. It fails every failEvery-th call.
type orderingPublisher struct {
	t         *testing.T
	mu        sync.Mutex
	acked     map[string]int64 // run -> highest acked sequence
	calls     int
	failEvery int
	violation error
}

func (p *orderingPublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	var e agent.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if e.Sequence > p.acked[e.RunID]+1 && p.violation == nil {
		p.violation = fmt.Errorf("run %s: sequence %d published while only %d was acked", e.RunID, e.Sequence, p.acked[e.RunID])
	}
	if e.EventID != msgID || subject != snapshots.Subject(e.TenantID, e.RunID, e.Kind) {
		p.violation = fmt.Errorf("publish(%s, %s) of event %s", subject, msgID, e.EventID)
	}
	if p.failEvery > 0 && p.calls%p.failEvery == 0 {
		return errors.New("injected publish failure")
	}
	p.acked[e.RunID] = max(p.acked[e.RunID], e.Sequence)
	return nil
}

func TestRelayNeverPublishesAheadOfAck(t *testing.T) {
	s := testenv.Embedded(t)
	runs := commitRuns(t, s, 5, 30)
	pub := &orderingPublisher{t: t, acked: map[string]int64{}, failEvery: 7}
	rl := &relay.Relay{Store: s, Publisher: pub, BatchSize: 16, Concurrency: 3, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	waitDrained(t, s, 10*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pub.violation != nil {
		t.Fatal(pub.violation)
	}
	for _, r := range runs {
		if pub.acked[r.RunID] != 30 {
			t.Errorf("run %s acked up to %d, want 30", r.RunID, pub.acked[r.RunID])
		}
	}
	st := rl.Stats()
	if st.Published != 150 || st.Failures == 0 {
		t.Errorf("stats %+v: want 150 published and some failures (every 7th publish failed)", st)
	}
}

func TestRelayWakesOnCommit(t *testing.T) {
	s := testenv.Embedded(t)
	pub := &orderingPublisher{t: t, acked: map[string]int64{}}
	rl := &relay.Relay{Store: s, Publisher: pub, PollInterval: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// A probe run published shows the relay past its first pass; from
	// then on only a wake-up (or the hour's poll) makes it publish.
	commitRuns(t, s, 1, 1)
	waitDrained(t, s, 3*time.Second)
	runs := commitRuns(t, s, 1, 3)
	waitDrained(t, s, 3*time.Second) // far below the poll interval: the commit woke it
	if pub.acked[runs[0].RunID] != 3 {
		t.Errorf("acked %d, want 3", pub.acked[runs[0].RunID])
	}
}

func waitDrained(t *testing.T, s agent.Store, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		rows, err := s.Unpublished(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox not drained after %v: next %s/%d", d, rows[0].RunID, rows[0].Sequence)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cancelAfterAck publishes through p and, on the n-th ack, cancels the
// relay's context before the relay can mark the row: the crash window
// between ack and MarkPublished.
type cancelAfterAck struct {
	p      agent.Publisher
	n      int
	calls  int
	cancel context.CancelFunc
}

func (c *cancelAfterAck) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	err := c.p.Publish(ctx, subject, msgID, body)
	if err == nil {
		c.calls++
		if c.calls == c.n {
			c.cancel()
		}
	}
	return err
}

// streamEvents reads every message of the stream with an ephemeral ordered
// consumer and checks headers and subjects.
func streamEvents(t *testing.T, js jetstream.JetStream, want int) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []agent.Event
	for len(out) < want {
		batch, err := cons.FetchNoWait(want - len(out))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var e agent.Event
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				t.Fatal(err)
			}
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != e.EventID {
				t.Errorf("Nats-Msg-Id %q, event %s", id, e.EventID)
			}
			if m.Subject() != snapshots.Subject(e.TenantID, e.RunID, e.Kind) {
				t.Errorf("subject %q for %s", m.Subject(), e.Kind)
			}
			out = append(out, e)
		}
		if got == 0 {
			if ctx.Err() != nil {
				t.Fatalf("stream has %d messages, want %d", len(out), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	info, err := js.Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if si, err := info.Info(ctx); err != nil || si.State.Msgs != uint64(want) {
		t.Errorf("stream holds %d messages (%v), want exactly %d", si.State.Msgs, err, want)
	}
	return out
}

// checkExactlyOnceInOrder: every committed event exactly once, and per run in
// sequence order.
func checkExactlyOnceInOrder(t *testing.T, s agent.Store, runs []agent.Run, got []agent.Event) {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int64{}
	for _, e := range got {
		if seen[e.EventID] {
			t.Errorf("event %s (run %s seq %d) delivered twice", e.EventID, e.RunID, e.Sequence)
		}
		seen[e.EventID] = true
		if e.Sequence != next[e.RunID]+1 {
			t.Errorf("run %s: sequence %d after %d", e.RunID, e.Sequence, next[e.RunID])
		}
		next[e.RunID] = e.Sequence
	}
	for _, r := range runs {
		evs, err := s.Events(context.Background(), agent.Admin(), r.RunID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if !seen[e.EventID] {
				t.Errorf("event %s (run %s seq %d) never delivered", e.EventID, r.RunID, e.Sequence)
			}
		}
	}
}

func TestRelayJetStreamExactlyOnceAcrossRestart(t *testing.T) {
	s := testenv.Embedded(t)
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	nc, pub := testenv.ConnectPublisher(t, url)
	_ = nc
	runs := commitRuns(t, s, 3, 21) // 63 events

	// First relay: killed right after the 25th ack, before marking it.
	ctx1, cancel1 := context.WithCancel(t.Context())
	killer := &cancelAfterAck{p: pub, n: 25, cancel: cancel1}
	// MarkEvery 1: one MarkPublished per row, which the kill makes fail.
	r1 := &relay.Relay{Store: s, Publisher: killer, Concurrency: 1, MarkEvery: 1}
	if err := r1.Run(ctx1); err != nil {
		t.Fatal(err)
	}
	left, err := s.Unpublished(t.Context(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 63-24 {
		t.Fatalf("after the kill %d rows unpublished, want %d (25 acked, 24 marked)", len(left), 63-24)
	}

	// Restart: drains the rest; the acked-but-unmarked row is re-published and deduplicated.
	ctx2, cancel2 := context.WithCancel(t.Context())
	r2 := &relay.Relay{Store: s, Publisher: pub}
	done := make(chan error, 1)
	go func() { done <- r2.Run(ctx2) }()
	waitDrained(t, s, 10*time.Second)
	if pub.Duplicates() != 1 {
		t.Errorf("duplicates = %d after restart, want 1 (the row acked before the kill)", pub.Duplicates())
	}

	// Requeue a whole run (published_at reset): all 21 re-published, all deduplicated.
	n, err := s.Requeue(t.Context(), runs[1].RunID, 1)
	if err != nil || n != 21 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	waitDrained(t, s, 10*time.Second)
	cancel2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if pub.Duplicates() != 22 {
		t.Errorf("duplicates = %d, want 22", pub.Duplicates())
	}
	// The embedded store's relay streams (one relay on the stream).
	if st := pub.OrderedStats(); st.Chained == 0 {
		t.Errorf("ordered publishing %+v: the relay did not stream", st)
	}
	checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 63))
}

func TestRelayNATSOutageThenRecovery(t *testing.T) {
	s := testenv.Embedded(t)
	dir := t.TempDir()
	ns, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{Dir: dir})
	port := ns.Addr().String()
	port = port[strings.LastIndex(port, ":")+1:]
	_, pub := testenv.ConnectPublisher(t, url)
	runs := commitRuns(t, s, 2, 6)
	if _, err := (&relay.Relay{Store: s, Publisher: pub}).Drain(t.Context()); err != nil {
		t.Fatal(err)
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	runs = append(runs, commitRuns(t, s, 2, 9)...)
	ctx, cancel := context.WithCancel(t.Context())
	rl := &relay.Relay{Store: s, Publisher: pub, PublishTimeout: 200 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for rl.Stats().Failures < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := rl.Stats(); st.Failures < 2 || st.Published != 0 {
		t.Fatalf("while NATS is down: %+v, want failures and nothing published", st)
	}
	if rows, _ := s.Unpublished(t.Context(), 100); len(rows) != 18 {
		t.Errorf("while NATS is down %d rows unpublished, want 18", len(rows))
	}

	var portN int
	fmt.Sscan(port, &portN)
	testenv.StartNATS(t, natsbus.EmbeddedOptions{Dir: dir, Port: portN}) // same store dir: the stream and its dedup state survive
	waitDrained(t, s, 15*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 12+18))
}

// In group-marking mode a clean stop (ctx canceled) still marks every row
// that was acked, and nothing more.
func TestRelayCleanStopMarksAcked(t *testing.T) {
	s := testenv.Embedded(t)
	commitRuns(t, s, 2, 30)
	ctx, cancel := context.WithCancel(t.Context())
	pub := &cancelAfterAck{p: &orderingPublisher{t: t, acked: map[string]int64{}}, n: 10, cancel: cancel}
	rl := &relay.Relay{Store: s, Publisher: pub, Concurrency: 1}
	if err := rl.Run(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := s.Unpublished(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 50 || rl.Stats().Published != 10 {
		t.Errorf("after a stop at the 10th ack: %d unpublished, %d marked; want 50 and 10", len(left), rl.Stats().Published)
	}
}

// gatePublisher blocks every Publish until release is closed, telling
// entered once the first call is in flight (so Run is surely active).
type gatePublisher struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	calls   int
}

func (g *gatePublisher) Publish(ctx context.Context, subject, msgID string, body []byte) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	return nil
}

// Defect 7 of issue 7: Drain beside an active Run would publish one run's
// rows from two goroutines, out of order. Drain and a second Run are refused
// while Run is active (ErrRelayRunning, nothing published by them); once Run
// returned, Drain works.
func TestRelayDrainRefusedWhileRunActive(t *testing.T) {
	s := testenv.Embedded(t)
	runs := commitRuns(t, s, 1, 3)
	pub := &gatePublisher{entered: make(chan struct{}), release: make(chan struct{})}
	rl := &relay.Relay{Store: s, Publisher: pub, PollInterval: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	select {
	case <-pub.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Run never published")
	}
	dctx, dcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer dcancel()
	if n, err := rl.Drain(dctx); !errors.Is(err, relay.ErrRelayRunning) || n != 0 {
		t.Errorf("Drain during Run = %d, %v; want 0, ErrRelayRunning", n, err)
	}
	second := make(chan error, 1)
	go func() { second <- rl.Run(ctx) }()
	select {
	case err := <-second:
		if !errors.Is(err, relay.ErrRelayRunning) {
			t.Errorf("second concurrent Run = %v, want ErrRelayRunning", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second concurrent Run did not return: it runs beside the first")
	}
	close(pub.release)
	waitDrained(t, s, 10*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if pub.calls != 3 {
		t.Errorf("%d publishes for 3 rows: the refused Drain/Run published too", pub.calls)
	}
	// After Run returned: Drain publishes what was committed since.
	more := commitRuns(t, s, 1, 6)
	n, err := rl.Drain(dctx)
	if err != nil || n != 6 {
		t.Errorf("Drain after Run = %d, %v; want 6, nil", n, err)
	}
	waitDrained(t, s, time.Second)
	// And Run may start again after it returned.
	ctx2, cancel2 := context.WithCancel(t.Context())
	go func() { done <- rl.Run(ctx2) }()
	commitRuns(t, s, 1, 3)
	waitDrained(t, s, 10*time.Second)
	cancel2()
	if err := <-done; err != nil {
		t.Fatalf("Run after Run: %v", err)
	}
	if st := rl.Stats(); st.Published != 12 {
		t.Errorf("stats %+v, want 12 published (%d runs)", st, len(runs)+len(more)+1)
	}
}
