package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
)

// onePolicy is an agent.PolicySource holding one *policy.Policy.
type onePolicy struct{ p *policy.Policy }

func (s onePolicy) Policy(_ context.Context, v int) (agent.RetryPolicy, error) {
	if v != 0 && v != s.p.PolicyVersion {
		return nil, fmt.Errorf("policy version %d: %w", v, agent.ErrNotFound)
	}
	return s.p, nil
}

// noDriver fails the test if EnsureDevice gets as far as Appium.
type noDriver struct {
	device.Driver
	t *testing.T
}

func (d noDriver) CreateSession(context.Context, map[string]any) (device.Session, error) {
	d.t.Error("CreateSession on a device that never booted")
	return device.Session{}, agent.Errorf(agent.ErrInternal, "unexpected")
}

// TestEnsureDeviceNeverBootsIsBootTimeoutOnce runs the setup graph through the
// engine against the never-boots simulator profile behind the REAL adb server,
// with a policy whose EnsureDevice timeout (3 s) is shorter than the node's
// boot wait (bootTimeoutMillis left at its 120 s default): the boot wait must
// end inside the node's deadline, so the run fails once with boot_timeout,
// retryable false, instead of the node's retryable timeout retried by the
// policy (3 attempts).
func TestEnsureDeviceNeverBootsIsBootTimeoutOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := simtest.StartADBServer(t)
	emu, _ := simtest.Launch(t, srv, simtest.Profile(t, "never-boots"))
	serial := emu.Serial()
	srv.WaitState(t, serial, "device", 10*time.Second)

	pol := policy.Default()
	pol.Timeouts[policy.NodeEnsureDevice] = policy.Duration(3 * time.Second)
	pol.Retries.InitialBackoff, pol.Retries.MaxBackoff = policy.Duration(10*time.Millisecond), policy.Duration(10*time.Millisecond)
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	ac := adb.New(srv.Addr())
	g, err := nodes.NewSetupGraph(nodes.SetupDeps{
		Ports:     nodes.Ports{Driver: noDriver{t: t}, Resolve: adbdevice.NewResolver(ac, adbdevice.ReconnectGrace), ADBServerPort: srv.Port},
		DeviceFor: func(s string) device.Device { return adbdevice.NewADBDevice(ac, s) },
		Sessions:  &nodes.MemorySessions{},
	})
	if err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(map[string]any{
		"ensureDevice":   map[string]any{"deviceConfiguration": map[string]any{"platformName": "Android", "deviceName": serial}},
		"provisionApp":   map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app"}},
		"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": "com.example.app"}},
		"waitIdle":       map[string]any{},
	})
	st := agenttest.NewStore()
	run := agent.Run{RunID: "01JNEVERBOOTS0000000000000", TenantID: "t", Graph: nodes.SetupGraphName, Serial: serial,
		PolicyVersion: pol.PolicyVersion, Input: input}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	eng := &agent.Engine{Store: st, Policies: onePolicy{pol}, AbandonGrace: time.Second}
	start := time.Now()
	status, err := eng.Run(ctx, run.RunID, g)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if status != agent.RunFailed {
		t.Fatalf("status %s", status)
	}
	finished := nodeFinished(t, st, run.RunID)
	if len(finished) != 1 {
		for _, f := range finished {
			t.Logf("attempt %d: %v %v", f.Attempt, deref(f.ErrorID), deref(f.HumanReadableFailureSummary))
		}
		t.Fatalf("EnsureDevice ran %d times, want once", len(finished))
	}
	f := finished[0]
	if f.NodeName != nodes.NodeEnsureDevice || deref(f.ErrorID) != agent.ErrBootTimeout || f.Retryable == nil || *f.Retryable ||
		f.RetryBackoffMillis != nil {
		t.Errorf("finished %s: errorId %v retryable %v backoff %v (%v)", f.NodeName, deref(f.ErrorID), deref(f.Retryable),
			f.RetryBackoffMillis, deref(f.HumanReadableFailureSummary))
	}
	// The node ends at its 3 s timeout (plus the run's own writes): far from
	// the minutes of the boot wait it would run without one.
	if took >= 2*3*time.Second {
		t.Errorf("run took %v with a 3 s node timeout", took)
	}
	t.Logf("never-boots: %s after %v: %s", deref(f.ErrorID), took.Round(time.Millisecond), deref(f.HumanReadableFailureSummary))
}

// nodeFinished returns the agent.node.finished payloads of a run, in order.
func nodeFinished(t *testing.T, st *agenttest.Store, runID string) []agent.NodeFinishedPayload {
	t.Helper()
	var out []agent.NodeFinishedPayload
	for _, ev := range st.AllEvents(runID) {
		if ev.Kind != agent.KindNodeFinished {
			continue
		}
		var p agent.NodeFinishedPayload
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
