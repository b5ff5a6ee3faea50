package appium

import (
	"context"
	"sync/atomic"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// Gate is the scheduler's device list (service.Config.Reachable) while the
// daemon owns its local Appium server: it lists no device while Down (set by
// SuperviseLocal while a replacement server starts), since each run started
// then would fail at once with appium_unreachable and use up its retries.
// Otherwise it is Reachability's list.
type Gate struct {
	service.Reachability
	Down *atomic.Bool
}

// Candidates returns Reachability's candidates, or, while Down, an
// agent.ErrAppiumUnreachable error ("the local Appium server is being
// restarted") that the scheduler logs and retries at its next tick.
func (g Gate) Candidates(ctx context.Context) ([]service.Candidate, error) {
	if g.Down.Load() {
		return nil, agent.Errorf(agent.ErrAppiumUnreachable, "the local Appium server is being restarted")
	}
	return g.Reachability.Candidates(ctx)
}
