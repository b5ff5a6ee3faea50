// Package e2e holds the end-to-end tests of the screengraph-agent binary:
// each builds cmd/screengraph-agent once per test process (buildAgent) and
// drives it as a user or a fleet would, over its CLI, HTTP API and NATS,
// against the simulated emulator and adb server of emulator/sim, real
// nats-server and real Postgres clusters. It has no non-test code besides
// this comment; tests that unit-test package main's unexported functions stay
// beside them in cmd/screengraph-agent.
//
// The slow tests (chaos, fleets, Postgres, floods, benchmarks' set-up) skip
// under `go test -short`; `make test` runs them all.
package e2e
