package natsbus

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
)

// Tenancy on NATS. A client authenticates with an API token (nats.Token(tok),
// or user = the token's id and password = the token, which also works with a
// generated nats-server configuration) and gets its tenant's subjects only:
//
//   - subscribe _INBOX_<T>.> only (its replies and push-consumer
//     deliveries: a tenant client must connect with
//     nats.CustomInboxPrefix("_INBOX_<T>"); the shared _INBOX.> would show
//     every tenant's replies). Not agent.events.<T>.> with core NATS: the
//     relay's JetStream publishes there carry the daemon's ack inbox as
//     their reply subject, and allow_responses (below) would let the
//     tenant answer them, forging the stream's acks to the relay (an error
//     ack backs off the relay for every tenant). Live events come through
//     a push consumer (DeliverPolicy new);
//   - publish agent.control.<T>.> (control of its runs; the daemon answers a
//     run of another tenant under <T> as unknown);
//   - publish $JS.API.CONSUMER.CREATE.AGENT_EVENTS.*.agent.events.<T>.>: a
//     JetStream consumer whose single filter subject is the tenant's (the
//     server refuses a body whose filter differs from the subject's), push
//     only: the pull API ($JS.API.CONSUMER.MSG.NEXT.…) names a consumer by
//     name, so it is denied together with every other JetStream API subject
//     (the unfiltered CREATE forms, INFO, LIST, NAMES, DELETE, STREAM.*);
//   - replies to what it was sent, once each (allow_responses max 1): with
//     only its inbox to subscribe to, that is JetStream's deliveries and
//     flow control of its push consumers (acks), and nothing of the
//     daemon's (the daemon's replies carry no reply subject).
//
// An admin token and the daemon itself get every subject on the embedded
// server. The daemon answers a control request only on an inbox of its
// requester (ControlReplies), never on a subject its own wider rights
// would let it publish to.

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
			TenantInboxPrefix(tenant) + ".>",
		}},
		Response: &server.ResponsePermission{MaxMsgs: 1},
	}
}

// Refusal reasons of ControlReplies besides natsapi's (the reason label of
// screengraph_nats_control_refused_total).
const (
	RefusedJetStreamAPI = "jetstream_api"  // $JS.…: the JetStream API, acks, flow control
	RefusedSystem       = "system_subject" // any other $… subject ($SYS, $KV, $O, …)
	RefusedStream       = "stream_subject" // captured by AGENT_EVENTS (agent.events.>)
)

// ControlReplyReasons are ControlReplies' reasons besides natsapi's
// (natsapi.Config.ReplyReasons).
var ControlReplyReasons = []string{RefusedJetStreamAPI, RefusedSystem, RefusedStream}

// ControlReplies is the daemon's rule for answering control requests
// (natsapi.ReplyRule). A request on agent.control.<T>.<run> comes from one
// of tenant T's users, an admin or the daemon (TenantPermissions let a
// tenant publish on its own control subjects only), so its reply subject
// must be one each of them may listen on, and that nothing stores:
//
//   - a literal subject (natsapi.LiteralSubject), else invalid_subject;
//   - not $JS.… (jetstream_api: $JS.API.STREAM.PURGE.AGENT_EVENTS would
//     purge the stream) nor any other $… subject (system_subject);
//   - not under the stream's subjects agent.events.> (stream_subject: the
//     daemon's publish there would be stored as an event of that subject's
//     tenant, and count against the stream's limits for every tenant);
//   - and one T may subscribe to by TenantPermissions (in effect its inbox
//     _INBOX_<T>.…), or under own + "." (the inbox prefix of the daemon's
//     own users, natsapi.DefaultOwnInboxPrefix when ""), else
//     foreign_subject (another tenant's inbox, a control subject, …).
func ControlReplies(own string) func(tenant, reply string) string {
	if own == "" {
		own = natsapi.DefaultOwnInboxPrefix
	}
	return func(tenant, reply string) string {
		switch {
		case !natsapi.LiteralSubject(reply):
			return natsapi.RefusedInvalidSubject
		case strings.HasPrefix(reply, "$JS."):
			return RefusedJetStreamAPI
		case strings.HasPrefix(reply, "$"):
			return RefusedSystem
		case subjectMatches(snapshots.SubjectPrefix+".>", reply):
			return RefusedStream
		case strings.HasPrefix(reply, own+"."):
			return ""
		}
		if agent.ValidTenantID(tenant) {
			for _, p := range TenantPermissions(tenant).Subscribe.Allow {
				if subjectMatches(p, reply) {
					return ""
				}
			}
		}
		return natsapi.RefusedForeignSubject
	}
}

