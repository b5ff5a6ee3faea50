package natsbus

import (
	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/agent"
)

// WindowMsgs exposes the messages of a window grouped by run (PublishOrdered's
// pipeline) to the tests, which deliver them out of order.
func WindowMsgs(rows []agent.OutboxRow) []*nats.Msg {
	grouped, _ := groupByRun(rows)
	out := make([]*nats.Msg, len(grouped))
	for i := range grouped {
		out[i] = windowMsg(grouped, i)
	}
	return out
}

// ProvenStored exposes provenStored to the tests.
var ProvenStored = provenStored

// Grouped exposes grouped to the tests.
var Grouped = grouped
