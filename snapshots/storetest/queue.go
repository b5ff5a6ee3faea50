package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// QueueStore is a store with the scheduler's queue.
type QueueStore interface {
	agent.Store
	agent.RunQueue
	agent.StoreClock
}

// RunQueue runs the agent.RunQueue contract against stores made by
// newStore: a fresh, empty, migrated store per call whose times come from
// clock.
func RunQueue(t *testing.T, newStore func(t *testing.T, clock agent.Clock) QueueStore) {
	t.Run("QueuedRunsPerNameAndTenant", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		testQueuedRuns(t, newStore(t, c), c)
	})
	t.Run("UnseenRuns", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		testUnseenRuns(t, newStore(t, c), c)
	})
}

// queueRun stores a PENDING run of tenant naming device, at the clock's
// time, and moves the clock on by a millisecond (queue order).
func queueRun(t *testing.T, s agent.Store, c *Clock, tenant, device string) agent.Run {
	t.Helper()
	r := agent.Run{RunID: ulid.Make().String(), TenantID: tenant, Serial: device, Status: agent.RunPending, Graph: "g"}
	if err := s.CreateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Millisecond)
	return r
}

func testQueuedRuns(t *testing.T, s QueueStore, c *Clock) {
	ctx := context.Background()
	a1 := queueRun(t, s, c, "a", "Pixel 7")
	a2 := queueRun(t, s, c, "a", "pixel_7")
	queueRun(t, s, c, "a", " PIXEL_7 ")
	a4 := queueRun(t, s, c, "a", "emulator-5554")
	b1 := queueRun(t, s, c, "b", "Pixel_7")
	running := queueRun(t, s, c, "c", "pixel_7")
	if err := s.SetStatus(ctx, running.RunID, []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
		t.Fatal(err)
	}
	// Tenant a's backlog does not hide tenant b's run; a RUNNING run is not queued.
	got, err := s.QueuedRuns(ctx, agent.QueueQuery{Names: []string{"PIXEL 7", "pixel_7"}, PerTenant: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a1.RunID, a2.RunID, b1.RunID}; !slices.Equal(runIDs(got), want) {
		t.Errorf("QueuedRuns(pixel 7, 2 per tenant) = %v, want %v", runIDs(got), want)
	}
	got, err = s.QueuedRuns(ctx, agent.QueueQuery{Names: []string{"Pixel_7"}, PerTenant: 1, MaxTenants: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a1.RunID}; !slices.Equal(runIDs(got), want) {
		t.Errorf("QueuedRuns(1 tenant) = %v, want %v", runIDs(got), want)
	}
	got, err = s.QueuedRuns(ctx, agent.QueueQuery{Names: []string{"emulator-5554"}, Oldest: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a1.RunID, a4.RunID}; !slices.Equal(runIDs(got), want) {
		t.Errorf("QueuedRuns(emulator-5554 + oldest 1) = %v, want %v", runIDs(got), want)
	}
	if got[0].CreatedAt.IsZero() || !got[0].CreatedAt.Equal(leaseEpoch.UTC().Truncate(time.Microsecond)) {
		t.Errorf("created at %v, want the store's clock %v", got[0].CreatedAt, leaseEpoch.UTC())
	}
	got, err = s.QueuedRuns(ctx, agent.QueueQuery{Started: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{running.RunID}; !slices.Equal(runIDs(got), want) {
		t.Errorf("QueuedRuns(started) = %v, want the RUNNING run %v", runIDs(got), want)
	}
	for _, upTo := range []int{2, 10} {
		n, err := s.CountQueued(ctx, "a", upTo)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(upTo, 4); n != want {
			t.Errorf("CountQueued(a, %d) = %d, want %d", upTo, n, want)
		}
	}
}

func testUnseenRuns(t *testing.T, s QueueStore, c *Clock) {
	ctx := context.Background()
	gone := queueRun(t, s, c, "a", "gone-device")
	here := queueRun(t, s, c, "b", "Pixel 7")
	c.Advance(5 * time.Minute)
	if err := s.SeeDevices(ctx, []string{"pixel_7", "emulator-5554", "PIXEL_7"}); err != nil {
		t.Fatal(err)
	}
	unseen := func(after time.Duration) []string {
		t.Helper()
		rs, err := s.UnseenRuns(ctx, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		return runIDs(rs)
	}
	if got := unseen(10 * time.Minute); len(got) != 0 {
		t.Errorf("unseen after 5 min of 10: %v, want none", got)
	}
	c.Advance(6 * time.Minute) // 11 min queued; pixel 7 seen 6 min ago
	if got, want := unseen(10*time.Minute), []string{gone.RunID}; !slices.Equal(got, want) {
		t.Errorf("unseen after 11 min = %v, want %v (only the device nobody reached)", got, want)
	}
	c.Advance(5 * time.Minute) // pixel 7 last seen 11 min ago
	if got, want := unseen(10*time.Minute), []string{gone.RunID, here.RunID}; !slices.Equal(got, want) {
		t.Errorf("unseen after 16 min = %v, want %v", got, want)
	}
	now, err := s.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.Now().UTC().Truncate(time.Microsecond); !now.Equal(want) {
		t.Errorf("StoreNow = %v, want the store's clock %v", now, want)
	}
}
