package natsbus_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
)

// orderedRows are n events each of runs, interleaved run by run (the order
// a relay may hand them over), run r's event s with eventId "<r>-<s>".
func orderedRows(tenant string, runs []string, from map[string]int, n int) []agent.OutboxRow {
	var rows []agent.OutboxRow
	for s := 1; s <= n; s++ {
		for _, run := range runs {
			if s < from[run] {
				continue
			}
			rows = append(rows, agent.OutboxRow{RunID: run, Sequence: int64(s), EventID: fmt.Sprintf("%s-%d", run, s),
				Subject: snapshots.Subject(tenant, run, "node.finished"), Body: []byte(`{}`)})
		}
	}
	return rows
}

// runSeqs reads the stream's messages of tenant and returns each run's event
// sequences in stream order.
func runSeqs(t *testing.T, js jetstream.JetStream, tenant string) map[string][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, snapshots.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	subj := snapshots.SubjectPrefix + "." + tenant + ".>"
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, n := range info.State.Subjects {
		want += n
	}
	cons, err := js.OrderedConsumer(ctx, snapshots.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for got := uint64(0); got < want; {
		batch, err := cons.Fetch(int(want-got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			run, seq, _ := strings.Cut(m.Headers().Get(jetstream.MsgIDHeader), "-")
			s, _ := strconv.Atoi(seq)
			out[run] = append(out[run], s)
		}
		if n == 0 {
			t.Fatalf("read %d of %d messages", got, want)
		}
		got += uint64(n)
	}
	return out
}

// PublishOrdered's window, delivered the way a failing cluster delivers it:
// some messages lost, some stored late (a reconnect buffer flushed after the
// relay gave up on their acks, a slow proposal), in any order, between the
// relay's next windows. Whatever the schedule, each run's events are in the
// stream in sequence order, each once. The conditions are evaluated by a
// real nats-server. Before a row's condition named only its own run's
// predecessor, a late row of run A chained on run B's row was stored right
// after B's row came in as the next window's head, ahead of A's lost rows
// (TestRelayFleetOrderUnderNATSFailures saw 24, 27…120, 25, 26).
// SCREENGRAPH_ORDER_SEED replays a schedule.
func TestPublishOrderedLateDeliveryKeepsRunOrder(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SCREENGRAPH_ORDER_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = s
	}
	t.Logf("seed %d (SCREENGRAPH_ORDER_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	js := pub.JetStream()
	ctx := t.Context()
	deliver := func(m *nats.Msg) bool {
		_, err := js.PublishMsg(ctx, m)
		return err == nil // stored or a duplicate of a stored event
	}
	const trials, n = 250, 6
	runs := []string{"A", "B", "C"}
	for trial := range trials {
		tenant := fmt.Sprintf("t%d", trial)
		acked := map[string]int{"A": 0, "B": 0, "C": 0} // the relay's belief: acknowledged prefix
		var late []*nats.Msg
		flushLate := func(k int) {
			rng.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
			k = min(k, len(late))
			for _, m := range late[:k] {
				deliver(m)
			}
			late = late[k:]
		}
		for round := 0; round < 6; round++ {
			from := map[string]int{}
			for _, r := range runs {
				from[r] = acked[r] + 1
			}
			// Each window takes the runs in its own order, as claims do.
			order := append([]string(nil), runs...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			rows := orderedRows(tenant, order, from, n)
			if len(rows) == 0 {
				break
			}
			okRun := map[string]bool{"A": true, "B": true, "C": true}
			for _, m := range natsbus.WindowMsgs(rows) {
				if rng.IntN(2) == 0 {
					flushLate(1 + rng.IntN(2))
				}
				run, seq, _ := strings.Cut(m.Header.Get(jetstream.MsgIDHeader), "-")
				switch x := rng.IntN(10); {
				case x < 2: // lost
					okRun[run] = false
				case x < 4: // stored late, if at all; its ack never reaches the relay
					late = append(late, m)
					okRun[run] = false
				default:
					s, _ := strconv.Atoi(seq)
					if deliver(m) && okRun[run] && s == acked[run]+1 {
						acked[run] = s
					} else {
						okRun[run] = false
					}
				}
			}
		}
		flushLate(len(late))
		// The relay finishes one row at a time per run, each after the
		// previous one's ack (PublishOrdered's fallback).
		for _, r := range runs {
			for s := acked[r] + 1; s <= n; s++ {
				row := orderedRows(tenant, []string{r}, map[string]int{r: s}, s)
				if err := pub.Publish(ctx, row[0].Subject, row[0].EventID, row[0].Body); err != nil {
					t.Fatal(err)
				}
			}
		}
		for run, seqs := range runSeqs(t, js, tenant) {
			want := []int{1, 2, 3, 4, 5, 6}
			if fmt.Sprint(seqs) != fmt.Sprint(want) {
				t.Fatalf("trial %d: run %s is %v in the stream, want %v (seed %d)", trial, run, seqs, want, seed)
			}
		}
	}
}

// The schedule the fleet test met, step by step: window 1 (runs A and C) is
// lost or late but for nothing, window 2 takes C first and its head C1 is
// stored, then window 1's late rows arrive. None of them may land before
// A1: A2 must not follow C1.
func TestPublishOrderedLateRowAfterOtherRunsHead(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	js := pub.JetStream()
	ctx := t.Context()
	w1 := natsbus.WindowMsgs(orderedRows("t1", []string{"A", "C"}, map[string]int{}, 2))
	w2 := natsbus.WindowMsgs(orderedRows("t1", []string{"C", "A"}, map[string]int{}, 2))
	if id := w2[0].Header.Get(jetstream.MsgIDHeader); id != "C-1" {
		t.Fatalf("window 2 starts with %s", id)
	}
	if _, err := js.PublishMsg(ctx, w2[0]); err != nil { // window 2's head; the rest of it is lost
		t.Fatal(err)
	}
	for _, m := range w1 { // window 1, late: A1 was lost on the way
		if m.Header.Get(jetstream.MsgIDHeader) != "A-1" {
			_, _ = js.PublishMsg(ctx, m) // rejections expected
		}
	}
	got := runSeqs(t, js, "t1")
	if a := got["A"]; len(a) > 0 && a[0] != 1 {
		t.Fatalf("run A is %v in the stream: a late row landed before A1", a)
	}
	if c := got["C"]; len(c) > 0 && c[0] != 1 {
		t.Fatalf("run C is %v in the stream", c)
	}
}

// PublishOrdered pipelines a window of several runs: every row is stored
// (acknowledged), each run in order, and a row's condition names only its
// own run's previous row.
func TestPublishOrderedConditionsNameOwnRun(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	rows := orderedRows("t1", []string{"A", "B", "C"}, map[string]int{}, 5)
	ok, err := pub.PublishOrdered(t.Context(), rows)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range ok {
		if !o {
			t.Errorf("row %s not acknowledged", rows[i].EventID)
		}
	}
	for run, seqs := range runSeqs(t, pub.JetStream(), "t1") {
		if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
			t.Errorf("run %s: %v", run, seqs)
		}
	}
	for _, m := range natsbus.WindowMsgs(rows) {
		id := m.Header.Get(jetstream.MsgIDHeader)
		run, seq, _ := strings.Cut(id, "-")
		exp := m.Header.Get(jetstream.ExpectedLastMsgIDHeader)
		s, _ := strconv.Atoi(seq)
		switch {
		case s == 1 && exp != "":
			t.Errorf("%s: the run's first row in the window carries a condition %q", id, exp)
		case s > 1 && exp != fmt.Sprintf("%s-%d", run, s-1):
			t.Errorf("%s: condition %q, want its own run's previous row", id, exp)
		}
	}
}

// The publisher of an external NATS (LazyPublisher) never chains rows
// across calls: the streaming relay's chain names other runs' rows, which
// keeps order only on the in-process server (see chain.go). Each publisher
// says so in its declared capabilities, which are all the relay reads.
func TestExternalPublisherDoesNotChain(t *testing.T) {
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	nc, pub := testenv.ConnectPublisher(t, url)
	lazy := snapshots.PublisherCapabilitiesOf(natsbus.NewLazyPublisher(nc, natsbus.StreamConfig()))
	if lazy.Chain != nil || lazy.Ordered == nil || lazy.Tail == nil || lazy.Payload == nil {
		t.Errorf("LazyPublisher declares %+v; want windows, tail and payload limit, no chain", lazy)
	}
	own := snapshots.PublisherCapabilitiesOf(pub)
	if own.Chain == nil || own.Ordered == nil || own.Tail == nil || own.Payload == nil {
		t.Errorf("JetStreamPublisher declares %+v; want all four", own)
	}
	hidden := snapshots.PublisherCapabilitiesOf(struct{ agent.Publisher }{pub})
	if hidden != (snapshots.PublisherCapabilities{}) {
		t.Errorf("a wrapper hiding the publisher declares %+v; want none", hidden)
	}
}

// A duplicate ack counts as published only when it names the stored
// message's stream sequence; a clustered server acks an eventId it saw
// proposed but never stored without one.
func TestDuplicateAckWithoutSequenceIsNotStored(t *testing.T) {
	for _, c := range []struct {
		ack    jetstream.PubAck
		stored bool
	}{
		{jetstream.PubAck{Sequence: 7}, true},
		{jetstream.PubAck{Sequence: 7, Duplicate: true}, true},
		{jetstream.PubAck{Duplicate: true}, false},
	} {
		if err := natsbus.ProvenStored(&c.ack); (err == nil) != c.stored {
			t.Errorf("ack %+v: err %v, want stored=%v", c.ack, err, c.stored)
		}
	}
}

// A window already grouped by run is sent as it is; any other order is
// regrouped.
func TestGroupedWindows(t *testing.T) {
	w := func(runs ...string) []agent.OutboxRow {
		var rows []agent.OutboxRow
		for _, r := range runs {
			rows = append(rows, agent.OutboxRow{RunID: r})
		}
		return rows
	}
	for _, c := range []struct {
		rows []agent.OutboxRow
		want bool
	}{
		{w(), true}, {w("A"), true}, {w("A", "A", "B", "C", "C"), true},
		{w("A", "B", "A"), false}, {w("A", "B", "C", "A"), false},
	} {
		if got := natsbus.Grouped(c.rows); got != c.want {
			t.Errorf("%v: grouped %v, want %v", c.rows, got, c.want)
		}
	}
}
