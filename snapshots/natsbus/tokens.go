package natsbus

import (
	"crypto/rand"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"golang.org/x/crypto/bcrypt"

	"github.com/screengraph/screengraph-agent/agent"
)

// IssueToken makes a new API token for tenant (an admin token when admin;
// tenant is then a label): the token string, to be shown once, and the
// record a store keeps (agent.Tokens.CreateToken): a ULID id, the token's
// SHA-256 (agent.HashToken) and its bcrypt hash (default cost) for a
// generated nats-server configuration (WriteAuthConfig), created at now
// in UTC. Errors: an invalid tenant id (invalid_request_error naming
// --tenant), or crypto/rand's.
func IssueToken(tenant string, admin bool, now time.Time) (string, agent.APIToken, error) {
	if !agent.ValidTenantID(tenant) {
		return "", agent.APIToken{}, agent.InvalidTenantID("--tenant", tenant)
	}
	tok, err := agent.NewToken()
	if err != nil {
		return "", agent.APIToken{}, err
	}
	nh, err := bcrypt.GenerateFromPassword([]byte(tok), bcrypt.DefaultCost)
	if err != nil {
		return "", agent.APIToken{}, err
	}
	id, err := ulid.New(ulid.Timestamp(now), rand.Reader)
	if err != nil {
		return "", agent.APIToken{}, err
	}
	return tok, agent.APIToken{ID: id.String(), TenantID: tenant, Admin: admin,
		Hash: agent.HashToken(tok), NATSPasswordHash: string(nh), CreatedAt: now.UTC()}, nil
}

// TokenAuth gives the embedded NATS server the authenticator of the store's
// API tokens (TokenAuthenticator, enforced once the store holds a token) with a
// fresh secret for the daemon's own connection, and the option that
// connection needs (nats.Token of that secret). A store without tokens
// (no agent.Tokens) gives nil, nil: the server stays open. Errors:
// crypto/rand's (the server must then not start open to every client).
func TokenAuth(st agent.Store, logf func(format string, args ...any)) (server.Authentication, []nats.Option, error) {
	ts, ok := st.(agent.Tokens)
	if !ok {
		return nil, nil, nil
	}
	internal, err := agent.NewToken()
	if err != nil {
		return nil, nil, agent.Wrap(agent.ErrInternal, err, "the daemon's NATS secret")
	}
	return &TokenAuthenticator{Tokens: ts, Internal: internal, Logf: logf}, []nats.Option{nats.Token(internal)}, nil
}
