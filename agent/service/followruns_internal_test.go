package service

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
)

// listCounting counts ListRuns calls.
type listCounting struct {
	agent.Store
	lists atomic.Int64
}

func (l *listCounting) ListRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	l.lists.Add(1)
	return l.Store.ListRuns(ctx, sc, f)
}

// followRuns (GET /v1/runs?follow=1) sends the runs of its scope only, each
// change once; a burst of changes costs one listing, and a quiet stream
// lists once per poll (plus the gap), never faster.
func TestFollowRunsScopeAndCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := &listCounting{Store: agenttest.NewStore()}
		st := newNotifyingStore(cs)
		ctx, cancel := context.WithCancel(context.Background())
		now := time.Now().UTC()
		create := func(tenant string) string {
			r := agent.Run{RunID: ulid.Make().String(), TenantID: tenant, Status: agent.RunPending, Serial: "emulator-5554", Graph: "g",
				Input: []byte(`{}`), PolicyVersion: 1, CreatedAt: now, UpdatedAt: now}
			if err := st.CreateRun(ctx, r); err != nil {
				t.Fatal(err)
			}
			return r.RunID
		}
		first := create("acme")
		create("beta")
		var mu sync.Mutex
		sent := map[string]int{}
		sc, _ := agent.Tenant("acme")
		done := make(chan error, 1)
		go func() {
			done <- followRuns(ctx, st, sc, agent.RunFilter{}, st.anyChanged, time.Second, 500*time.Millisecond, func(r agent.Run) error {
				mu.Lock()
				defer mu.Unlock()
				if r.TenantID != "acme" {
					t.Errorf("tenant acme's stream sent run %s of %s", r.RunID, r.TenantID)
				}
				sent[r.RunID]++
				return nil
			})
		}()
		synctest.Wait()
		if n := cs.lists.Load(); n != 1 || sent[first] != 1 {
			t.Fatalf("at start: %d listings, run sent %d times; want 1 and 1", n, sent[first])
		}
		var burst []string
		for range 20 {
			burst = append(burst, create("acme"))
			create("beta")
			synctest.Wait() // the follower takes each wake-up as it comes
		}
		time.Sleep(600 * time.Millisecond) // past the gap: the burst's one listing
		synctest.Wait()
		if n := cs.lists.Load(); n != 2 {
			t.Errorf("a burst of 40 new runs cost %d listings in all, want 2", n)
		}
		mu.Lock()
		for _, id := range append(burst, first) {
			if sent[id] != 1 {
				t.Errorf("run %s sent %d times, want once", id, sent[id])
			}
		}
		mu.Unlock()
		before := cs.lists.Load()
		time.Sleep(15 * time.Second) // quiet: one listing per poll + gap (1.5 s)
		synctest.Wait()
		if n := cs.lists.Load() - before; n < 9 || n > 11 {
			t.Errorf("15 quiet seconds cost %d listings, want 10 (one per 1.5 s)", n)
		}
		if err := st.SetStatus(ctx, first, []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		if sent[first] != 2 {
			t.Errorf("a status change was sent %d times in all, want the run twice (start, change)", sent[first])
		}
		mu.Unlock()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("followRuns ended with %v, want context.Canceled", err)
		}
	})
}
