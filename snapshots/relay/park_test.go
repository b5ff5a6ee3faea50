package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// parkStore is what the poison test needs of a store.
type parkStore interface {
	agent.Store
	agent.ParkedLister
	snapshots.OutboxCounter
}

// commitPoison commits, bypassing submit, a run whose 200 KB projectId of
// '<' (written \u003c by Go's JSON, so each envelope is 1.2 MB, over NATS's
// 1 MiB max_payload) makes every event unpublishable, a run with one such
// event in the middle, and healthy runs behind them. It returns the
// poisoned rows' event ids and the events that must arrive.
func commitPoison(t *testing.T, s agent.Store) (parked map[string]bool, want map[string]bool) {
	t.Helper()
	ctx := context.Background()
	parked, want = map[string]bool{}, map[string]bool{}
	poison := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5554")
	poison.ProjectID = strings.Repeat("<", 200<<10)
	mixed := storetest.NewRun("01HZX0TENANT1234567890", "emulator-5556")
	runs := []agent.Run{poison, mixed}
	for range 3 {
		runs = append(runs, storetest.NewRun("01HZX0TENANT1234567890", "emulator-5558"))
	}
	for _, r := range runs {
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 3 {
		for i, r := range runs {
			st := storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")
			if i == 1 && step == 1 { // the mixed run's second token_delta: a 1.1 MB log line
				st.Events[1] = storetest.Event(r, st.Events[1].Sequence, agent.KindNodeTokenDelta, fmt.Sprintf(`{"line":%q}`, strings.Repeat("x", 1100<<10)))
			}
			if err := s.CommitStep(ctx, st); err != nil {
				t.Fatal(err)
			}
			for j, e := range st.Events {
				if i == 0 || (i == 1 && step == 1 && j == 1) {
					parked[e.EventID] = true
				} else {
					want[e.EventID] = true
				}
			}
		}
	}
	return parked, want
}

// checkParked waits until every wanted event is in the stream and the
// poisoned rows are parked with their reason, out of the queue.
func checkParked(t *testing.T, s parkStore, r *relay.Relay, url string, parked, want map[string]bool) {
	t.Helper()
	_, pub := testenv.ConnectPublisher(t, url)
	got := streamEvents(t, pub.JetStream(), len(want))
	next := map[string]int64{}
	for _, e := range got {
		if !want[e.EventID] {
			t.Errorf("event %s (run %s seq %d) in the stream, want it parked or absent", e.EventID, e.RunID, e.Sequence)
		}
		if e.Sequence <= next[e.RunID] {
			t.Errorf("run %s: sequence %d after %d", e.RunID, e.Sequence, next[e.RunID])
		}
		next[e.RunID] = e.Sequence
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps, err := s.ParkedEvents(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		unpub, nparked, err := s.OutboxCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) == len(parked) && unpub == 0 && nparked == int64(len(parked)) {
			for _, p := range ps {
				if !parked[p.EventID] || !strings.Contains(p.Reason, "max_payload") || p.Bytes < 1<<20 || p.ParkedAt.IsZero() {
					t.Errorf("parked %+v", p)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d parked rows listed, counts unpublished %d parked %d; want %d parked, 0 unpublished", len(ps), unpub, nparked, len(parked))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.Stats().Parked; n != int64(len(parked)) {
		t.Errorf("relay counted %d parked rows, want %d", n, len(parked))
	}
	// What /metrics shows of it.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(relay.Metrics(r)...)
	reg.MustRegister(relay.OutboxMetrics(s)...)
	wantMetrics := fmt.Sprintf("screengraph_outbox_parked_events %d\nscreengraph_relay_parked_total %d\n", len(parked), len(parked))
	shown := ""
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch n := mf.GetName(); n {
		case "screengraph_outbox_parked_events":
			shown += fmt.Sprintf("%s %d\n", n, int64(mf.GetMetric()[0].GetGauge().GetValue()))
		case "screengraph_relay_parked_total":
			shown += fmt.Sprintf("%s %d\n", n, int64(mf.GetMetric()[0].GetCounter().GetValue()))
		case "screengraph_relay_published_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v < float64(len(want)) {
				t.Errorf("%s %v, want at least the %d events in the stream", n, v, len(want))
			}
		}
	}
	if shown != wantMetrics {
		t.Errorf("metrics:\n%s\nwant:\n%s", shown, wantMetrics)
	}
}

// A poison event (over NATS's max_payload) committed directly to the store
// is parked with its reason; the other runs' events, and the poisoned run's
// later healthy events, still arrive on real NATS. Both stores, both relay
// modes (streaming on the embedded store, claims on Postgres; pipelined and
// one by one).
func TestRelayParksPoisonEvents(t *testing.T) {
	cases := []struct {
		name     string
		open     func(t *testing.T) parkStore
		oneByOne bool
	}{
		{"embedded/stream", func(t *testing.T) parkStore { return testenv.Embedded(t) }, false},
		{"embedded/one-by-one", func(t *testing.T) parkStore { return testenv.Embedded(t) }, true},
		{"postgres/claims-pipelined", func(t *testing.T) parkStore { return testenv.Postgres(t) }, false},
		{"postgres/claims-one-by-one", func(t *testing.T) parkStore { return testenv.Postgres(t) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := c.open(t)
			_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
			_, pub := testenv.ConnectPublisher(t, url)
			parked, want := commitPoison(t, s)
			r := &relay.Relay{Store: s, Publisher: pub, OneByOne: c.oneByOne, MaxBackoff: 100 * time.Millisecond, PollInterval: 50 * time.Millisecond}
			startRelay(t, r, nil)
			checkParked(t, s, r, url, parked, want)
		})
	}
}
