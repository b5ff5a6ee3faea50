package storekit

import ()

// PruneMaxLimit bounds one PruneRuns transaction: the embedded store's
// writer (and every step commit behind it) waits for it.
const PruneMaxLimit = 5000

// PruneHeldNames is how many held runs a PruneResult names.
const PruneHeldNames = 100

// PruneTables are the tables holding a run's rows, children first (every
// one references runs(run_id)); device_leases is handled apart (only ended
// leases go).
var PruneTables = []string{"run_events", "run_outbox", "agent_state_snapshot", "run_control", "artifacts"}

func PruneLimit(limit int) int {
	if limit <= 0 {
		return 1000
	}
	return min(limit, PruneMaxLimit)
}
