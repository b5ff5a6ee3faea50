// Package snapshots is what the stores, the relay and the NATS side agree
// on; the concerns themselves live in one package each below it:
//
//   - snapshots/sqlite: the embedded store, the single-host default, one
//     SQLite file (modernc.org/sqlite, pure Go) under the user's data dir,
//     schema from migrations/sqlite.
//   - snapshots/postgres: the fleet store (pgx v5), schema from
//     migrations/postgres; the outbox claims several daemons' relays share.
//   - snapshots/relay: the transactional-outbox forwarder that publishes
//     unpublished events to a Publisher strictly in sequence order per run, and
//     the outbox watch /readyz asks.
//   - snapshots/natsbus: the NATS side: the in-process NATS server of the
//     single-host default, the AGENT_EVENTS stream config, the JetStream
//     publisher (ordered windows and chains), NATS auth from API tokens.
//   - snapshots/storetest: the contract suites every store passes;
//     snapshots/pgtest and snapshots/natstest start real servers for tests.
//
// This package holds the shared contract: the event and control subjects
// (Subject, ControlSubject, StreamName), the errors the stores return
// besides agent's, the optional capabilities a store or publisher offers
// the relay (ports.go: Notifier, OutboxCursor, OutboxClaimer,
// OrderedPublisher, ChainPublisher, ...), and the read-only views of
// `runs inspect` and `runs events` (InspectStep, RunEvents, Replay), which
// read any agent.Store.
package snapshots
