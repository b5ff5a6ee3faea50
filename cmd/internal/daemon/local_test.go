package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The in-process API reads a data dir's store as the daemon's API does
// (routes, shapes, not-found errors) and moves nothing: a PENDING run stays
// PENDING, no lease is taken, and stop closes the store.
func TestServeLocalReadsWithoutScheduling(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := storetest.NewRun("acme", "emulator-5554")
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	cl, stop, err := ServeLocal(st)
	if err != nil {
		t.Fatal(err)
	}
	page, err := cl.ListRuns(ctx, client.ListOptions{Limit: 10})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].RunID != run.RunID {
		t.Fatalf("runs list: %+v %v", page, err)
	}
	d, err := cl.Run(ctx, run.RunID)
	if err != nil || d.Status != agent.RunPending || d.TenantID != "acme" {
		t.Fatalf("run: %+v %v", d, err)
	}
	if _, err := cl.Run(ctx, "01J0000000000000000000NONE"); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	stop()
	// What the store holds after the API served it.
	st2, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if r, err := st2.GetRun(ctx, agent.Admin(), run.RunID); err != nil || r.Status != agent.RunPending {
		t.Fatalf("after the in-process API: %+v %v (nothing may move the run)", r, err)
	}
	if ls, err := st2.ActiveLeases(ctx, agent.Admin()); err != nil || len(ls) != 0 {
		t.Fatalf("leases taken: %v %v", ls, err)
	}
}

// The token commands' in-process API: over a data dir's store, tokens are
// made (the token in the create answer only), listed without the token or
// its hashes, and revoked, with no token needed (the owner of the data dir
// is admin); the stored record keeps the SHA-256 and a bcrypt hash.
func TestServeLocalTokens(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cl, stop, err := ServeLocal(st)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	admin, err := cl.CreateToken(ctx, "ops", true)
	if err != nil || !agent.LooksLikeToken(admin.Token) || !admin.Admin {
		t.Fatalf("create: %+v %v", admin, err)
	}
	// Tokens now exist; the in-process API still answers its caller.
	acme, err := cl.CreateToken(ctx, "acme", false)
	if err != nil || acme.Admin || acme.TenantID != "acme" {
		t.Fatalf("second create: %+v %v", acme, err)
	}
	ts, err := cl.Tokens(ctx)
	if err != nil || len(ts) != 2 || ts[0].ID != admin.ID || ts[1].ID != acme.ID {
		t.Fatalf("list: %+v %v", ts, err)
	}
	for _, tok := range ts {
		if tok.Hash != "" || tok.NATSPasswordHash != "" {
			t.Errorf("the list carries a hash: %+v", tok)
		}
	}
	stored, err := st.LookupToken(ctx, agent.HashToken(acme.Token))
	if err != nil || stored.ID != acme.ID || len(stored.NATSPasswordHash) < 4 || stored.NATSPasswordHash[:4] != "$2a$" {
		t.Fatalf("stored: %+v %v", stored, err)
	}
	rev, err := cl.RevokeToken(ctx, acme.ID)
	if err != nil || rev.RevokedAt == nil {
		t.Fatalf("revoke: %+v %v", rev, err)
	}
	if _, err := agent.Authenticate(ctx, st, acme.Token); !errors.Is(err, agent.ErrUnauthenticated) {
		t.Errorf("the revoked token authenticates: %v", err)
	}
	if _, err := cl.RevokeToken(ctx, "01J0000000000000000000NONE"); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("revoke of an unknown id: %v", err)
	}
}
