package service_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// listCountingStore counts the scheduler's rounds (one read of the queue
// without device names each).
type listCountingStore struct {
	*sqlite.Store
	lists atomic.Int64
}

func (s *listCountingStore) QueuedRuns(ctx context.Context, q agent.QueueQuery) ([]agent.Run, error) {
	if len(q.Names) == 0 {
		s.lists.Add(1)
	}
	return s.Store.QueuedRuns(ctx, q)
}

// A scheduler round lists the reachable devices (an adb connection on the
// daemon) only when an unfinished run may start: while every unfinished run
// is driven here, rounds (every Tick, each submit and run end) read the
// runs and stop there; a run waiting for a device makes them list again.
func TestScheduleListsDevicesOnlyForRunsToStart(t *testing.T) {
	f := newFixture(t)
	st := &listCountingStore{Store: f.store}
	var reached atomic.Int64
	svc := f.newService("serve:a", func(c *service.Config) {
		c.Store = st
		reachDevices(hostA, &reached, service.Candidate{Serial: "emulator-5554"})(c)
	})
	start(t, svc)
	a := submit(t, svc, "emulator-5554")
	f.node.waitStarted(t, a)
	lists, reach := st.lists.Load(), reached.Load()
	waitFor(t, "5 scheduler rounds", func() bool { return st.lists.Load() >= lists+5 })
	if n := reached.Load() - reach; n != 0 {
		t.Errorf("%d device listings in rounds with nothing to start, want 0", n)
	}
	// A second run for the busy device waits: rounds list devices again.
	b := submit(t, svc, "emulator-5554")
	waitRounds(t, &reached, 3)
	if got := f.status(b); got != agent.RunPending {
		t.Errorf("run b %s while a holds the device", got)
	}
	f.node.open(a)
	f.node.waitStarted(t, b)
	f.node.open(b)
}
