package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
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

// deadLeases is a daemon's lease store that stops answering (a partitioned
// or frozen daemon: every call fails, no ErrLeaseLost) once dead is set.
type deadLeases struct {
	agent.Leases
	dead atomic.Bool
}

var errPartitioned = errors.New("store unreachable (partitioned)")

func (d *deadLeases) AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	if d.dead.Load() {
		return agent.Lease{}, errPartitioned
	}
	return d.Leases.AcquireLease(ctx, device, holder, runID, ttl)
}

func (d *deadLeases) RenewLease(ctx context.Context, serial string, token int64, ttl time.Duration) (agent.Lease, error) {
	if d.dead.Load() {
		return agent.Lease{}, errPartitioned
	}
	return d.Leases.RenewLease(ctx, serial, token, ttl)
}

func (d *deadLeases) ReleaseLease(ctx context.Context, serial string, token int64, reason agent.LeaseReleaseReason) error {
	if d.dead.Load() {
		return errPartitioned
	}
	return d.Leases.ReleaseLease(ctx, serial, token, reason)
}

// On real Postgres, with the started runs read once per heartbeat: a
// daemon cut off from the store mid-run leaves its lease to expire; another
// daemon reaching the device takes the run over only after the expiry
// (the store's clock), with a greater fencing token, the old lease ended
// `expired`, and drives the run to FINISHED; the cut-off daemon's commits
// under its old token are refused.
func TestStartedRunTakenOverAfterExpiryOnPostgres(t *testing.T) {
	url := newPostgresURL(t)
	st := openPostgres(t, url)
	var blocking atomic.Bool
	blocking.Store(true)
	started := make(chan string, 4)
	node := &agenttest.Node{NodeName: "Work", Next: agent.End, OnRun: func(ctx context.Context, in agent.NodeInput) {
		started <- in.Run.RunID
		if blocking.Load() {
			<-ctx.Done() // the lease lost ends the attempt
		}
	}}
	g, err := agent.NewGraph("test", "Work", node)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	newDaemon := func(holder string, leases agent.Leases) *service.Service {
		svc, err := service.New(service.Config{
			Store: st, Leases: leases, Prepare: servicetest.Prepare(prepare), NewID: func() string { return ulid.Make().String() },
			Holder: holder, HostID: "host-1", SharedLeases: true, LeaseTTL: ttl, Tick: 20 * time.Millisecond,
			RetryAfter: 50 * time.Millisecond, Logf: t.Logf,
			Reachable: servicetest.Reach(func(context.Context) ([]service.Candidate, error) {
				return []service.Candidate{{Serial: "dev-x"}}, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
		svc.SetRunner(service.RunnerFunc(func(ctx context.Context, runID string) (agent.RunStatus, error) {
			return eng.Run(ctx, runID, g)
		}))
		start(t, svc)
		return svc
	}
	la := &deadLeases{Leases: st}
	a := newDaemon("serve:a", la)
	r := submit(t, a, "dev-x")
	<-started
	held, err := st.ActiveLeases(context.Background(), agent.Admin())
	if err != nil || len(held) != 1 || held[0].Holder != "serve:a" {
		t.Fatalf("active leases %+v (%v), want serve:a's", held, err)
	}
	old := held[0]
	la.dead.Store(true) // a is cut off: no renewal, no release, no new lease
	blocking.Store(false)
	newDaemon("serve:b", st)
	deadline := time.Now().Add(ttl + 5*time.Second)
	for {
		run, err := st.GetRun(context.Background(), agent.Admin(), r)
		if err == nil && run.Status == agent.RunFinished {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s (%v), want FINISHED by serve:b", r, run.Status, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	hist, err := st.LeaseHistory(context.Background(), agent.Admin(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 {
		t.Fatalf("lease history %+v, want a's and b's", hist)
	}
	a0, b0 := hist[0], hist[1]
	// The same run's lease held by another holder, expired: holder_lost
	// (agent.Leases.AcquireLease).
	if a0.FencingToken != old.FencingToken || a0.ReleaseReason != agent.LeaseHolderLost || a0.ReleasedAt == nil {
		t.Errorf("a's lease %+v, want it ended %s by the takeover", a0, agent.LeaseHolderLost)
	}
	if b0.Holder != "serve:b" || b0.FencingToken <= old.FencingToken {
		t.Errorf("b's lease %+v, want serve:b's with a token above %d", b0, old.FencingToken)
	}
	if b0.AcquiredAt.Before(a0.ExpiresAt) {
		t.Errorf("b took the device at %v, before a's lease expired at %v", b0.AcquiredAt, a0.ExpiresAt)
	}
	// a's commits under its old token are refused (the fence).
	run, err := st.GetRun(context.Background(), agent.Admin(), r)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := st.LastSequence(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	step := storetest.NodeStep(run, seq+1, 99, "Work")
	step.Fence = &agent.Fence{Serial: old.Serial, Token: old.FencingToken}
	if err := st.CommitStep(context.Background(), step); !errors.Is(err, agent.ErrLeaseLost) {
		t.Errorf("a commit under a's old token: %v, want ErrLeaseLost", err)
	}
}
