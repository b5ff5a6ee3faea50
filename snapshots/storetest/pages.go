package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// testListRunsPages: ListRuns pages by RunFilter.After (keyset) list every
// run exactly once, newest first, ties of created_at broken by run id, while
// runs are created between pages; a tenant scope pages through its runs
// only, whatever key it continues after.
func testListRunsPages(t *testing.T, s agent.Store) {
	base := time.Date(2026, 3, 1, 10, 0, 0, 654321000, time.UTC)
	want := createPagedRuns(t, s, base) // acme's and beta's runs
	// Runs created between pages (now: newer than every listed one) do
	// not shift later pages: no duplicate, no gap.
	var added []string
	addRun := func() {
		r := NewRun("acme", "emulator-5556")
		mustCreate(t, s, r)
		added = append(added, r.RunID)
	}
	got := listPages(t, s, agent.Admin(), 5, addRun)
	if !slices.Equal(got, runIDs(want)) {
		t.Errorf("admin pages of 5 = %v\nwant %v (runs added between pages: %v)", got, runIDs(want), added)
	}
	var acme []string
	for _, r := range want {
		if r.TenantID == "acme" {
			acme = append(acme, r.RunID)
		}
	}
	got = listPages(t, s, mustTenant(t, "acme"), 3, func() {})
	// acme's pages start with the runs added meanwhile (newest).
	slices.Reverse(added)
	if wantAcme := append(added, acme...); !slices.Equal(got, wantAcme) {
		t.Errorf("acme pages of 3 = %v\nwant %v", got, wantAcme)
	}
	checkPageAfterOtherTenant(t, s, want)
	// A key past every run: an empty page.
	end := agent.RunKey{CreatedAt: base.Add(-time.Hour), RunID: ulid.Make().String()}
	if page, err := s.ListRuns(ctx(t), agent.Admin(), agent.RunFilter{After: &end}); err != nil || len(page) != 0 {
		t.Errorf("after the oldest: %v %v", runIDs(page), err)
	}
}

// createPagedRuns creates 12 runs, every third of tenant beta and the others
// of acme, four sharing each created_at from base on, and returns them
// newest first, ties broken by run id (descending).
func createPagedRuns(t *testing.T, s agent.Store, base time.Time) []agent.Run {
	var runs []agent.Run
	for i := 0; i < 12; i++ {
		tenant := "acme"
		if i%3 == 2 {
			tenant = "beta"
		}
		r := NewRun(tenant, "emulator-5554")
		// Four runs share each created_at: the run id breaks the tie.
		r.CreatedAt = base.Add(time.Duration(i/4) * time.Second)
		r.UpdatedAt = r.CreatedAt
		runs = append(runs, mustCreate(t, s, r))
	}
	slices.SortFunc(runs, func(a, b agent.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		if a.RunID > b.RunID {
			return -1
		}
		return 1
	})
	return runs
}

// listPages lists sc's runs page by page of limit (keyset: each page after
// the previous one's last key), calling between after each full page, and
// returns the run ids in order; at most 20 pages.
func listPages(t *testing.T, s agent.Store, sc agent.Scope, limit int, between func()) []string {
	t.Helper()
	var ids []string
	var after *agent.RunKey
	for n := 0; ; n++ {
		if n > 20 {
			t.Fatalf("%v: no last page after 20 pages", sc)
		}
		page, err := s.ListRuns(ctx(t), sc, agent.RunFilter{Limit: limit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("%v: a page of %d runs, limit %d", sc, len(page), limit)
		}
		for _, r := range page {
			ids = append(ids, r.RunID)
		}
		if len(page) < limit {
			return ids
		}
		k := page[len(page)-1].Key()
		after = &k
		between()
	}
}

// checkPageAfterOtherTenant: a key of another tenant's (beta's) run
// continues acme's list, with acme's older runs only.
func checkPageAfterOtherTenant(t *testing.T, s agent.Store, runs []agent.Run) {
	var betaKey agent.RunKey
	for _, r := range runs {
		if r.TenantID == "beta" {
			betaKey = r.Key()
			break
		}
	}
	rest, err := s.ListRuns(ctx(t), mustTenant(t, "acme"), agent.RunFilter{After: &betaKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rest {
		if r.TenantID != "acme" || !r.CreatedAt.Before(betaKey.CreatedAt) && !(r.CreatedAt.Equal(betaKey.CreatedAt) && r.RunID < betaKey.RunID) {
			t.Errorf("acme after beta's key %v: %s of %s at %v", betaKey, r.RunID, r.TenantID, r.CreatedAt)
		}
	}
}

func mustTenant(t *testing.T, id string) agent.Scope {
	t.Helper()
	sc, err := agent.Tenant(id)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}
