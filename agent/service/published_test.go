package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// outbox is a store whose outbox the test publishes by hand (only
// Unpublished is used by WaitPublished).
type outbox struct {
	agent.Store
	mu   sync.Mutex
	rows []agent.OutboxRow
	err  error
}

func (o *outbox) Unpublished(context.Context, int) ([]agent.OutboxRow, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]agent.OutboxRow(nil), o.rows...), o.err
}

// publish drops the rows of runID from the outbox.
func (o *outbox) publish(runID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var left []agent.OutboxRow
	for _, r := range o.rows {
		if r.RunID != runID {
			left = append(left, r)
		}
	}
	o.rows = left
}

// WaitPublished returns once the run's own rows are published, whatever
// other runs leave in the outbox; a deadline first says how many were left.
func TestWaitPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &outbox{rows: []agent.OutboxRow{{RunID: "A", Sequence: 1}, {RunID: "B", Sequence: 1}, {RunID: "A", Sequence: 2}}}
		done := make(chan error, 1)
		go func() { done <- service.WaitPublished(t.Context(), st, "A", 0) }()
		st.publish("B")
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("returned with run A's events unpublished: %v", err)
		default:
		}
		st.mu.Lock()
		st.rows = append(st.rows, agent.OutboxRow{RunID: "C", Sequence: 1})
		st.mu.Unlock()
		st.publish("A")
		if err := <-done; err != nil {
			t.Fatalf("WaitPublished = %v", err)
		}

		st.rows = []agent.OutboxRow{{RunID: "A", Sequence: 3}, {RunID: "A", Sequence: 4}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := service.WaitPublished(ctx, st, "A", 100*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "run A: 2 events not yet published") {
			t.Errorf("WaitPublished past its deadline = %v", err)
		}

		st.err = errors.New("database is locked")
		if err := service.WaitPublished(t.Context(), st, "A", 0); err != st.err {
			t.Errorf("WaitPublished with a failing store = %v", err)
		}
	})
}

// StoreReady answers while the store does, and fails once it is closed.
func TestStoreReady(t *testing.T) {
	f := newFixture(t)
	ready := service.StoreReady(f.store)
	if err := ready(context.Background()); err != nil {
		t.Fatalf("open store: %v", err)
	}
	f.store.Close()
	if err := ready(context.Background()); err == nil {
		t.Fatal("closed store: ready")
	}
}
