package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// A SQLite-level full disk (max_page_count reached: SQLITE_FULL, "database
// or disk is full", as on a full filesystem): writes fail as
// resource_exhausted, retryable (not internal_error), Writable reports the
// store unwritable, and both recover once the space is back.
// (TestServeDiskFull fills a real tmpfs under serve.)
func TestDiskFullIsResourceExhausted(t *testing.T) {
	ctx := context.Background()
	s := openGroupStore(t)
	var pages int
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("before: %v", err)
	}
	// Fill every page, the kv table's last one too.
	var full error
	for _, size := range []int{4096, 512, 64, 8, 1} {
		for i := 0; i < 10000; i++ {
			if full = s.PutKV(ctx, fmt.Sprintf("fill-%d-%d", size, i), []byte(strings.Repeat("x", size))); full != nil {
				break
			}
		}
	}
	// A split needs two new pages: the fill can stop with one page left
	// (whether it does depends on how many pages the schema's migrations
	// left free). Pin the file at its size so the run below needs a page
	// more than there is.
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
		t.Fatal(err)
	}
	run := agent.Run{RunID: ulid.Make().String(), TenantID: "t", Serial: "s", Graph: "setup", Input: []byte(`{"pad":"` + strings.Repeat("y", 8000) + `"}`)}
	err := s.CreateRun(ctx, run)
	for _, e := range []error{full, err} {
		var ae *agent.Error
		if !errors.As(e, &ae) || ae.ID != agent.ErrResourceExhausted || !ae.Retryable || !strings.Contains(e.Error(), "database or disk is full") {
			t.Fatalf("write on a full store: %v", e)
		}
	}
	var ae *agent.Error
	if err := s.Writable(ctx); !errors.As(err, &ae) || ae.ID != agent.ErrResourceExhausted {
		t.Fatalf("Writable on a full store: %v", err)
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA max_page_count = 1073741823`); err != nil {
		t.Fatal(err)
	}
	if err := s.Writable(ctx); err != nil {
		t.Fatalf("Writable once space is back: %v", err)
	}
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatalf("CreateRun once space is back: %v", err)
	}
}
