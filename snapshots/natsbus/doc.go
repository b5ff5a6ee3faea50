// Package natsbus is the NATS side of the agent: the embedded NATS server
// of the single-host default (StartEmbedded), the AGENT_EVENTS stream's
// config and limits (StreamConfig, EnsureStream), the JetStream publisher
// (JetStreamPublisher: one event at a time, ordered pipelined windows,
// chains kept across calls on the in-process server; LazyPublisher for an
// external server, until it is reachable),
// and NATS auth from the daemon's API tokens (TokenAuthenticator, per-tenant
// permissions).
package natsbus
