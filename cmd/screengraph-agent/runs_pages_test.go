package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// listPages follows runs list's nextCursor with cmd (a fresh command per
// page) and returns the run ids of every page.
func listPages(t *testing.T, cmd func(cursor string) *runsListCmd) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for n := 0; ; n++ {
		if n > 20 {
			t.Fatal("no last page after 20 pages")
		}
		out, err := cliRun(t, func(ctx context.Context) error { return cmd(cursor).Run(ctx) })
		var page struct {
			Runs       []agent.Run
			NextCursor string `json:"nextCursor"`
		}
		if err != nil || json.Unmarshal([]byte(out), &page) != nil {
			t.Fatalf("runs list --cursor %q: %v\n%s", cursor, err, out)
		}
		for _, r := range page.Runs {
			ids = append(ids, r.RunID)
		}
		if page.NextCursor == "" {
			return ids
		}
		cursor = page.NextCursor
	}
}

// runs list --limit N --cursor C pages through the daemon and the local
// store alike: every run once, newest first.
func TestRunsListCursor(t *testing.T) {
	e := newAPIEnv(t)
	var want []string
	for _, s := range []string{"emu-1", "emu-2", "emu-3", "emu-4", "emu-5"} {
		id := e.submit(t, s)
		e.waitStatus(t, id, agent.RunFinished)
		want = append([]string{id}, want...)
	}
	got := listPages(t, func(c string) *runsListCmd {
		return &runsListCmd{serverFlags: serverFlags{e.url}, outputFlag: outputFlag{"json"}, Limit: 2, Cursor: c}
	})
	if !slices.Equal(got, want) {
		t.Errorf("pages through the daemon = %v, want %v", got, want)
	}

	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want = nil
	for i := 0; i < 5; i++ {
		r := storetest.NewRun("local", "emu-1")
		if err := st.CreateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		want = append([]string{r.RunID}, want...)
	}
	st.Close()
	got = listPages(t, func(c string) *runsListCmd {
		return &runsListCmd{storeFlags: storeFlags{DataDir: dir}, outputFlag: outputFlag{"json"}, Limit: 2, Cursor: c}
	})
	if !slices.Equal(got, want) {
		t.Errorf("pages of the local store = %v, want %v", got, want)
	}
	_, err = cliRun(t, func(ctx context.Context) error {
		return (&runsListCmd{storeFlags: storeFlags{DataDir: dir}, outputFlag: outputFlag{"json"}, Limit: 2, Cursor: "nope!"}).Run(ctx)
	})
	if !isInvalid(err) {
		t.Errorf("runs list --cursor nope!: %v", err)
	}
}
