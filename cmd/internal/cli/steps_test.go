package cli

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// `runs inspect`'s events of a step: node events whose payload names the
// step, not run events nor other steps' (nor payloads without a step).
func TestStepEvents(t *testing.T) {
	ev := func(seq int64, kind string, payload any) agent.Event {
		b, _ := json.Marshal(payload)
		return agent.Event{Sequence: seq, Kind: kind, Payload: b}
	}
	evs := []agent.Event{
		ev(1, agent.KindRunStarted, map[string]any{"stepOrdinal": 1}),
		ev(2, agent.KindNodeStarted, map[string]any{"stepOrdinal": 0}),
		ev(3, agent.KindNodeStarted, map[string]any{"stepOrdinal": 1}),
		ev(4, agent.KindNodeTokenDelta, map[string]any{"stepOrdinal": 1, "text": "x"}),
		ev(5, agent.KindNodeFinished, map[string]any{"nodeName": "n"}),
		ev(6, agent.KindNodeFinished, map[string]any{"stepOrdinal": 1}),
	}
	var got []int64
	for _, e := range StepEvents(evs, 1) {
		got = append(got, e.Sequence)
	}
	if !slices.Equal(got, []int64{3, 4, 6}) {
		t.Errorf("step 1's events: %v, want [3 4 6]", got)
	}
	if out := StepEvents(evs, 7); out == nil || len(out) != 0 {
		t.Errorf("no events of step 7: %v", out)
	}
}
