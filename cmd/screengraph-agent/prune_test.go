package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// `runs prune --older-than` on the data dir of a store another process (a
// daemon) has open: old ended runs go, the one with an unpublished outbox
// row stays, a recent one stays.
func TestRunsPrune(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := storetest.NewClock(time.Now().Add(-48 * time.Hour))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agent.db"), sqlite.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	end := func(withEvents bool) agent.Run {
		r := storetest.NewRun("local", "emulator-5554")
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		if withEvents {
			if err := st.CommitStep(ctx, storetest.NodeStep(r, 1, 0, "EnsureDevice")); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SetStatus(ctx, r.RunID, []agent.RunStatus{agent.RunPending}, agent.RunFinished); err != nil {
			t.Fatal(err)
		}
		return r
	}
	old, held := end(false), end(true)
	clock.Advance(47 * time.Hour)
	recent := end(false)

	cmd := &runsPruneCmd{tokenStoreFlags: tokenStoreFlags{DataDir: dir}, outputFlag: outputFlag{Output: "json"}, OlderThan: 24 * time.Hour, BatchSize: 500}
	if err := cmd.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetRun(ctx, agent.Admin(), old.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("old ended run: %v, want pruned", err)
	}
	for _, r := range []agent.Run{held, recent} {
		if _, err := st.GetRun(ctx, agent.Admin(), r.RunID); err != nil {
			t.Errorf("run %s pruned: %v", r.RunID, err)
		}
	}
	if evs, _ := st.Events(ctx, agent.Admin(), held.RunID, 0); len(evs) != 3 {
		t.Errorf("held run has %d events, want 3", len(evs))
	}
	bad := &runsPruneCmd{tokenStoreFlags: tokenStoreFlags{DataDir: dir}, BatchSize: 500}
	if err := bad.Run(ctx); err == nil {
		t.Error("--older-than 0 accepted")
	}
}
