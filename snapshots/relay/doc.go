// Package relay is the transactional outbox's forwarder: Relay drains a
// store's unpublished run_outbox rows and hands them to an agent.Publisher
// strictly in sequence order per run, marking a row published only after its
// ack; rows the server can never take are parked. It uses only the
// capabilities the store and the publisher declare (snapshots.Capabilities,
// snapshots.PublisherCapabilities; ports.go), never a type assertion, so it
// runs on either store and any publisher; with a publisher declaring Chain
// (the embedded store's JetStream) it streams rows as they are committed.
// OutboxWatch tells /readyz when the outbox is stuck.
package relay
