package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// fakeRecorder logs what the engine tells it, in order, and whether it is
// recording (between NodeStarting and Pause/Drop).
type fakeRecorder struct {
	mu        sync.Mutex
	calls     []string
	recording bool
	onStart   func(agent.RecordRequest) // called under mu
}

func (f *fakeRecorder) NodeStarting(_ context.Context, req agent.RecordRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := "start:"
	if req.Ahead {
		call = "ahead:"
	}
	f.calls = append(f.calls, call+req.Node)
	f.recording = true
	if f.onStart != nil {
		f.onStart(req)
	}
}

func (f *fakeRecorder) Pause(context.Context, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recording {
		f.calls = append(f.calls, "pause")
	}
	f.recording = false
}

func (f *fakeRecorder) Drop(_ context.Context, runID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "drop:"+runID)
	f.recording = false
}

func (f *fakeRecorder) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, " ")
}

func (f *fakeRecorder) isRecording() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recording
}

// TestRecorderHooks: the engine tells the recorder before each node (and
// ahead, as soon as the node before it succeeded), stops it while the run
// is paused (a paused run records nothing), and drops it when Run returns;
// a cancel stops it before the run is CANCELED.
func TestRecorderHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		rec := &fakeRecorder{}
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindPauseRequested, 0) }
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		f.eng.Recorder = rec
		done := make(chan agent.RunStatus, 1)
		go func() { s, _ := f.run(t); done <- s }()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if rec.isRecording() {
			t.Fatalf("recording while paused: %s", rec.log())
		}
		f.control(t, agent.KindResumeRequested, 0)
		if s := <-done; s != agent.RunFinished {
			t.Fatalf("run %s", s)
		}
		if got, want := rec.log(), "start:EnsureDevice ahead:ProvisionApp pause start:ProvisionApp drop:"+testRunID; got != want {
			t.Fatalf("recorder calls %q, want %q", got, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var f *fixture
		rec := &fakeRecorder{}
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		a.OnRun = func(context.Context, agent.NodeInput) { f.control(t, agent.KindCancelRequested, 0) }
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f = newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		f.eng.Recorder = rec
		if s, err := f.run(t); err != nil || s != agent.RunCanceled {
			t.Fatalf("run %s %v", s, err)
		}
		if !strings.Contains(rec.log(), "start:EnsureDevice ahead:ProvisionApp pause drop:") {
			t.Fatalf("recorder calls %q: want the recording stopped (pause) before the cancel, dropped after", rec.log())
		}
	})
}

// meetStore holds the commit of EnsureDevice's step until the recorder has
// been told of the next node, up to a bound: the recording's start (a round
// trip to the device) overlaps the step's commit instead of following it.
type meetStore struct {
	agent.Store
	told  chan struct{}
	bound time.Duration
	met   []bool
}

func (m *meetStore) CommitStep(ctx context.Context, st agent.Step) error {
	if st.Snapshot != nil && st.Snapshot.NodeName == "EnsureDevice" {
		select {
		case <-m.told:
			m.met = append(m.met, true)
		case <-time.After(m.bound):
			m.met = append(m.met, false)
		}
	}
	return m.Store.CommitStep(ctx, st)
}

// TestRecorderStartsWhileStepCommits: the next node's NodeStarting runs
// while the step before it commits, and the node still runs only after
// it returned (its recording started).
func TestRecorderStartsWhileStepCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &fakeRecorder{}
		a := &agenttest.Node{NodeName: "EnsureDevice"}
		b := &agenttest.Node{NodeName: "ProvisionApp"}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), a, b)
		ms := &meetStore{Store: f.eng.Store, told: make(chan struct{}), bound: 10 * time.Second}
		f.eng.Store = ms
		var once sync.Once
		rec.onStart = func(req agent.RecordRequest) {
			if req.Node == "ProvisionApp" {
				once.Do(func() { close(ms.told) })
			}
		}
		startedBeforeRun := false
		b.OnRun = func(context.Context, agent.NodeInput) { startedBeforeRun = strings.Contains(rec.log(), "ProvisionApp") }
		f.eng.Recorder = rec
		if s, err := f.run(t); err != nil || s != agent.RunFinished {
			t.Fatalf("run %s %v", s, err)
		}
		if len(ms.met) != 1 || !ms.met[0] {
			t.Fatalf("EnsureDevice's step committed without the recorder told of ProvisionApp (met %v): calls %q", ms.met, rec.log())
		}
		if !startedBeforeRun {
			t.Fatalf("ProvisionApp ran before its recording started: calls %q", rec.log())
		}
	})
}
