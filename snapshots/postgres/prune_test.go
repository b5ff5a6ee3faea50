package postgres_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestPostgresPrune(t *testing.T) {
	storetest.RunPrune(t, func(t *testing.T, clock agent.Clock, n int) []storetest.PruneStore {
		url := testenv.PostgresURL(t)
		out := make([]storetest.PruneStore, n)
		for i := range out {
			out[i] = newPostgresClock(t, url, clock)
		}
		return out
	})
}

func TestPostgresArtifacts(t *testing.T) {
	storetest.RunArtifacts(t, func(t *testing.T) storetest.ArtifactStore { return testenv.Postgres(t) })
}
