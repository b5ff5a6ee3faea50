package retention_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/retention"
)

// fakePruner records each PruneRuns call and answers from a script: the
// number of runs deleted per call (then 0), or err.
type fakePruner struct {
	mu     sync.Mutex
	script []int64
	err    error
	calls  []call
}

type call struct {
	at, cutoff time.Time
	limit      int
}

func (f *fakePruner) PruneRuns(_ context.Context, cutoff time.Time, limit int) (agent.PruneResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{at: time.Now(), cutoff: cutoff, limit: limit})
	if f.err != nil {
		return agent.PruneResult{}, f.err
	}
	var n int64
	if len(f.script) > 0 {
		n, f.script = f.script[0], f.script[1:]
	}
	return agent.PruneResult{Runs: n, Events: 10 * n, Held: 1, HeldRuns: []string{"held"}}, nil
}

func (f *fakePruner) taken() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// The cleaner passes at once and then every Interval; a pass goes batch
// after batch until one comes back short; the horizon is now - Retention.
func TestCleanerPassesEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePruner{script: []int64{2, 2, 1}}
		var logs []string
		c := &retention.Cleaner{Store: f, Retention: 720 * time.Hour, Interval: 5 * time.Minute, BatchSize: 2,
			Logf: func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		t0 := time.Now()
		go func() { c.Run(ctx); close(done) }()
		synctest.Wait()
		got := f.taken()
		if len(got) != 3 {
			t.Fatalf("first pass: %d batches, want 3 (2, 2, then a short one)", len(got))
		}
		for _, cl := range got {
			if !cl.cutoff.Equal(t0.Add(-720*time.Hour)) || cl.limit != 2 || !cl.at.Equal(t0) {
				t.Errorf("batch %+v, want cutoff %v, limit 2, at %v", cl, t0.Add(-720*time.Hour), t0)
			}
		}
		if len(logs) != 1 {
			t.Fatalf("logs %q, want one line for the pass", logs)
		}
		time.Sleep(5*time.Minute - time.Nanosecond)
		synctest.Wait()
		if n := len(f.taken()); n != 3 {
			t.Fatalf("%d batches before the interval ended, want 3", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		got = f.taken()
		if len(got) != 4 || !got[3].cutoff.Equal(t0.Add(5*time.Minute-720*time.Hour)) {
			t.Fatalf("second pass: %+v", got[3:])
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return when its context ended")
		}
	})
}

// A failed pass is logged and the next interval tries again.
func TestCleanerRetriesAfterFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePruner{err: errors.New("database is locked")}
		var logs []string
		c := &retention.Cleaner{Store: f, Retention: time.Hour, Interval: time.Minute,
			Logf: func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(f.taken()); n != 2 {
			t.Fatalf("%d attempts after one interval, want 2", n)
		}
		if len(logs) != 2 {
			t.Fatalf("logs %q, want each failure", logs)
		}
	})
}

// Retention <= 0 keeps everything: no call at all.
func TestCleanerKeepForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePruner{script: []int64{5}}
		c := &retention.Cleaner{Store: f, Retention: -1}
		c.Run(t.Context())
		if res, err := c.Pass(t.Context(), time.Now()); err != nil || res.Runs != 0 {
			t.Fatalf("Pass = %+v, %v", res, err)
		}
		if n := len(f.taken()); n != 0 {
			t.Fatalf("%d calls with retention off", n)
		}
	})
}

// clockedPruner is a fakePruner whose store tells its own clock, skew
// behind this process's (agent.StoreClock).
type clockedPruner struct {
	fakePruner
	skew time.Duration
}

func (c *clockedPruner) StoreNow(context.Context) (time.Time, error) {
	return time.Now().Add(-c.skew), nil
}

// The cutoff counts from the store's clock, not this daemon's (issue 23
// item 9): a daemon whose clock runs an hour ahead of Postgres's prunes
// nothing early. Before, the cutoff was this process's now - Retention.
func TestCleanerCutoffFromStoreClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &clockedPruner{skew: time.Hour}
		c := &retention.Cleaner{Store: f, Retention: 720 * time.Hour, Interval: 5 * time.Minute}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		synctest.Wait()
		cancel()
		<-done
		calls := f.taken()
		if len(calls) != 1 {
			t.Fatalf("%d prune calls, want 1", len(calls))
		}
		if want := calls[0].at.Add(-time.Hour - 720*time.Hour); !calls[0].cutoff.Equal(want) {
			t.Fatalf("cutoff %v, want the store's now - retention %v (this process's would be %v)", calls[0].cutoff, want, calls[0].at.Add(-720*time.Hour))
		}
	})
}
