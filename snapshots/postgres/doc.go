// Package postgres is the fleet store: Store implements agent.Store (and
// Leases, Tokens, Pruner, ArtifactIndex, the outbox capabilities of package
// snapshots) on Postgres through pgx v5, schema from migrations/postgres
// (Migrate). Several daemons share one database: commits wake every
// daemon's relay (LISTEN/NOTIFY on OutboxChannel) and ClaimOutbox lets their
// relays drain one outbox without publishing a run twice at once. It passes
// the contract suites of snapshots/storetest.
package postgres
