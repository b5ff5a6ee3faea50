package service_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
)

// Two daemons on one store, each reaching one device: a run submitted to
// either is executed by the daemon that reaches its device.
func TestRunGoesToTheDaemonThatReachesItsDevice(t *testing.T) {
	f := newFixture(t)
	reach := func(serials ...string) func(*service.Config) {
		return func(c *service.Config) {
			c.HolderPrefix = ""
			c.Reachable = servicetest.Reach(func(context.Context) ([]service.Candidate, error) {
				var out []service.Candidate
				for _, s := range serials {
					out = append(out, service.Candidate{Serial: s})
				}
				return out, nil
			})
		}
	}
	a := f.newService("serve:host-a:1", reach("dev-a"))
	b := f.newService("serve:host-b:1", reach("dev-b"))
	start(t, a)
	start(t, b)
	ra := submit(t, b, "dev-a") // submitted to the daemon that cannot reach it
	rb := submit(t, a, "dev-b")
	rc := submit(t, a, "dev-c") // nobody reaches dev-c: it waits PENDING
	for _, id := range []string{ra, rb} {
		f.node.open(id)
	}
	f.waitStatus(ra, agent.RunFinished)
	f.waitStatus(rb, agent.RunFinished)
	for serial, holder := range map[string]string{"dev-a": "serve:host-a:1", "dev-b": "serve:host-b:1"} {
		h := f.history(serial)
		if len(h) != 1 || h[0].Holder != holder {
			t.Errorf("lease history of %s: %+v, want one lease of %s", serial, h, holder)
		}
	}
	if s := f.status(rc); s != agent.RunPending {
		t.Errorf("run for an unreachable device is %s, want PENDING", s)
	}
	if h := f.history("dev-c"); len(h) != 0 {
		t.Errorf("unreachable device was leased: %+v", h)
	}
}

// A holder whose lease was taken over cannot commit: the engine's commit
// carries the stale fencing token and the store refuses it, writing nothing.
func TestStaleFenceCommitsNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	svc := f.newService("serve:test:1", nil)
	r := submit(t, svc, "dev-a")
	old, err := f.store.AcquireLease(ctx, "dev-a", "serve:test:1", r, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.ReleaseLease(ctx, "dev-a", old.FencingToken, agent.LeaseHolderLost); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.AcquireLease(ctx, "dev-a", "serve:other:1", r, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	f.node.open(r)
	eng := &agent.Engine{Store: svc.Store(), Policies: agenttest.NewPolicies(&agenttest.Policy{V: 1}), PollInterval: 10 * time.Millisecond}
	_, err = eng.Run(agent.WithFence(ctx, agent.Fence{Serial: "dev-a", Token: old.FencingToken}), r, f.graph)
	if !errors.Is(err, agent.ErrLeaseLost) {
		t.Fatalf("engine under a stale fence: %v, want ErrLeaseLost", err)
	}
	if kinds := f.kinds(r); len(kinds) != 0 {
		t.Errorf("a stale holder committed %v", kinds)
	}
	if s := f.status(r); s != agent.RunPending {
		t.Errorf("run is %s, want PENDING", s)
	}
}

// failNode fails every attempt with device_offline (not retried).
type failNode struct{ runs atomic.Int64 }

func (n *failNode) Name() string { return "Work" }
func (n *failNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	n.runs.Add(1)
	return agent.NodeResult{Output: &agenttest.Output{Echo: "work", Attempt: in.Attempt}, Err: agent.Errorf(agent.ErrDeviceOffline, "device offline")}
}

// Three runs in a row FAILED on a device for a device reason quarantine it:
// the next run waits PENDING until the health probe passes.
func TestRepeatedlyFailingDeviceIsQuarantined(t *testing.T) {
	f := newFixture(t)
	node := &failNode{}
	g, err := agent.NewGraph("test", "Work", node)
	if err != nil {
		t.Fatal(err)
	}
	f.graph = g
	var healthy atomic.Bool
	var probes atomic.Int64
	svc := f.newService("serve:test:1", func(c *service.Config) {
		c.ProbeEvery = 50 * time.Millisecond
		c.Devices = oneDevice("dev-a")
		c.Probe = servicetest.Probe(func(ctx context.Context, serial string) error {
			probes.Add(1)
			if serial != "dev-a" {
				t.Errorf("probed %s", serial)
			}
			if !healthy.Load() {
				return errors.New("adb shell echo: device offline")
			}
			return nil
		})
	})
	start(t, svc)
	var ids []string
	for range 3 {
		id := submit(t, svc, "dev-a")
		f.waitStatus(id, agent.RunFailed)
		ids = append(ids, id)
	}
	waitFor(t, "the device reported in quarantine", func() bool {
		devs, err := svc.Devices(context.Background(), agent.Admin())
		return err == nil && len(devs) == 1 && devs[0].Quarantined && devs[0].QuarantineReason != ""
	})
	fourth := submit(t, svc, "dev-a")
	waitFor(t, "two failing probes", func() bool { return probes.Load() >= 2 })
	if s := f.status(fourth); s != agent.RunPending {
		t.Fatalf("run on a quarantined device is %s, want PENDING", s)
	}
	if n := node.runs.Load(); n != 3 {
		t.Errorf("the node ran %d times, want 3 (none on the quarantined device)", n)
	}
	healthy.Store(true)
	f.waitStatus(fourth, agent.RunFailed)
	if n := node.runs.Load(); n != 4 {
		t.Errorf("the node ran %d times, want 4", n)
	}
}

type oneDevice string

func (d oneDevice) Devices(context.Context) ([]service.Device, error) {
	return []service.Device{{Serial: string(d), State: "device", BootReady: true}}, nil
}
