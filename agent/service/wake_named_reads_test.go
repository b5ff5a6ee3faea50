package service_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// nameReadingStore records the device names of each read of the queue by
// name (agent.QueueQuery.Names).
type nameReadingStore struct {
	*postgres.Store
	mu    sync.Mutex
	reads [][]string
}

func (s *nameReadingStore) QueuedRuns(ctx context.Context, q agent.QueueQuery) ([]agent.Run, error) {
	if len(q.Names) > 0 {
		s.mu.Lock()
		s.reads = append(s.reads, slices.Clone(q.Names))
		s.mu.Unlock()
	}
	return s.Store.QueuedRuns(ctx, q)
}

// take returns the reads recorded since the last take.
func (s *nameReadingStore) take() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads
	s.reads = nil
	return r
}

// A round woken by the queue's named signals alone reads the queue for
// the devices they named, not for every device of the host (issue 26
// part 4: that read, 100 names per wake-up, was the largest statement of
// BenchmarkFleetControlPlane): a run submitted on another daemon, a run
// submitted here, and a device freed by its run's end each read that
// device's names. Real Postgres (its NOTIFYs); the tick is an hour, so
// every round here is a wake-up's.
func TestWakeReadsOnlyNamedDevices(t *testing.T) {
	url := newPostgresURL(t)
	listening, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { listening.Close() })
	st := &nameReadingStore{Store: listening}
	other := openPostgres(t, url) // another daemon's store: its NOTIFY wakes st's
	var cands []service.Candidate
	for i := range 20 {
		cands = append(cands, service.Candidate{Serial: fmt.Sprintf("dev-%02d", i)})
	}
	ran := make(chan string, 4)
	node := &agenttest.Node{NodeName: "Work", Next: agent.End, OnRun: func(_ context.Context, in agent.NodeInput) { ran <- in.Run.RunID }}
	g, err := agent.NewGraph("test", "Work", node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{
		Store: st, Leases: st.Store, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
		Holder: "serve:host-a", HostID: "host-a", SharedLeases: true, LeaseTTL: 30 * time.Second, Tick: time.Hour, Logf: t.Logf,
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
	// A first run makes the daemon list its devices (and read the queue
	// for all of them: a round before the first listing names nothing).
	waitRun := func(id string) {
		t.Helper()
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran %s, want %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %s did not start (queue reads %v)", id, st.take())
		}
		waitFor(t, "run "+id+" to finish", func() bool {
			r, err := st.GetRun(context.Background(), agent.Admin(), id)
			return err == nil && r.Status == agent.RunFinished
		})
	}
	waitRun(submitFast(t, svc, "dev-00"))
	// Its end reads nothing more: no run is queued (a round reads the
	// queue by name only when the fleet has one).
	st.take()

	// The named devices so far (a run's end, a named wake-up for its
	// device, may be read after the next phase began).
	allowed := []string{"dev-00", "host-a/dev-00"}
	check := func(what string, device string) {
		t.Helper()
		allowed = append(allowed, device, agent.DeviceKey("host-a", device))
		for _, names := range st.take() {
			for _, n := range names {
				if !slices.Contains(allowed, n) {
					t.Errorf("%s: a read of the queue for %v, want only %v", what, names, allowed)
					break
				}
			}
		}
	}
	// Another daemon's run for dev-07: its NOTIFY names dev-07.
	r := storetest.NewRun("T", "dev-07")
	r.Graph = "test" // this daemon's engine runs the test graph
	if err := other.CreateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	waitRun(r.RunID)
	check("a run submitted elsewhere", "dev-07")
	// A run submitted here for dev-11.
	waitRun(submitFast(t, svc, "dev-11"))
	check("a run submitted here", "dev-11")
}

// submitFast submits a run for serial through svc. Unlike submit, it
// accepts any status: this test's one-node graph may finish the run before
// Submit re-reads it.
func submitFast(t *testing.T, svc *service.Service, serial string) string {
	t.Helper()
	r, err := svc.Submit(context.Background(), agent.Admin(), []byte(fmt.Sprintf(`{"serial":%q}`, serial)))
	if err != nil {
		t.Fatal(err)
	}
	return r.RunID
}
