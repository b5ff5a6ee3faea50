package service

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// tickQueue is a fleet's queue as a round reads it: the oldest PENDING run
// of the fleet is oldest (a run of a device this daemon does not reach);
// each read by name is recorded, and finds nothing.
type tickQueue struct {
	*agenttest.Store
	oldest agent.Run
	reads  [][]string
}

func (q *tickQueue) QueuedRuns(_ context.Context, qq agent.QueueQuery) ([]agent.Run, error) {
	if len(qq.Names) > 0 {
		q.reads = append(q.reads, slices.Clone(qq.Names))
		return nil, nil
	}
	return []agent.Run{q.oldest}, nil
}
func (*tickQueue) SeeDevices(context.Context, []string) error { return nil }
func (*tickQueue) UnseenRuns(context.Context, time.Duration, int) ([]agent.Run, error) {
	return nil, nil
}
func (*tickQueue) CountQueued(context.Context, string, int) (int, error) { return 0, nil }

type fixedReach []Candidate

func (f fixedReach) Candidates(context.Context) ([]Candidate, error) { return f, nil }

// noLeases: this test's rounds take no lease (no run it sees is of a
// device it reaches); a call would panic on the nil port.
type noLeases struct{ agent.Leases }

type noPrepare struct{}

func (noPrepare) Prepare(context.Context, string, string, []byte) (agent.Run, error) {
	return agent.Run{}, fmt.Errorf("no submits here")
}

// A tick's round reads the queue for every free device only when the
// fleet's oldest PENDING run was already the oldest at the last tick (it
// waited a whole tick: its wake-up did not start it), or when no round read
// every name for a heartbeat; a run younger than a tick is its wake-up's
// (issue 26 part 4: in a steady stream of short runs some run of the fleet
// is nearly always PENDING, and every daemon's tick read every name every
// second). Rounds woken by names read those names, as before.
func TestTickReadsEveryNameOnlyForARunLeftBehind(t *testing.T) {
	store := agenttest.NewStore()
	q := &tickQueue{Store: store}
	var cands fixedReach
	for i := range 10 {
		cands = append(cands, Candidate{Serial: fmt.Sprintf("dev-%d", i)})
	}
	s, err := New(Config{Store: q, Leases: noLeases{}, Prepare: noPrepare{}, NewID: func() string { return "x" },
		Holder: "serve:a", HostID: "host-a", Reachable: cands, Heartbeat: time.Hour, LeaseTTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.namedWakes = true // as loop sets it over a store that filters its signals
	pending := func(id string) agent.Run {
		return agent.Run{RunID: id, TenantID: "T", Status: agent.RunPending, Serial: "host-z/dev-99", CreatedAt: time.Now()}
	}
	round := func(what, oldest string, only map[string]bool, tick bool, wantNames int) {
		t.Helper()
		q.oldest, q.reads = pending(oldest), nil
		if err := s.schedule(t.Context(), only, tick); err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, r := range q.reads {
			got += len(r)
		}
		if got != wantNames {
			t.Errorf("%s: the queue read for %d names (%v), want %d", what, got, q.reads, wantNames)
		}
	}
	all := 2 * len(cands) // each device's serial and host-a/serial
	round("the first round", "r1", nil, false, all)
	s.takeWoken() // as the loop does after each round
	s.ticked = true
	only, tick := s.takeWoken()
	if only == nil || len(only) != 0 || !tick {
		t.Fatalf("takeWoken after a tick alone: %v %v, want an empty set and the tick", only, tick)
	}
	round("a tick, the oldest run new since the last tick", "r2", only, tick, 0)
	round("a tick, the same oldest run", "r2", map[string]bool{}, true, all)
	round("a tick, a newer oldest run", "r3", map[string]bool{}, true, 0)
	round("a wake-up naming dev-4", "r4", map[string]bool{"dev-4": true}, false, 2)
	round("a wake-up naming dev-5 and the tick, the oldest new", "r5", map[string]bool{"dev-5": true}, true, 2)
	s.allReadAt = time.Now().Add(-time.Hour) // no round read every name for a heartbeat
	round("a tick a heartbeat after the last full read", "r6", map[string]bool{}, true, all)
	round("a tick right after it", "r7", map[string]bool{}, true, 0)
	s.wokenAll, s.ticked = true, true
	only, tick = s.takeWoken()
	if only != nil || tick {
		t.Fatalf("takeWoken after Wake and a tick: %v %v, want every name", only, tick)
	}
	round("Wake and a tick", "r8", only, tick, all)
	s.ticked = true
	if only, tick = s.takeWoken(); only == nil || !tick {
		t.Fatalf("takeWoken after a tick alone: %v %v", only, tick)
	}
	s.namedWakes = false // a store whose signals name nothing
	s.ticked = true
	if only, tick = s.takeWoken(); only != nil || tick {
		t.Fatalf("takeWoken after a tick without named wake-ups: %v %v, want every name", only, tick)
	}
}
