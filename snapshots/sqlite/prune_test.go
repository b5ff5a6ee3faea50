package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedPrune(t *testing.T) {
	storetest.RunPrune(t, func(t *testing.T, clock agent.Clock, n int) []storetest.PruneStore {
		// n stores on one file: a daemon and the CLI's `runs prune` beside it.
		path := filepath.Join(t.TempDir(), "agent.db")
		out := make([]storetest.PruneStore, n)
		for i := range out {
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			out[i] = s
		}
		return out
	})
}

func TestEmbeddedArtifacts(t *testing.T) {
	storetest.RunArtifacts(t, func(t *testing.T) storetest.ArtifactStore { return testenv.Embedded(t) })
}
