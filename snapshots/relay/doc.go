// Package relay is the transactional outbox's forwarder: Relay drains a
// store's unpublished run_outbox rows and hands them to an agent.Publisher
// strictly in sequence order per run, marking a row published only after its
// ack; rows the server can never take are parked. It uses only the
// capabilities declared in package snapshots (ports.go), so it runs on
// either store and any publisher; with a snapshots.ChainPublisher (the
// embedded store's JetStream) it streams rows as they are committed.
// OutboxWatch tells /readyz when the outbox is stuck.
package relay