// subjectMatches reports whether the literal subject s matches pattern (NATS
// wildcards: * one token, > one or more trailing tokens).
func subjectMatches(pattern, s string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(s, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
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

// DaemonPermissions are the NATS permissions of the daemons' user in a
// generated configuration (WriteAuthConfig), what the relay and the control
// subscription use and no more: publish the stream's subjects, the
// JetStream API (stream create, update, info, message get) except purge
// and delete, and replies on the daemon's own inbox and on the inboxes of
// tenants (their prefixes are whole tokens, _INBOX_<T>, which no wildcard
// covers: one entry each); subscribe to the control subjects and the
// daemon's own inbox. No allow_responses: the server lets a response
// through whatever the allow and deny lists say, so the daemon could
// publish to any reply subject a requester chose, the hole ControlReplies
// closes in the handler; here the server closes it too, but for the
// stream's subjects the relay needs.
func DaemonPermissions(tenants []string) *server.Permissions {
	pub := []string{snapshots.SubjectPrefix + ".>", "$JS.API.>", natsapi.DefaultOwnInboxPrefix + ".>"}
	for _, t := range tenants {
		pub = append(pub, TenantInboxPrefix(t)+".>")
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: pub,
			Deny: []string{"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.MSG.DELETE.>",
				"$JS.API.CONSUMER.DELETE.>"},
		},
		Subscribe: &server.SubjectPermission{Allow: []string{snapshots.ControlSubjectPrefix + ".>", natsapi.DefaultOwnInboxPrefix + ".>"}},
	}
}

// WriteAuthConfig writes the authorization block of a nats-server
// configuration (nats-server 2.9 or later: the filtered consumer-create
// subject) for an external cluster: the daemon's user (DaemonNATSUser,
// DaemonPermissions, bcrypt password daemonHash) and one user per valid token with a
// NATS password hash (user = token id, password = the token): admins with
// every subject, tenants with TenantPermissions. Revoked tokens are left
// out. Include it from the server's config and reload after a token change.
func WriteAuthConfig(w io.Writer, daemonHash string, tokens []agent.APIToken) error {
	var b strings.Builder
	b.WriteString("# ScreenGraph agent NATS users, generated by `screengraph-agent nats-config`.\n")
	b.WriteString("# Tenants connect with user = token id, password = token, inbox prefix _INBOX_<tenant>.\n")
	b.WriteString("authorization {\n  users = [\n")
	sorted := append([]agent.APIToken(nil), tokens...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	var tenants []string
	for _, t := range sorted {
		if t.RevokedAt == nil && t.NATSPasswordHash != "" && !t.Admin && !slices.Contains(tenants, t.TenantID) {
			tenants = append(tenants, t.TenantID)
		}
	}
	slices.Sort(tenants)
	dp := DaemonPermissions(tenants)
	fmt.Fprintf(&b, "    # the daemons (relay and control): the stream, the JetStream API but its destructive calls, control, inboxes\n    {user: %q, password: %q, permissions: {\n", DaemonNATSUser, daemonHash)
	fmt.Fprintf(&b, "      publish: {allow: %s, deny: %s}\n", confList(dp.Publish.Allow), confList(dp.Publish.Deny))
	fmt.Fprintf(&b, "      subscribe: {allow: %s}\n    }}\n", confList(dp.Subscribe.Allow))
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
