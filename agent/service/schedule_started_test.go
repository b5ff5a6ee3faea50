package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// startedCountingStore counts a scheduler's rounds (reads of the queue
// without device names) and, among them, its reads of the started runs.
type startedCountingStore struct {
	*sqlite.Store
	rounds, started atomic.Int64
}

func (s *startedCountingStore) QueuedRuns(ctx context.Context, q agent.QueueQuery) ([]agent.Run, error) {
	if len(q.Names) == 0 {
		s.rounds.Add(1)
		if q.Started > 0 {
			s.started.Add(1)
		}
	}
	return s.Store.QueuedRuns(ctx, q)
}

// A daemon whose rounds find another daemon's run in flight reads the
// fleet's started runs once per heartbeat, not at every round (issue 26
// part 4: with 1,000 leased devices that read, by every daemon at every
// tick and every other daemon's NOTIFY, was most of Postgres's time); a
// queued run asked to cancel through it still ends.
func TestStartedRunsReadOncePerHeartbeat(t *testing.T) {
	f := newFixture(t)
	var reachedA, reachedB atomic.Int64
	a := f.newService("serve:host-a:1", reachDevices("host-a", &reachedA, service.Candidate{Serial: "dev-a"}))
	stB := &startedCountingStore{Store: f.store}
	b := f.newService("serve:host-b:1", func(c *service.Config) {
		c.Store = stB
		c.LeaseTTL = 3 * time.Second // heartbeat 1 s; rounds every 20 ms
		reachDevices("host-b", &reachedB, service.Candidate{Serial: "dev-b"})(c)
	})
	start(t, a)
	start(t, b)
	busy := submit(t, a, "host-a/dev-a")
	f.node.waitStarted(t, busy)
	from := time.Now()
	rounds0, started0 := stB.rounds.Load(), stB.started.Load()
	waitFor(t, "40 rounds of daemon b", func() bool { return stB.rounds.Load() >= rounds0+40 })
	rounds, started := stB.rounds.Load()-rounds0, stB.started.Load()-started0
	if most := int64(time.Since(from)/time.Second) + 2; started > most {
		t.Errorf("daemon b read the started runs in %d of %d rounds over %v, want at most %d (once per 1 s heartbeat)",
			started, rounds, time.Since(from).Round(time.Millisecond), most)
	}
	// A queued run canceled through b (a control request recorded there,
	// which makes b's next round read the started runs) ends.
	queued := submit(t, b, "host-a/dev-a")
	if _, err := b.Control(context.Background(), agent.Admin(), queued, agent.KindCancelRequested, 0); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(queued, agent.RunCanceled)
	f.node.open(busy)
	f.waitStatus(busy, agent.RunFinished)
}
