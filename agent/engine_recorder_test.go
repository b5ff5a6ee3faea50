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
}

func (f *fakeRecorder) NodeStarting(_ context.Context, req agent.RecordRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start:"+req.Node)
	f.recording = true
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

// TestRecorderHooks: the engine tells the recorder before each node, stops
// it while the run is paused (a paused run records nothing), and drops it
// when Run returns; a cancel stops it before the run is CANCELED.
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
		if got, want := rec.log(), "start:EnsureDevice pause start:ProvisionApp drop:"+testRunID; got != want {
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
		if !strings.Contains(rec.log(), "start:EnsureDevice pause drop:") {
			t.Fatalf("recorder calls %q: want the recording stopped (pause) before the cancel, dropped after", rec.log())
		}
	})
}
