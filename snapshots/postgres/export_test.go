package postgres

// FleetSweepDue exposes the fleet's sweep turn to the tests.
var FleetSweepDue = (*Store).fleetSweepDue

// The claim's statements, for the plan tests: the runs locked, then their
// rows read.
var (
	SQLLockPending = sqlLockPending
	SQLReadClaimed = sqlReadClaimed
)
