package agenttest_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// TestStoreContract runs the stores' contract (snapshots/storetest) on the
// in-memory store, which the engine's and the service's tests use in place
// of SQLite and Postgres: what it lets pass, they would not.
func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) agent.Store {
		s := agenttest.NewStore()
		t.Cleanup(func() { s.Close() })
		return s
	})
}
