// Package storekit is what the SQLite and Postgres stores share and nobody
// else needs: the checks of a Step before it is written (PrepareStep,
// CheckStepAgainstRun), run, control, lease and token rules, tenant scoping
// in SQL (ScopeCond), the time format of stored times, prune limits. It is
// internal so that it stays the stores' helper, not a public API.
package storekit
