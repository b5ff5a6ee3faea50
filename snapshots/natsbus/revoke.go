package natsbus

import (
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// DisconnectRevoked closes the embedded server's client connections
// authenticated with a token that revoked reports revoked (user
// "token:<id>", TokenAuthenticator): a connection keeps the permissions it
// connected with, so a revoked token's subscriptions would otherwise go on
// receiving its tenant's events. The client's reconnect is then refused by
// the authenticator. It returns how many it closed; logf (may be nil)
// reports each. Hook it to agent.RevocationWatch.OnPoll.
func DisconnectRevoked(s *server.Server, revoked func(tokenID string) bool, logf func(format string, args ...any)) int {
	if s == nil {
		return 0
	}
	cz, err := s.Connz(&server.ConnzOptions{Username: true, Limit: 1 << 20})
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range cz.Conns {
		id, ok := strings.CutPrefix(c.AuthorizedUser, "token:")
		if !ok || !revoked(id) {
			continue
		}
		if err := s.DisconnectClientByID(c.Cid); err == nil {
			n++
			if logf != nil {
				logf("NATS client %d of revoked token %s disconnected", c.Cid, id)
			}
		}
	}
	return n
}
