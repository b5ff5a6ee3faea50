package appium_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/appium"
)

type listed []service.Candidate

func (l listed) Candidates(context.Context) ([]service.Candidate, error) { return l, nil }

// TestGateWhileAppiumIsReplaced: the scheduler sees the devices while the
// local Appium is up, none (appium_unreachable) while it is being replaced,
// and the devices again once it is back.
func TestGateWhileAppiumIsReplaced(t *testing.T) {
	var down atomic.Bool
	g := appium.Gate{Reachability: listed{{Serial: "emulator-5554"}}, Down: &down}
	for _, step := range []struct {
		down bool
		want int
	}{{false, 1}, {true, 0}, {false, 1}} {
		down.Store(step.down)
		got, err := g.Candidates(context.Background())
		if step.down {
			if agent.Classify(err).ID != agent.ErrAppiumUnreachable || got != nil {
				t.Errorf("down: %v, %v; want appium_unreachable and no device", got, err)
			}
			continue
		}
		if err != nil || len(got) != step.want || got[0].Serial != "emulator-5554" {
			t.Errorf("up: %v, %v", got, err)
		}
	}
}
