package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// LeaseStore is a store that keeps device leases too (both of ours do), so
// a step's commit can be fenced by a lease.
type LeaseStore interface {
	agent.Store
	agent.Leases
}

// RunFencing runs the fencing contract: a Step carrying a Fence commits only
// while that lease is active and unexpired; a stale holder's commit writes
// nothing and wraps agent.ErrLeaseLost.
func RunFencing(t *testing.T, newStore func(t *testing.T, clock agent.Clock) LeaseStore) {
	t.Run("CommitUnderLiveLease", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		s := newStore(t, c)
		r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
		l := mustAcquire(t, s, "emulator-5554", "daemon-1", r.RunID, leaseTTL)
		st := NodeStep(r, 1, 0, "EnsureDevice")
		st.Fence = &agent.Fence{Serial: l.Serial, Token: l.FencingToken}
		mustCommit(t, s, st)
		// Renewed past its first expiry: still good.
		c.Advance(20 * time.Second)
		if _, err := s.RenewLease(ctx(t), l.Serial, l.FencingToken, leaseTTL); err != nil {
			t.Fatal(err)
		}
		c.Advance(20 * time.Second)
		st = NodeStep(r, 4, 1, "ProvisionApp")
		st.Fence = &agent.Fence{Serial: l.Serial, Token: l.FencingToken}
		mustCommit(t, s, st)
	})
	refused := func(t *testing.T, s LeaseStore, r agent.Run, f agent.Fence, what string) {
		t.Helper()
		_, evBefore, obBefore, snBefore := state(t, s, r.RunID)
		st := NodeStep(r, int64(len(evBefore))+1, snBefore, "ProvisionApp")
		st.Fence = &f
		st.StatusFrom, st.StatusTo = []agent.RunStatus{agent.RunPending, agent.RunRunning}, agent.RunRunning
		err := s.CommitStep(ctx(t), st)
		if !errors.Is(err, agent.ErrLeaseLost) {
			t.Fatalf("%s: CommitStep = %v, want ErrLeaseLost", what, err)
		}
		status, evAfter, obAfter, snAfter := state(t, s, r.RunID)
		if len(evAfter) != len(evBefore) || len(obAfter) != len(obBefore) || snAfter != snBefore || status != r.Status {
			t.Errorf("%s: a refused commit wrote: events %d->%d, outbox %d->%d, snapshots %d->%d, status %s->%s",
				what, len(evBefore), len(evAfter), len(obBefore), len(obAfter), snBefore, snAfter, r.Status, status)
		}
	}
	t.Run("ExpiredLeaseRefused", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		s := newStore(t, c)
		r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
		l := mustAcquire(t, s, "emulator-5554", "daemon-1", r.RunID, leaseTTL)
		c.Advance(leaseTTL + time.Second) // expired, not taken over yet
		refused(t, s, r, agent.Fence{Serial: l.Serial, Token: l.FencingToken}, "expired lease")
	})
	t.Run("TakenOverLeaseRefused", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		s := newStore(t, c)
		r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
		old := mustAcquire(t, s, "emulator-5554", "daemon-1", r.RunID, leaseTTL)
		c.Advance(handOut)
		nl := mustAcquire(t, s, "emulator-5554", "daemon-2", r.RunID, leaseTTL)
		refused(t, s, r, agent.Fence{Serial: old.Serial, Token: old.FencingToken}, "taken-over lease")
		// The new holder commits.
		st := NodeStep(r, 1, 0, "EnsureDevice")
		st.Fence = &agent.Fence{Serial: nl.Serial, Token: nl.FencingToken}
		mustCommit(t, s, st)
	})
	t.Run("ReleasedOrUnknownLeaseRefused", func(t *testing.T) {
		c := NewClock(leaseEpoch)
		s := newStore(t, c)
		r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
		l := mustAcquire(t, s, "emulator-5554", "daemon-1", r.RunID, leaseTTL)
		refused(t, s, r, agent.Fence{Serial: l.Serial, Token: l.FencingToken + 1}, "unknown token")
		refused(t, s, r, agent.Fence{Serial: "emulator-5556", Token: l.FencingToken}, "token of another device")
		if err := s.ReleaseLease(ctx(t), l.Serial, l.FencingToken, agent.LeaseShutdown); err != nil {
			t.Fatal(err)
		}
		refused(t, s, r, agent.Fence{Serial: l.Serial, Token: l.FencingToken}, "released lease")
	})
}
