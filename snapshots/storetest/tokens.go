package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// TokenStore is what RunTokens needs: API tokens, and runs for the tenant
// filter of ListRuns.
type TokenStore interface {
	agent.Store
	agent.Tokens
}

// RunTokens runs the API token contract (and the agent.Scope of reads) against
// stores made by newStore: a fresh, empty, migrated store per call whose
// times come from clock; newStore registers its own cleanup.
func RunTokens(t *testing.T, newStore func(t *testing.T, clock agent.Clock) TokenStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s TokenStore, c *Clock)
	}{
		{"CreateLookup", testTokenCreateLookup},
		{"NeverStoresTheToken", testTokenNotStored},
		{"Duplicate", testTokenDuplicate},
		{"Invalid", testTokenInvalid},
		{"RevokeKeepsFirstTime", testTokenRevoke},
		{"HasTokensCountsRevoked", testTokenHas},
		{"ListOldestFirst", testTokenList},
		{"Authenticate", testTokenAuthenticate},
		{"ListRunsByTenant", testListRunsByTenant},
		{"ReadsByScope", testReadsByScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(leaseEpoch)
			tc.fn(t, newStore(t, c), c)
		})
	}
}

// NewAPIToken returns a fresh token string and its record for tenant.
func NewAPIToken(tenant string, admin bool) (string, agent.APIToken) {
	tok, err := agent.NewToken()
	if err != nil {
		panic(err)
	}
	return tok, agent.APIToken{ID: ulid.Make().String(), TenantID: tenant, Admin: admin, Hash: agent.HashToken(tok)}
}

func testTokenCreateLookup(t *testing.T, s TokenStore, c *Clock) {
	tok, rec := NewAPIToken("acme", false)
	rec.NATSPasswordHash = "$2a$10$abcdefghijklmnopqrstuv"
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	got, err := s.LookupToken(ctx(t), agent.HashToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	want := rec
	want.CreatedAt = c.Now().UTC().Truncate(time.Microsecond)
	if got.ID != want.ID || got.TenantID != "acme" || got.Admin || got.Hash != want.Hash || got.NATSPasswordHash != want.NATSPasswordHash ||
		!got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.Location() != time.UTC || got.RevokedAt != nil {
		t.Errorf("LookupToken = %+v, want %+v (UTC, microseconds)", got, want)
	}
	if _, err := s.LookupToken(ctx(t), agent.HashToken(tok+"x")); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("LookupToken(unknown) = %v, want ErrNotFound", err)
	}
	_, adm := NewAPIToken("ops", true)
	if err := s.CreateToken(ctx(t), adm); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LookupToken(ctx(t), adm.Hash); err != nil || !got.Admin {
		t.Errorf("admin token = %+v, %v", got, err)
	}
}

// The token string is nowhere in what the store returns.
func testTokenNotStored(t *testing.T, s TokenStore, c *Clock) {
	tok, rec := NewAPIToken("acme", false)
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListTokens(ctx(t))
	if err != nil || len(list) != 1 {
		t.Fatalf("ListTokens = %v, %v", list, err)
	}
	for _, v := range []string{list[0].ID, list[0].TenantID, list[0].Hash, list[0].NATSPasswordHash} {
		if v == tok {
			t.Errorf("the token itself came back from the store")
		}
	}
}

func testTokenDuplicate(t *testing.T, s TokenStore, c *Clock) {
	_, rec := NewAPIToken("acme", false)
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	same := rec
	same.Hash = agent.HashToken("other")
	if err := s.CreateToken(ctx(t), same); !errors.Is(err, agent.ErrTokenExists) {
		t.Errorf("CreateToken(same id) = %v, want ErrTokenExists", err)
	}
	sameHash := rec
	sameHash.ID = ulid.Make().String()
	if err := s.CreateToken(ctx(t), sameHash); !errors.Is(err, agent.ErrTokenExists) {
		t.Errorf("CreateToken(same hash) = %v, want ErrTokenExists", err)
	}
}

