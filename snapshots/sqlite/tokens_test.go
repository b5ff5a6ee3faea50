package sqlite_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestEmbeddedTokens(t *testing.T) {
	storetest.RunTokens(t, func(t *testing.T, clock agent.Clock) storetest.TokenStore {
		return newEmbeddedClock(t, clock)
	})
}
