package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// A node that runs long is seen while it runs: its agent.node.started is
// committed within the live delay (500 ms) of its start and each progress
// line within LiveProgressInterval (1 s) of being reported, long before
// the node ends; the stream stays well-formed. A short node still commits
// its whole step in one transaction.
func TestLiveProgressWhileNodeRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := &agenttest.Node{NodeName: "Boot"}
		slow.OnRun = func(ctx context.Context, in agent.NodeInput) {
			for i := range 10 { // 10 s of waiting, a line every second
				in.Progress(agent.Log("waiting %d", i))
				time.Sleep(time.Second)
			}
		}
		quick := &agenttest.Node{NodeName: "Quick", Deltas: []agent.TokenDelta{agent.Log("done quickly")}}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0)), slow, quick)
		start := time.Now()
		type seen struct {
			kind string
			text string
			at   time.Duration
		}
		var log []seen
		watch := make(chan struct{})
		go func() {
			defer close(watch)
			n := 0
			for {
				evs := f.store.AllEvents(testRunID)
				for _, e := range evs[n:] {
					var p struct {
						Text string `json:"text"`
					}
					json.Unmarshal(e.Payload, &p)
					log = append(log, seen{e.Kind, p.Text, time.Since(start)})
				}
				n = len(evs)
				if n > 0 && evs[n-1].Kind == agent.KindRunFinished {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		status, err := f.run(t)
		<-watch
		if err != nil || status != agent.RunFinished {
			t.Fatalf("%s %v", status, err)
		}
		checkStream(t, f.store, status)
		var startedAt time.Duration = -1
		lines := 0
		for _, s := range log {
			switch {
			case s.kind == agent.KindNodeStarted && startedAt < 0:
				startedAt = s.at
			case s.kind == agent.KindNodeTokenDelta && s.text != "done quickly":
				// Line i was reported at i s after the start: seen by the
				// next commit at most LiveProgressInterval later (plus the
				// watcher's 100 ms poll).
				var i int
				if _, err := fmt.Sscanf(s.text, "waiting %d", &i); err != nil {
					t.Fatal(err)
				}
				if max := time.Duration(i)*time.Second + agent.LiveProgressInterval + 600*time.Millisecond; s.at > max {
					t.Errorf("line %q seen at %v, after %v", s.text, s.at, max)
				}
				lines++
			case s.kind == agent.KindNodeFinished && lines < 5:
				t.Errorf("Boot finished at %v with only %d of its lines seen before", s.at, lines)
			}
		}
		if startedAt < 0 || startedAt > 700*time.Millisecond {
			t.Errorf("Boot's node.started seen at %v, want within the 500 ms live delay", startedAt)
		}
		if lines != 10 {
			t.Errorf("saw %d of the 10 lines", lines)
		}
		// Quick (no time passes) committed started, its line and finished
		// in its step's one commit: the store's last commits are that step
		// and the run's end.
		evs := f.store.AllEvents(testRunID)
		k := len(evs)
		if evs[k-4].Kind != agent.KindNodeStarted || evs[k-3].Kind != agent.KindNodeTokenDelta || evs[k-2].Kind != agent.KindNodeFinished {
			t.Fatalf("Quick's group: %s %s %s", evs[k-4].Kind, evs[k-3].Kind, evs[k-2].Kind)
		}
	})
}

// A daemon stop during a node whose start was committed live leaves its
// group open; the next pass closes it with agent.node.finished FAILURE
// interrupted (retryable) before anything else, and runs the node again
// under a new resumeToken. A step that honors a policy switch commits its
// started with its snapshot (the switch is taken only there).
func TestLiveProgressDiscardedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &agenttest.Node{NodeName: "Boot"}
		block := true
		n.OnRun = func(ctx context.Context, in agent.NodeInput) {
			in.Progress(agent.Log("booting"))
			if block {
				<-ctx.Done()
				return
			}
		}
		f := newFixture(t, agenttest.NewPolicies(policy(1, 1, 0), policy(2, 1, 0)), n)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := f.eng.Run(ctx, testRunID, f.graph); done <- err }()
		time.Sleep(2 * time.Second) // the live delay passes: started and the line commit
		synctest.Wait()
		evs := f.store.AllEvents(testRunID)
		if k := evs[len(evs)-1].Kind; k != agent.KindNodeTokenDelta {
			t.Fatalf("last event while Boot runs: %s", k)
		}
		stop()
		if err := <-done; err == nil {
			t.Fatal("stopped pass returned no error")
		}
		checkStreamOpen(t, f.store, agent.RunRunning, true)

		// A policy switch pending at the next boundary: the next attempt's
		// started names it and commits with the step's snapshot.
		switchID := f.control(t, agent.KindPolicySwitchRequested, 2)
		block = false
		status, err := f.run(t)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("%s %v", status, err)
		}
		view := checkStream(t, f.store, status)
		var kinds []string
		var closed bool
		for i, v := range view {
			kinds = append(kinds, v.Kind)
			if v.Kind == agent.KindNodeFinished && v.Payload["errorId"] == string(agent.ErrInterrupted) {
				closed = true
				if v.Payload["retryable"] != true || v.Payload["nodeExecutionOutcomeStatus"] != string(agent.OutcomeFailure) {
					t.Errorf("closing event: %v", v.Payload)
				}
				next := view[i+1]
				if next.Kind != agent.KindNodeStarted || next.Payload["resumeToken"] == view[1].Payload["resumeToken"] {
					t.Errorf("after the closing event: %s %v", next.Kind, next.Payload)
				}
				if ids := appliedIDs(next.Payload); len(ids) != 1 || ids[0] != switchID {
					t.Errorf("the retried attempt's started applies %v, want the switch %s", ids, switchID)
				}
			}
		}
		if !closed {
			t.Fatalf("the discarded attempt was not closed: %v", kinds)
		}
	})
}