func testTokenInvalid(t *testing.T, s TokenStore, c *Clock) {
	_, rec := NewAPIToken("acme", false)
	for name, bad := range map[string]func(*agent.APIToken){
		"no id":     func(r *agent.APIToken) { r.ID = "" },
		"no tenant": func(r *agent.APIToken) { r.TenantID = "" },
		"raw token": func(r *agent.APIToken) { r.Hash = "sgat_notahash" },
	} {
		r := rec
		bad(&r)
		if err := s.CreateToken(ctx(t), r); err == nil {
			t.Errorf("%s: CreateToken accepted %+v", name, r)
		}
	}
	if has, err := s.HasTokens(ctx(t)); err != nil || has {
		t.Errorf("HasTokens after refused creates = %v, %v", has, err)
	}
}

func testTokenRevoke(t *testing.T, s TokenStore, c *Clock) {
	_, rec := NewAPIToken("acme", false)
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	first := c.Now().UTC().Truncate(time.Microsecond)
	got, err := s.RevokeToken(ctx(t), rec.ID)
	if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(first) {
		t.Fatalf("RevokeToken = %+v, %v; want revokedAt %v", got, err, first)
	}
	c.Advance(time.Minute)
	again, err := s.RevokeToken(ctx(t), rec.ID)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(first) {
		t.Errorf("second RevokeToken = %+v, %v; want the first time %v kept", again, err, first)
	}
	look, err := s.LookupToken(ctx(t), rec.Hash)
	if err != nil || look.RevokedAt == nil || !look.RevokedAt.Equal(first) || look.RevokedAt.Location() != time.UTC {
		t.Errorf("LookupToken after revoke = %+v, %v", look, err)
	}
	if _, err := s.RevokeToken(ctx(t), ulid.Make().String()); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("RevokeToken(unknown) = %v, want ErrNotFound", err)
	}
}

func testTokenHas(t *testing.T, s TokenStore, c *Clock) {
	if has, err := s.HasTokens(ctx(t)); err != nil || has {
		t.Fatalf("HasTokens on an empty store = %v, %v", has, err)
	}
	_, rec := NewAPIToken("acme", false)
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeToken(ctx(t), rec.ID); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasTokens(ctx(t)); err != nil || !has {
		t.Errorf("HasTokens with only a revoked token = %v, %v; want true", has, err)
	}
}

