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
