package snapshots_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedTokens(t *testing.T) {
	storetest.RunTokens(t, func(t *testing.T, clock agent.Clock) storetest.TokenStore {
		s, err := snapshots.OpenEmbedded(context.Background(), filepath.Join(t.TempDir(), "agent.db"), snapshots.EmbeddedOptions{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPostgresTokens(t *testing.T) {
	storetest.RunTokens(t, func(t *testing.T, clock agent.Clock) storetest.TokenStore {
		return newPostgresClock(t, newPostgresURL(t), clock)
	})
}
