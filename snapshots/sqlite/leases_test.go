package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, clock agent.Clock) agent.Leases {
		return newEmbeddedClock(t, clock)
	})
}

func TestEmbeddedFencing(t *testing.T) {
	storetest.RunFencing(t, func(t *testing.T, clock agent.Clock) storetest.LeaseStore {
		return newEmbeddedClock(t, clock)
	})
}

// newEmbeddedClock opens a fresh embedded store whose times come from clock.
func newEmbeddedClock(t *testing.T, clock agent.Clock) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestEmbeddedQueue(t *testing.T) {
	storetest.RunQueue(t, func(t *testing.T, clock agent.Clock) storetest.QueueStore {
		return newEmbeddedClock(t, clock)
	})
}
