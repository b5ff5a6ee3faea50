package snapshots_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedLeases(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T, clock agent.Clock) agent.Leases {
		s, err := snapshots.OpenEmbedded(context.Background(), filepath.Join(t.TempDir(), "agent.db"), snapshots.EmbeddedOptions{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestEmbeddedFencing(t *testing.T) {
	storetest.RunFencing(t, func(t *testing.T, clock agent.Clock) storetest.LeaseStore {
		s, err := snapshots.OpenEmbedded(context.Background(), filepath.Join(t.TempDir(), "agent.db"), snapshots.EmbeddedOptions{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
