package natsbus

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// Tenancy on NATS. A client authenticates with an API token (nats.Token(tok),
// or user = the token's id and password = the token, which also works with a
// generated nats-server configuration) and gets its tenant's subjects only:
//
//   - subscribe agent.events.<T>.> (core NATS, live) and _INBOX_<T>.> (its
//     replies and push-consumer deliveries: a tenant client must connect with
//     nats.CustomInboxPrefix("_INBOX_<T>"); the shared _INBOX.> would show
//     every tenant's replies);
//   - publish agent.control.<T>.> (control of its runs; the daemon answers a
//     run of another tenant under <T> as unknown);
//   - publish $JS.API.CONSUMER.CREATE.AGENT_EVENTS.*.agent.events.<T>.>: a
//     JetStream consumer whose single filter subject is the tenant's (the
//     server refuses a body whose filter differs from the subject's), push
//     only: the pull API ($JS.API.CONSUMER.MSG.NEXT.…) names a consumer by
//     name, so it is denied together with every other JetStream API subject
//     (the unfiltered CREATE forms, INFO, LIST, NAMES, DELETE, STREAM.*);
//   - replies to what it was sent (allow_responses: acks and flow control
//     of its push consumers).
//
// An admin token and the daemon itself get every subject.

// TenantInboxPrefix is the inbox prefix a tenant's NATS client must use.
func TenantInboxPrefix(tenant string) string { return "_INBOX_" + snapshots.SubjectToken(tenant) }

// TenantPermissions are the NATS permissions of a tenant token (see above).
func TenantPermissions(tenant string) *server.Permissions {
	t := snapshots.SubjectToken(tenant)
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			snapshots.ControlSubjectPrefix + "." + t + ".>",
			"$JS.API.CONSUMER.CREATE." + snapshots.StreamName + ".*." + snapshots.SubjectPrefix + "." + t + ".>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			snapshots.SubjectPrefix + "." + t + ".>",
			TenantInboxPrefix(tenant) + ".>",
		}},
		Response: &server.ResponsePermission{MaxMsgs: 1},
	}
}

// DaemonNATSUser is the user name of the daemon's own connection (the relay
// and the control subscription).
const DaemonNATSUser = "screengraph-agent"

// TokenAuthenticator authenticates the embedded NATS server's clients
// (server.Options.CustomClientAuthentication) against the store's API tokens.
// While the store holds no token every client is let in with every subject
// (the single-host default: anonymous subscribers as before); once it holds
// one, a client needs Internal (the daemon) or a valid token. A connection
// keeps the permissions it connected with; once its token is revoked,
// DisconnectRevoked closes it and its reconnect is refused.
type TokenAuthenticator struct {
	Tokens agent.Tokens
	// Internal is the daemon's own secret (random per start, never stored):
	// its connections connect with nats.Token(Internal).
	Internal string
	// Logf reports refused connections; may be nil.
	Logf func(format string, args ...any)
}

var _ server.Authentication = (*TokenAuthenticator)(nil)

// Check implements server.Authentication.
func (a *TokenAuthenticator) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	secret := o.Token
	if secret == "" {
		secret = o.Password
	}
	if a.Internal != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(a.Internal)) == 1 {
		c.RegisterUser(&server.User{Username: DaemonNATSUser})
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	has, err := a.Tokens.HasTokens(ctx)
	if err != nil {
		a.refuse(c, "token store: %v", err)
		return false // fail closed
	}
	if !has {
		return true
	}
	p, err := agent.Authenticate(ctx, a.Tokens, secret)
	if err != nil {
		a.refuse(c, "%v", err)
		return false
	}
	if o.Username != "" && o.Username != p.TokenID {
		a.refuse(c, "user %q is not the token's id", o.Username)
		return false
	}
	u := &server.User{Username: "token:" + p.TokenID}
	if !p.Scope.IsAdmin() {
		u.Permissions = TenantPermissions(p.Scope.TenantID())
	}
	c.RegisterUser(u)
	return true
}

func (a *TokenAuthenticator) refuse(c server.ClientAuthentication, format string, args ...any) {
	if a.Logf != nil {
		a.Logf("NATS client %v refused: %s", c.RemoteAddress(), agent.RedactString(fmt.Sprintf(format, args...)))
	}
}

// WriteAuthConfig writes the authorization block of a nats-server
// configuration (nats-server 2.9 or later: the filtered consumer-create
// subject) for an external cluster: the daemon's user (DaemonNATSUser, every
// subject, bcrypt password daemonHash) and one user per valid token with a
// NATS password hash (user = token id, password = the token): admins with
// every subject, tenants with TenantPermissions. Revoked tokens are left
// out. Include it from the server's config and reload after a token change.
func WriteAuthConfig(w io.Writer, daemonHash string, tokens []agent.APIToken) error {
	var b strings.Builder
	b.WriteString("# ScreenGraph agent NATS users, generated by `screengraph-agent nats-config`.\n")
	b.WriteString("# Tenants connect with user = token id, password = token, inbox prefix _INBOX_<tenant>.\n")
	b.WriteString("authorization {\n  users = [\n")
	fmt.Fprintf(&b, "    # the daemons (relay and control): every subject\n    {user: %q, password: %q}\n", DaemonNATSUser, daemonHash)
	sorted := append([]agent.APIToken(nil), tokens...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for _, t := range sorted {
		if t.RevokedAt != nil || t.NATSPasswordHash == "" {
			continue
		}
		if t.Admin {
			fmt.Fprintf(&b, "    # admin token (tenant %s): every subject\n    {user: %q, password: %q}\n", t.TenantID, t.ID, t.NATSPasswordHash)
			continue
		}
		p := TenantPermissions(t.TenantID)
		fmt.Fprintf(&b, "    # tenant %s\n    {user: %q, password: %q, permissions: {\n", t.TenantID, t.ID, t.NATSPasswordHash)
		fmt.Fprintf(&b, "      publish: {allow: %s}\n", confList(p.Publish.Allow))
		fmt.Fprintf(&b, "      subscribe: {allow: %s}\n", confList(p.Subscribe.Allow))
		fmt.Fprintf(&b, "      allow_responses: {max: %d}\n    }}\n", p.Response.MaxMsgs)
	}
	b.WriteString("  ]\n}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func confList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
