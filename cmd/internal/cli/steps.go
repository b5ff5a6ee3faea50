package cli

import (
	"encoding/json"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// StepEvents are the node events (agent.node.*: started, token deltas,
// finished) of step n among evs, by the stepOrdinal of their payloads, in
// order; never nil.
func StepEvents(evs []agent.Event, n int) []agent.Event {
	out := []agent.Event{}
	for _, e := range evs {
		var p struct {
			StepOrdinal *int `json:"stepOrdinal"`
		}
		if strings.HasPrefix(e.Kind, "agent.node.") && json.Unmarshal(e.Payload, &p) == nil && p.StepOrdinal != nil && *p.StepOrdinal == n {
			out = append(out, e)
		}
	}
	return out
}