func testTokenList(t *testing.T, s TokenStore, c *Clock) {
	var ids []string
	for i, tenant := range []string{"b", "a", "c"} {
		_, rec := NewAPIToken(tenant, i == 2)
		if err := s.CreateToken(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
		c.Advance(time.Second)
	}
	list, err := s.ListTokens(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range list {
		got = append(got, tk.ID)
	}
	if !slices.Equal(got, ids) || !list[2].Admin || list[0].Admin {
		t.Errorf("ListTokens = %+v, want ids %v oldest first, the last admin", list, ids)
	}
}

// agent.Authenticate over the store: valid, unknown, revoked, empty.
func testTokenAuthenticate(t *testing.T, s TokenStore, c *Clock) {
	tok, rec := NewAPIToken("acme", false)
	if err := s.CreateToken(ctx(t), rec); err != nil {
		t.Fatal(err)
	}
	p, err := agent.Authenticate(ctx(t), s, tok)
	if err != nil || p.Scope.TenantID() != "acme" || p.Scope.IsAdmin() || p.TokenID != rec.ID {
		t.Errorf("Authenticate = %+v, %v", p, err)
	}
	other, _ := NewAPIToken("acme", false)
	for name, tk := range map[string]string{"empty": "", "unknown": other, "not a token": "hello"} {
		if _, err := agent.Authenticate(ctx(t), s, tk); !errors.Is(err, agent.ErrUnauthenticated) {
			t.Errorf("Authenticate(%s) = %v, want ErrUnauthenticated", name, err)
		}
	}
	if _, err := s.RevokeToken(ctx(t), rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Authenticate(ctx(t), s, tok); !errors.Is(err, agent.ErrUnauthenticated) {
		t.Errorf("Authenticate(revoked) = %v, want ErrUnauthenticated", err)
	}
}

func testListRunsByTenant(t *testing.T, s TokenStore, c *Clock) {
	a1, b1, a2 := NewRun("acme", "emulator-5554"), NewRun("beta", "emulator-5554"), NewRun("acme", "emulator-5556")
	for _, r := range []agent.Run{a1, b1, a2} {
		if err := s.CreateRun(ctx(t), r); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Second)
	}
	ids := func(sc agent.Scope, f agent.RunFilter) []string {
		list, err := s.ListRuns(ctx(t), sc, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range list {
			out = append(out, r.RunID)
		}
		return out
	}
	if got := ids(tenantScope(t, "acme"), agent.RunFilter{}); !slices.Equal(got, []string{a2.RunID, a1.RunID}) {
		t.Errorf("ListRuns(tenant acme) = %v, want %v", got, []string{a2.RunID, a1.RunID})
	}
	if got := ids(tenantScope(t, "beta"), agent.RunFilter{Serial: "emulator-5554"}); !slices.Equal(got, []string{b1.RunID}) {
		t.Errorf("ListRuns(tenant beta, serial) = %v", got)
	}
	if got := ids(tenantScope(t, "gamma"), agent.RunFilter{}); len(got) != 0 {
		t.Errorf("ListRuns(tenant gamma) = %v, want none", got)
	}
	if got := ids(agent.Admin(), agent.RunFilter{}); len(got) != 3 {
		t.Errorf("ListRuns(admin) = %v, want all 3", got)
	}
	if _, err := s.ListRuns(ctx(t), agent.Scope{}, agent.RunFilter{}); !errors.Is(err, agent.ErrNoScope) {
		t.Errorf("ListRuns(zero scope) = %v, want ErrNoScope (never every tenant)", err)
	}
}

func tenantScope(t *testing.T, id string) agent.Scope {
	t.Helper()
	sc, err := agent.Tenant(id)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Every read of runs, events, snapshots and leases honors the scope: a
// tenant sees another tenant's run exactly as an unknown one; the zero
// Scope is refused, never read as "every tenant".
func testReadsByScope(t *testing.T, s TokenStore, c *Clock) {
	a, b := mustCreate(t, s, NewRun("acme", "emulator-5554")), mustCreate(t, s, NewRun("beta", "emulator-5556"))
	for _, r := range []agent.Run{a, b} {
		mustCommit(t, s, NodeStep(r, 1, 0, "EnsureDevice"))
	}
	ls, ok := agent.Store(s).(agent.Leases)
	if !ok {
		t.Fatal("the store does not implement agent.Leases")
	}
	for _, r := range []agent.Run{a, b} {
		if _, err := ls.AcquireLease(ctx(t), r.Serial, "h", r.RunID, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	checkRunReadsByScope(t, s, a, b)
	checkLeaseReadsByScope(t, ls, a, b)
	checkZeroScopeRefused(t, s, ls, a.RunID)
	// A tenant id that is not one NATS subject token never reaches a row.
	for _, bad := range []string{"a.b", "*", ">", "a b"} {
		if err := s.CreateRun(ctx(t), NewRun(bad, "emulator-5554")); err == nil {
			t.Errorf("CreateRun(tenant %q) stored the run", bad)
		}
	}
}

// checkRunReadsByScope: acme and admin read acme's run a (its row, events
// and snapshots); acme reads beta's run b as an unknown one.
func checkRunReadsByScope(t *testing.T, s agent.Store, a, b agent.Run) {
	acme := tenantScope(t, "acme")
	for _, sc := range []agent.Scope{acme, agent.Admin()} {
		if r, err := s.GetRun(ctx(t), sc, a.RunID); err != nil || r.TenantID != "acme" {
			t.Errorf("GetRun(%v, own) = %+v, %v", sc, r, err)
		}
		if evs, err := s.Events(ctx(t), sc, a.RunID, 0); err != nil || len(evs) == 0 {
			t.Errorf("Events(%v, own) = %d events, %v", sc, len(evs), err)
		}
		if _, err := s.Snapshot(ctx(t), sc, a.RunID, 0); err != nil {
			t.Errorf("Snapshot(%v, own) = %v", sc, err)
		}
		if _, err := s.LatestSnapshot(ctx(t), sc, a.RunID); err != nil {
			t.Errorf("LatestSnapshot(%v, own) = %v", sc, err)
		}
	}
	if _, err := s.GetRun(ctx(t), acme, b.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("GetRun(acme, beta's run) = %v, want ErrNotFound", err)
	}
	if evs, err := s.Events(ctx(t), acme, b.RunID, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events(acme, beta's run) = %d events, %v; want none", len(evs), err)
	}
	if _, err := s.Snapshot(ctx(t), acme, b.RunID, 0); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Snapshot(acme, beta's run) = %v, want ErrNotFound", err)
	}
	if _, err := s.LatestSnapshot(ctx(t), acme, b.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("LatestSnapshot(acme, beta's run) = %v, want ErrNotFound", err)
	}
}

// checkLeaseReadsByScope: acme's lease reads (active, history, pages) show
// the lease of its run a only; admin's show both, newest first.
func checkLeaseReadsByScope(t *testing.T, ls agent.Leases, a, b agent.Run) {
	acme, admin := tenantScope(t, "acme"), agent.Admin()
	leaseRuns := func(l []agent.Lease, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range l {
			out = append(out, x.RunID)
		}
		return out
	}
	if got := leaseRuns(ls.ActiveLeases(ctx(t), acme)); !slices.Equal(got, []string{a.RunID}) {
		t.Errorf("ActiveLeases(acme) = %v, want only %s", got, a.RunID)
	}
	if got := leaseRuns(ls.LeaseHistory(ctx(t), acme, "")); !slices.Equal(got, []string{a.RunID}) {
		t.Errorf("LeaseHistory(acme) = %v, want only %s", got, a.RunID)
	}
	if got := leaseRuns(ls.LeaseHistory(ctx(t), acme, b.Serial)); len(got) != 0 {
		t.Errorf("LeaseHistory(acme, beta's device) = %v, want none", got)
	}
	if got := leaseRuns(ls.LeasePage(ctx(t), acme, agent.LeaseQuery{Limit: 10})); !slices.Equal(got, []string{a.RunID}) {
		t.Errorf("LeasePage(acme) = %v, want only %s", got, a.RunID)
	}
	if got := leaseRuns(ls.LeasePage(ctx(t), acme, agent.LeaseQuery{RunID: b.RunID, Limit: 10})); len(got) != 0 {
		t.Errorf("LeasePage(acme, beta's run) = %v, want none", got)
	}
	if got := leaseRuns(ls.LeasePage(ctx(t), admin, agent.LeaseQuery{Limit: 10})); !slices.Equal(got, []string{b.RunID, a.RunID}) {
		t.Errorf("LeasePage(admin) = %v, want %s, %s (newest first)", got, b.RunID, a.RunID)
	}
	if got := leaseRuns(ls.ActiveLeases(ctx(t), admin)); len(got) != 2 {
		t.Errorf("ActiveLeases(admin) = %v, want both", got)
	}
}

// checkZeroScopeRefused: every scoped read refuses the zero Scope
// (ErrNoScope), never reading it as "every tenant".
func checkZeroScopeRefused(t *testing.T, s agent.Store, ls agent.Leases, runID string) {
	var zero agent.Scope
	for what, err := range map[string]error{
		"GetRun":         func() error { _, err := s.GetRun(ctx(t), zero, runID); return err }(),
		"Events":         func() error { _, err := s.Events(ctx(t), zero, runID, 0); return err }(),
		"Snapshot":       func() error { _, err := s.Snapshot(ctx(t), zero, runID, 0); return err }(),
		"LatestSnapshot": func() error { _, err := s.LatestSnapshot(ctx(t), zero, runID); return err }(),
		"ActiveLeases":   func() error { _, err := ls.ActiveLeases(ctx(t), zero); return err }(),
		"LeaseHistory":   func() error { _, err := ls.LeaseHistory(ctx(t), zero, ""); return err }(),
		"LeasePage":      func() error { _, err := ls.LeasePage(ctx(t), zero, agent.LeaseQuery{Limit: 1}); return err }(),
	} {
		if !errors.Is(err, agent.ErrNoScope) {
			t.Errorf("%s(zero scope) = %v, want ErrNoScope", what, err)
		}
	}
}
