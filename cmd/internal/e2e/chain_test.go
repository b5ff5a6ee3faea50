package e2e

import (
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/nodes"
)

func sessionOf(t *testing.T, evs []agent.Event) string {
	t.Helper()
	var ed nodes.EnsureDeviceOutput
	lastOutput(t, evs, nodes.NodeEnsureDevice, &ed)
	if ed.DeviceRuntimeContext == nil || ed.DeviceRuntimeContext.DriverSessionID == "" {
		t.Fatalf("EnsureDevice output without a session: %+v", ed)
	}
	return ed.DeviceRuntimeContext.DriverSessionID
}
