package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// streamSeed is the seed of the streaming relay's fault tests:
// SCREENGRAPH_RELAY_SEED replays one.
func streamSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SCREENGRAPH_RELAY_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (SCREENGRAPH_RELAY_SEED=%d replays it)", seed, seed)
	return seed
}

// commitWhile commits steps of n runs from n goroutines (one per run, as
// engines do), steps per run, pausing a random 0-3 ms between steps; it
// returns the runs and a wait for the committers. The runs belong to two
// tenants in turn, so the streaming relay's chain changes tenant (its
// condition then names a stream sequence, not an eventId) as well as run.
func commitWhile(t *testing.T, s agent.Store, rng *rand.Rand, n, steps int) ([]agent.Run, func()) {
	t.Helper()
	var runs []agent.Run
	pauses := make([][]time.Duration, n)
	for i := range n {
		r := storetest.NewRun(fmt.Sprintf("01HZX0TENANT123456789%d", i%2), fmt.Sprintf("emulator-%d", 5554+2*i))
		if err := s.CreateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
		for range steps {
			pauses[i] = append(pauses[i], time.Duration(rng.IntN(3000))*time.Microsecond)
		}
	}
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for step := range steps {
				if err := s.CommitStep(context.Background(), storetest.NodeStep(r, int64(1+3*step), step, "EnsureDevice")); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(pauses[i][step])
			}
		}()
	}
	return runs, wg.Wait
}

// Rows committed while the relay streams reach the stream exactly once and
// in sequence order per run, also when the NATS server goes away mid-stream
// (rows in flight are lost or rejected) and comes back: the relay settles
// what is out, marks what was stored, resets its chain and streams on.
func TestRelayStreamsThroughNATSRestart(t *testing.T) {
	rng := rand.New(rand.NewPCG(streamSeed(t), 1))
	s := testenv.Embedded(t)
	dir := t.TempDir()
	ns, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{Dir: dir})
	port, _ := strconv.Atoi(url[strings.LastIndex(url, ":")+1:])
	_, pub := testenv.ConnectPublisher(t, url)
	rl := &relay.Relay{Store: s, Publisher: pub, PublishTimeout: 300 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, PollInterval: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()

	runs, wait := commitWhile(t, s, rng, 8, 40) // 960 events
	time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
	ns.Shutdown()
	ns.WaitForShutdown()
	time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	testenv.StartNATS(t, natsbus.EmbeddedOptions{Dir: dir, Port: port})
	wait()
	waitDrained(t, s, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := rl.Stats(); st.Failures == 0 || st.Published != 960 {
		t.Errorf("relay %+v: want failures while NATS was down and 960 rows marked", st)
	}
	checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 960))
}

// A clean stop in the middle of streaming marks every row the stream
// acknowledged, and only those: the stream holds exactly the rows marked
// published.
func TestRelayStreamCleanStopMarksAcked(t *testing.T) {
	rng := rand.New(rand.NewPCG(streamSeed(t), 2))
	s := testenv.Embedded(t)
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	_, pub := testenv.ConnectPublisher(t, url)
	rl := &relay.Relay{Store: s, Publisher: pub}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	runs, wait := commitWhile(t, s, rng, 6, 30) // 540 events
	time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wait()
	left, err := s.Unpublished(t.Context(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	marked := 540 - len(left)
	if int64(marked) != rl.Stats().Published {
		t.Errorf("%d rows marked in the store, the relay counts %d", marked, rl.Stats().Published)
	}
	got := streamEvents(t, pub.JetStream(), marked)
	inStream := map[string]bool{}
	for _, e := range got {
		inStream[e.EventID] = true
	}
	for _, row := range left {
		if inStream[row.EventID] {
			t.Errorf("run %s sequence %d is in the stream but not marked published", row.RunID, row.Sequence)
		}
	}
	// The rest streams on after a restart, each row once.
	relay2 := &relay.Relay{Store: s, Publisher: pub}
	ctx2, cancel2 := context.WithCancel(t.Context())
	go func() { done <- relay2.Run(ctx2) }()
	waitDrained(t, s, 10*time.Second)
	cancel2()
	<-done
	checkExactlyOnceInOrder(t, s, runs, streamEvents(t, pub.JetStream(), 540))
}

// Two daemons with embedded stores publishing to one NATS server break each
// other's chains: each relay then goes pass by pass (PublishOrdered, with its
// one-row-at-a-time fallback), and every event of both still reaches the
// stream once, in order per run.
func TestRelayStreamSharedStreamFallsBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(streamSeed(t), 3))
	_, url := testenv.StartNATS(t, natsbus.EmbeddedOptions{})
	var (
		stores []*sqlite.Store
		relays []*relay.Relay
		runs   [][]agent.Run
		waits  []func()
		pub    *natsbus.JetStreamPublisher
	)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 2)
	for range 2 {
		s := testenv.Embedded(t)
		_, p := testenv.ConnectPublisher(t, url) // a connection of its own, as another daemon has
		pub = p
		r := &relay.Relay{Store: s, Publisher: p, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
		go func() { done <- r.Run(ctx) }()
		stores, relays = append(stores, s), append(relays, r)
	}
	// Both daemons commit at once, once both are up: opening a store
	// (its migrations) takes longer than one daemon's 160 commits, which
	// would otherwise be published before the other's relay began.
	for _, s := range stores {
		rs, wait := commitWhile(t, s, rng, 4, 40)
		runs, waits = append(runs, rs), append(waits, wait)
	}
	for i := range 2 {
		waits[i]()
		waitDrained(t, stores[i], 30*time.Second)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if relays[0].Stats().PassByPass+relays[1].Stats().PassByPass == 0 {
		t.Errorf("stats %+v %+v: neither relay went pass by pass", relays[0].Stats(), relays[1].Stats())
	}
	got := streamEvents(t, pub.JetStream(), 2*480)
	byStore := [2][]agent.Event{}
	of := map[string]int{}
	for i, rs := range runs {
		for _, r := range rs {
			of[r.RunID] = i
		}
	}
	for _, e := range got {
		byStore[of[e.RunID]] = append(byStore[of[e.RunID]], e)
	}
	for i := range 2 {
		checkExactlyOnceInOrder(t, stores[i], runs[i], byStore[i])
	}
}
