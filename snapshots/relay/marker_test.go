package relay

import (
	"context"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// markRecorder is a MultiUpToMarker that records each write.
type markRecorder struct {
	mu     sync.Mutex
	writes []map[string]int64
}

func (m *markRecorder) MarkPublishedUpToMany(_ context.Context, upTo map[string]int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes = append(m.writes, maps.Clone(upTo))
	return len(upTo), nil
}

// Acks settled one after another within markCoalesce go into one mark write
// (the store's single writer is shared with the steps' commits), not one
// write each; the stop marks what is still pending.
func TestMarkerCoalescesAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &markRecorder{}
		r := &Relay{}
		r.defaults()
		m := &marker{r: r, mk: rec, pending: map[string]int64{}, kick: make(chan struct{}, 1)}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); m.run(ctx) }()
		// 20 acks of 4 runs, one every 4 ms: 80 ms, within one coalescing
		// window of 100 ms.
		for i := range 20 {
			m.add([]string{"A", "B", "C", "D"}[i%4], int64(1+i/4))
			time.Sleep(4 * time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		rec.mu.Lock()
		writes := len(rec.writes)
		var last map[string]int64
		if writes > 0 {
			last = rec.writes[writes-1]
		}
		rec.mu.Unlock()
		if writes != 1 || len(last) != 4 || last["A"] != 5 || last["D"] != 5 {
			t.Errorf("%d mark writes (last %v); want 1 marking A-D up to 5", writes, last)
		}
		// An ack while the window is open, then the stop: marked by the
		// stop's flush (runStream's), nothing lost.
		m.add("A", 6)
		stop()
		<-done
		if err := m.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if n := len(rec.writes); n != 2 || rec.writes[1]["A"] != 6 {
			t.Errorf("after the stop: writes %v; want a second one marking A up to 6", rec.writes)
		}
		if got := r.published.Load(); got != 5 {
			t.Errorf("published counter %d, want 5 (4 runs, then 1)", got)
		}
	})
}
