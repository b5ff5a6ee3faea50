package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/pgtest"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

// token create|list|revoke against a fleet's Postgres (--database-url):
// the store keeps the hash, Authenticate accepts the printed token until it
// is revoked, list shows neither token nor hash.
func TestTokenCommandsOnPostgres(t *testing.T) {
	slow(t, "a Postgres cluster")
	pg, err := pgtest.Start("")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	url, err := pg.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bin := buildAgent(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--database-url", url)...).Output()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return string(out)
	}
	var ct tokenCreated
	if err := json.Unmarshal([]byte(run("token", "create", "--tenant", "acme", "--output", "json")), &ct); err != nil || !agent.LooksLikeToken(ct.Token) {
		t.Fatalf("token create: %+v %v", ct, err)
	}
	list := run("token", "list", "--output", "json")
	if !strings.Contains(list, ct.ID) || strings.Contains(list, ct.Token) || strings.Contains(list, agent.HashToken(ct.Token)) {
		t.Errorf("token list:\n%s", list)
	}
	st, err := postgres.Open(context.Background(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, err := agent.Authenticate(context.Background(), st, ct.Token)
	if err != nil || p.Scope.TenantID() != "acme" || p.TokenID != ct.ID {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	var raw int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM api_tokens WHERE token_hash = $1 AND nats_password_hash LIKE '$2a$%'`, agent.HashToken(ct.Token)).Scan(&raw); err != nil || raw != 1 {
		t.Errorf("stored hashes: %d %v", raw, err)
	}
	run("token", "revoke", ct.ID)
	if _, err := agent.Authenticate(context.Background(), st, ct.Token); !errors.Is(err, agent.ErrUnauthenticated) {
		t.Errorf("Authenticate after revoke = %v", err)
	}
}
