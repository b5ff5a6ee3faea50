package storekit

import "github.com/screengraph/screengraph-agent/agent"

// PruneMaxLimit bounds one PruneRuns transaction: the embedded store's
// writer (and every step commit behind it) waits for it.
const PruneMaxLimit = 5000

// PruneHeldNames is how many held runs a PruneResult names.
const PruneHeldNames = 100

// PruneTables are the tables holding a run's rows, children first (every
// one references runs(run_id)); device_leases is handled apart (only ended
// leases go). An event is its own outbox entry (migration 00012): the
// events deleted are PruneResult's Events and Outbox both. A step's
// snapshot is on its last event row (00014): PruneResult's Snapshots counts
// the deleted event rows holding one and
// agent_state_snapshot's rows (steps without events).
var PruneTables = []string{"run_events", "agent_state_snapshot", "run_control", "artifacts"}

// PruneCounts points at the PruneResult field counting each of
// PruneTables' deleted rows.
func PruneCounts(res *agent.PruneResult) map[string]*int64 {
	return map[string]*int64{"run_events": &res.Events, "agent_state_snapshot": &res.Snapshots, "run_control": &res.Controls, "artifacts": &res.EvidenceRows}
}

func PruneLimit(limit int) int {
	if limit <= 0 {
		return 1000
	}
	return min(limit, PruneMaxLimit)
}
