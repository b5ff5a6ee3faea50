package postgres

// FleetSweepDue exposes the fleet's sweep turn to the tests.
var FleetSweepDue = (*Store).fleetSweepDue
