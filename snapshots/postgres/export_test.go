package postgres

// FleetSweepDue exposes the fleet's sweep turn to the tests.
var FleetSweepDue = (*Store).fleetSweepDue

// LocalClaimSQL exposes the local claim's statement to the plan tests.
const LocalClaimSQL = localClaimSQL
