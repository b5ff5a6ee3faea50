package postgres_test

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestPostgresTokens(t *testing.T) {
	storetest.RunTokens(t, func(t *testing.T, clock agent.Clock) storetest.TokenStore {
		return newPostgresClock(t, testenv.PostgresURL(t), clock)
	})
}
