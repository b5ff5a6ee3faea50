package service

import (
	"context"
	"sync"

	"github.com/screengraph/screengraph-agent/agent"
)

// notifyingStore wraps the Store to wake event followers after each commit
// and to tell observers (metrics) what was committed.
// Wake-ups are per run: a commit wakes only the followers of its run, not
// every follower of every run.
type notifyingStore struct {
	agent.Store
	mu sync.Mutex
	// runs holds, per run someone waits on, the channel closed at the
	// run's next commit (removed when closed).
	runs map[string]chan struct{}
	// all, when someone waits on it, is closed at the next commit, status
	// change or new run of any run (FollowRuns); nil otherwise.
	all       chan struct{}
	observers []func(agent.Step)
}

// anyChanged returns a channel closed at the next commit, status change or
// new run of any run.
func (n *notifyingStore) anyChanged() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.all == nil {
		n.all = make(chan struct{})
	}
	return n.all
}

func (n *notifyingStore) wakeAll() {
	n.mu.Lock()
	if n.all != nil {
		close(n.all)
		n.all = nil
	}
	n.mu.Unlock()
}

func (n *notifyingStore) CreateRun(ctx context.Context, r agent.Run) error {
	if err := n.Store.CreateRun(ctx, r); err != nil {
		return err
	}
	n.wakeAll()
	return nil
}

func newNotifyingStore(st agent.Store) *notifyingStore {
	return &notifyingStore{Store: st, runs: map[string]chan struct{}{}}
}

// changed returns a channel closed at the run's next commit or status change.
func (n *notifyingStore) changed(runID string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.runs[runID]
	if !ok {
		ch = make(chan struct{})
		n.runs[runID] = ch
	}
	return ch
}

func (n *notifyingStore) notify(s agent.Step) {
	n.mu.Lock()
	if ch, ok := n.runs[s.RunID]; ok {
		close(ch)
		delete(n.runs, s.RunID)
	}
	if n.all != nil {
		close(n.all)
		n.all = nil
	}
	obs := n.observers
	n.mu.Unlock()
	for _, o := range obs {
		o(s)
	}
}

func (n *notifyingStore) CommitStep(ctx context.Context, s agent.Step) error {
	if err := n.Store.CommitStep(ctx, s); err != nil {
		return err
	}
	n.notify(s)
	return nil
}

func (n *notifyingStore) SetStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) error {
	if err := n.Store.SetStatus(ctx, runID, from, to); err != nil {
		return err
	}
	n.notify(agent.Step{RunID: runID, StatusTo: to})
	return nil
}

// Observe registers f to see every committed step (after the commit).
func (s *Service) Observe(f func(agent.Step)) {
	s.store.mu.Lock()
	s.store.observers = append(s.store.observers, f)
	s.store.mu.Unlock()
}
