// Package sqlite is the embedded store, the single-host default: Store
// implements agent.Store (and Leases, Tokens, Pruner, ArtifactIndex, the
// outbox capabilities of package snapshots) on one SQLite file
// (modernc.org/sqlite, pure Go) under the user's data dir, schema from
// migrations/sqlite. One writer connection with group commit; readers in
// WAL mode. It passes the contract suites of snapshots/storetest.
package sqlite
