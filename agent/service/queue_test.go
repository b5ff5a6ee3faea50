package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// prepareTenant accepts {"serial": S, "tenant": T}.
func prepareTenant(_ context.Context, runID string, body []byte) (agent.Run, error) {
	var req struct{ Serial, Tenant string }
	if err := json.Unmarshal(body, &req); err != nil || req.Serial == "" {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$: not a run request")
	}
	return agent.Run{RunID: runID, Serial: req.Serial, Graph: "test", Input: body, TenantID: req.Tenant, PolicyVersion: 1}, nil
}

func submitFor(t *testing.T, svc *service.Service, tenant, serial string) string {
	t.Helper()
	r, err := svc.Submit(context.Background(), agent.Admin(), []byte(fmt.Sprintf(`{"serial":%q,"tenant":%q}`, serial, tenant)))
	if err != nil {
		t.Fatal(err)
	}
	return r.RunID
}

// graphRunner makes the service drive runs with agent.GraphRunner, which
// can also fail a run before it starts (service.Failer).
func (f *fixture) graphRunner(svc *service.Service) {
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	svc.SetRunner(agent.GraphRunner{Engine: eng, Graph: f.graph})
}

// A tenant's backlog on a device does not hold back another tenant's run
// submitted after it: when the device frees, the run of the tenant with
// fewer runs in flight takes it (issue 23 item 5, fair share). Without the
// fair share, b's run waited behind all of a's.
func TestScheduleFairShareBetweenTenants(t *testing.T) {
	f := newFixture(t)
	var rounds atomic.Int64
	svc := f.newService("serve:"+hostA, func(c *service.Config) {
		c.Prepare = servicetest.Prepare(prepareTenant)
		reachDevices(hostA, &rounds, service.Candidate{Serial: "d1", Model: "Pixel_7"})(c)
	})
	start(t, svc)
	first := submitFor(t, svc, "a", "Pixel 7")
	f.node.waitStarted(t, first)
	var backlog []string
	for range 5 {
		backlog = append(backlog, submitFor(t, svc, "a", "d1"))
	}
	other := submitFor(t, svc, "b", "pixel_7")
	waitRounds(t, &rounds, 3)
	f.node.open(first)
	f.node.waitStarted(t, other) // before a's second run
	f.node.open(other)
	for _, id := range backlog {
		f.node.waitStarted(t, id) // then a's, in submission order
		f.node.open(id)
	}
}

// A run naming a device no daemon reached for PendingTimeout fails once,
// device_not_found, without a lease; a run naming a device that is
// reached but busy keeps waiting (issue 23 item 5).
func TestPendingTimeoutFailsUnseenDevice(t *testing.T) {
	f := newFixture(t)
	var rounds atomic.Int64
	svc := f.newService("serve:"+hostA, func(c *service.Config) {
		reachDevices(hostA, &rounds, service.Candidate{Serial: "d1"})(c)
		c.PendingTimeout = 300 * time.Millisecond
	})
	f.graphRunner(svc)
	start(t, svc)
	busy := submit(t, svc, "d1")
	f.node.waitStarted(t, busy)
	waits := submit(t, svc, "d1")
	ghost := submit(t, svc, "no-such-device")
	waitFor(t, "the run of the unseen device FAILED", func() bool { return f.status(ghost) == agent.RunFailed })
	evs, err := f.store.Events(context.Background(), agent.Admin(), ghost, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Kind != agent.KindRunStarted || evs[1].Kind != agent.KindRunFailed {
		t.Fatalf("events of the timed-out run: %v, want started, failed", evs)
	}
	var p agent.RunEndedPayload
	if err := json.Unmarshal(evs[1].Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p.ErrorID == nil || *p.ErrorID != agent.ErrDeviceNotFound {
		t.Fatalf("failed event %s, want errorId device_not_found", evs[1].Payload)
	}
	if ls, err := f.store.LeaseHistory(context.Background(), agent.Admin(), ""); err != nil || len(ls) != 1 || ls[0].RunID != busy {
		t.Fatalf("lease history %v (%v), want only the busy run's", ls, err)
	}
	waitRounds(t, &rounds, 5)
	if st := f.status(waits); st != agent.RunPending {
		t.Fatalf("run waiting for the reached, busy device is %s, want PENDING", st)
	}
	f.node.open(busy)
	f.node.waitStarted(t, waits)
	f.node.open(waits)
}

// MaxPendingPerTenant refuses a tenant's run past the cap with
// ErrQueueFull (HTTP 429), stores nothing, and leaves other tenants alone.
func TestMaxPendingPerTenant(t *testing.T) {
	f := newFixture(t)
	svc := f.newService("serve:a", func(c *service.Config) {
		c.Prepare = servicetest.Prepare(prepareTenant)
		c.MaxPendingPerTenant = 2
	})
	// Not started: every run stays PENDING.
	submitFor(t, svc, "a", "x")
	submitFor(t, svc, "a", "y")
	_, err := svc.Submit(context.Background(), agent.Admin(), []byte(`{"serial":"z","tenant":"a"}`))
	var ae *agent.Error
	if !errors.Is(err, service.ErrQueueFull) || !errors.As(err, &ae) || !ae.Retryable {
		t.Fatalf("third run of tenant a: %v, want a retryable ErrQueueFull", err)
	}
	submitFor(t, svc, "b", "x")
	runs, _ := f.store.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	if len(runs) != 3 {
		t.Fatalf("%d runs stored, want 3", len(runs))
	}
}
