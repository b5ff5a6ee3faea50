package natsbus_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"
	"golang.org/x/crypto/bcrypt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// An issued token authenticates (HTTP side: its SHA-256; NATS side: its
// bcrypt hash), and TokenAuth's server takes the token and the daemon's own
// connection but refuses anyone else once a token exists.
func TestIssueTokenAndTokenAuth(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 26, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	tok, rec, err := natsbus.IssueToken("acme", false, now)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ulid.ParseStrict(rec.ID)
	if err != nil || ulid.Time(id.Time()).UnixMilli() != now.UnixMilli() {
		t.Errorf("id %s (%v): not a ULID of the issue time", rec.ID, err)
	}
	if !agent.LooksLikeToken(tok) || rec.Hash != agent.HashToken(tok) || rec.TenantID != "acme" || rec.Admin ||
		!rec.CreatedAt.Equal(now) || rec.CreatedAt.Location() != time.UTC || rec.RevokedAt != nil {
		t.Errorf("IssueToken = %q, %+v", tok, rec)
	}
	if bcrypt.CompareHashAndPassword([]byte(rec.NATSPasswordHash), []byte(tok)) != nil {
		t.Error("NATSPasswordHash is not the token's bcrypt hash")
	}
	if tok2, rec2, err := natsbus.IssueToken("ops", true, now); err != nil || tok2 == tok || rec2.ID == rec.ID || !rec2.Admin {
		t.Errorf("a second (admin) token = %q, %+v, %v", tok2, rec2, err)
	}
	for _, bad := range []string{"", "a.b", "acme ", string(make([]byte, 65))} {
		if _, _, err := natsbus.IssueToken(bad, false, now); agent.Classify(err).ID != agent.ErrInvalidRequest {
			t.Errorf("IssueToken(%q) = %v, want invalid_request_error", bad, err)
		}
	}

	// A store without tokens: the server stays open (nothing to check).
	if auth, opts, err := natsbus.TokenAuth(agenttest.NewStore(), nil); auth != nil || opts != nil || err != nil {
		t.Errorf("TokenAuth of a store without tokens = %v, %v, %v", auth, opts, err)
	}

	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateToken(ctx, rec); err != nil {
		t.Fatal(err)
	}
	auth, opts, err := natsbus.TokenAuth(st, t.Logf)
	if err != nil || auth == nil || len(opts) != 1 {
		t.Fatalf("TokenAuth = %v, %v, %v", auth, opts, err)
	}
	srv, url, err := natsbus.StartEmbeddedWith(natsbus.EmbeddedOptions{Dir: filepath.Join(dir, "nats"), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	daemon, err := natsbus.Connect(url, opts...)
	if err != nil {
		t.Fatalf("the daemon's own connection: %v", err)
	}
	daemon.Close()
	if _, err := connectAs(t, url, nats.Token(tok), nats.CustomInboxPrefix(natsbus.TenantInboxPrefix("acme"))); err != nil {
		t.Errorf("connect with the issued token: %v", err)
	}
	if _, err := connectAs(t, url); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous connect once a token exists: %v", err)
	}
}
