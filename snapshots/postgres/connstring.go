package postgres

import (
	"context"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/screengraph/screengraph-agent/agent"
)

// RedactConnString returns a Postgres connection string, in either of
// libpq's forms (a postgres:// or postgresql:// URL, or keyword/value pairs
// such as "host=db user=agent password='pa ss'"), with its passwords
// hidden: agent.RedactString first (URL userinfo, password= and
// sslpassword= values), then every spelling of the passwords that pgx's own
// parser (pgconn.ParseConfig) reads from s that is still there (raw,
// percent-encoded, keyword-escaped), so a password the text rules cut
// wrongly leaves nothing behind. For every message that names a
// --database-url.
func RedactConnString(s string) string {
	out := agent.RedactString(s)
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		return out
	}
	secrets := []string{cfg.Password}
	if p := cfg.RuntimeParams["sslpassword"]; p != "" {
		secrets = append(secrets, p)
	}
	for _, p := range secrets {
		if p == "" {
			continue
		}
		for _, spelling := range []string{p, url.PathEscape(p), url.QueryEscape(p), url.UserPassword("u", p).String()[2:],
			strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p)} {
			if spelling != "" && strings.Contains(out, spelling) {
				out = strings.ReplaceAll(out, spelling, agent.Redacted)
			}
		}
	}
	return out
}

// CheckConnString reports whether pgx can read s as a connection string
// (either form, see RedactConnString). Errors: an *agent.Error
// invalid_request_error that names s only redacted.
func CheckConnString(s string) error {
	if _, err := pgconn.ParseConfig(s); err != nil {
		// pgx's message quotes s with its password masked (pgconn's
		// redactPW); RedactString goes over it again.
		return agent.Errorf(agent.ErrInvalidRequest, "database-url: not a Postgres connection string (a postgres:// URL or keyword/value pairs such as \"host=db user=agent dbname=sg\"): %s",
			agent.RedactString(err.Error()))
	}
	return nil
}

// newPool is pgxpool.New(ctx, connString) whose failed dials are marked
// agent.MarkStoreUnavailable, so that callers answer "store unavailable"
// (503) instead of passing the connection's address, user and database on
// (pgconn.ConnectError names them).
func newPool(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		return c, agent.MarkStoreUnavailable(err)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
