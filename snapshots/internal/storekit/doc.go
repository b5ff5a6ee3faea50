// Package storekit is the store core the SQLite and Postgres stores share
// and nobody else needs. Core (core.go, engine.go) owns the transaction
// logic once — the step commit, the status compare-and-set, lease
// acquisition (takeover, grace, fencing tokens), renewal and release, the
// artifact index, parking, the run queue's reads — over a Driver each store
// implements with its dialect's queries, transactions and clock (River's
// layout: one engine, a narrow driver per database, one driver test suite,
// snapshots/storetest). Besides the core: the checks of a Step before it is written (PrepareStep,
// CheckStepAgainstRun), run, control, lease and token rules, tenant scoping
// in SQL (ScopeCond), the time format of stored times, prune limits. It is
// internal so that it stays the stores' helper, not a public API.
package storekit
