package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

// renewCountingStore counts the renewals a daemon sends: one lease at a
// time (RenewLease) or all of them in one statement (RenewLeases, each
// call's fences).
type renewCountingStore struct {
	*postgres.Store
	mu      sync.Mutex
	singles int
	batches [][]agent.Fence
}

func (s *renewCountingStore) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	s.mu.Lock()
	s.singles++
	s.mu.Unlock()
	return s.Store.RenewLease(ctx, serial, token, ttl)
}

func (s *renewCountingStore) RenewLeases(ctx context.Context, fences []agent.Fence, ttl time.Duration) ([]agent.Lease, []error, error) {
	s.mu.Lock()
	s.batches = append(s.batches, fences)
	s.mu.Unlock()
	return s.Store.RenewLeases(ctx, fences, ttl)
}

// counts returns the single renewals and the batches sent so far.
func (s *renewCountingStore) counts() (int, [][]agent.Fence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.singles, append([][]agent.Fence(nil), s.batches...)
}

// A daemon on a store that renews in batches (Postgres) renews all its
// runs' leases in one statement per heartbeat, never one lease at a time
// (issue 26 part 4: 32,000 leases were 3,200 statements a second), and a
// lease lost under it (released behind its back) stops that lease's run
// alone, at once (its TTL is 30 s: the store's answer stops it, not its
// local expiry): the other runs go on, their leases renewed by the next
// batches. Real Postgres.
func TestLeasesRenewedInOneStatementPerHeartbeat(t *testing.T) {
	url := newPostgresURL(t)
	st := &renewCountingStore{Store: openPostgres(t, url)}
	other := openPostgres(t, url) // the fleet, behind the daemon's back
	const devices = 5
	var cands []service.Candidate
	for i := range devices {
		cands = append(cands, service.Candidate{Serial: fmt.Sprintf("dev-%d", i)})
	}
	var (
		mu      sync.Mutex
		stopped = map[string]error{} // run id -> why its node ended
	)
	release := make(chan struct{})
	node := &agenttest.Node{NodeName: "Hold", Next: agent.End, OnRun: func(ctx context.Context, in agent.NodeInput) {
		select {
		case <-ctx.Done():
			mu.Lock()
			stopped[in.Run.RunID] = ctx.Err()
			mu.Unlock()
		case <-release:
		}
	}}
	g, err := agent.NewGraph("test", "Hold", node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{
		Store: st, Leases: st, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
		Holder: "serve:host-a", HostID: "host-a", SharedLeases: true,
		LeaseTTL: 30 * time.Second, Heartbeat: 300 * time.Millisecond, Tick: 100 * time.Millisecond, RetryAfter: time.Hour, Logf: t.Logf,
		Reachable: servicetest.Reach(func(context.Context) ([]service.Candidate, error) { return cands, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	svc.SetRunner(service.RunnerFunc(func(ctx context.Context, runID string) (agent.RunStatus, error) {
		return eng.Run(ctx, runID, g)
	}))
	start(t, svc)
	defer close(release)
	for i := range devices {
		submitFast(t, svc, fmt.Sprintf("dev-%d", i))
	}
	var leases []agent.Lease
	waitFor(t, "every device leased", func() bool {
		leases, err = st.ActiveLeases(context.Background(), agent.Admin())
		return err == nil && len(leases) == devices
	})
	// Two beats that named every lease: the heartbeat's work is theirs.
	full := func() int {
		_, batches := st.counts()
		n := 0
		for _, b := range batches {
			if len(b) == devices {
				n++
			}
		}
		return n
	}
	waitFor(t, "two batches renewing every lease", func() bool { return full() >= 2 })
	if singles, batches := st.counts(); singles != 0 {
		t.Fatalf("%d leases renewed one at a time beside %d batches, want none", singles, len(batches))
	}

	// One lease lost: another holder's release ends it.
	lost := leases[0]
	if err := other.ReleaseLease(context.Background(), lost.Serial, lost.FencingToken, agent.LeaseHolderLost); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost lease's run to stop", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return stopped[lost.RunID] != nil
	})
	_, before := st.counts()
	waitFor(t, "two more batches", func() bool { _, b := st.counts(); return len(b) >= len(before)+2 })
	active, err := st.ActiveLeases(context.Background(), agent.Admin())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := stopped[lost.RunID]; len(stopped) != 1 || !ok {
		t.Errorf("runs stopped: %v; want only %s's, its lease lost", stopped, lost.RunID)
	}
	renewedSince := 0
	for _, l := range active {
		for _, l0 := range leases[1:] {
			if l.FencingToken == l0.FencingToken && l.RenewedAt.After(l0.RenewedAt) {
				renewedSince++
			}
		}
	}
	if renewedSince != devices-1 {
		t.Errorf("%d of the %d other leases renewed after the loss (active %+v)", renewedSince, devices-1, active)
	}
}
