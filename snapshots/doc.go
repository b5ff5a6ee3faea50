// Package snapshots holds the agent's stores and what reads or drains them:
//
//   - Embedded: the single-host default, one SQLite file (modernc.org/sqlite,
//     pure Go) under the user's data dir, schema from migrations/sqlite.
//   - Postgres: fleet mode (pgx v5), schema from migrations/postgres.
//   - Relay: the transactional-outbox forwarder that publishes run_outbox rows
//     to NATS JetStream strictly in sequence order per run.
//   - JetStreamPublisher and StartEmbeddedNATS: the Publisher and the
//     in-process NATS server of the single-host default.
//   - InspectStep, RunEvents, Replay: read-only views for `runs inspect` and
//     `runs events`.
//
// Every store implements agent.Store and passes the contract suite in
// snapshots/storetest.
package snapshots
