package postgres_test

import (
	"errors"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// A submit Postgres refuses for want of resources (here a trigger raising
// disk_full, SQLSTATE 53100, as a full data directory does) is
// resource_exhausted, retryable (the API's 503), not internal_error.
func TestPostgresDiskFullIsResourceExhausted(t *testing.T) {
	s := testenv.Postgres(t)
	ctx := t.Context()
	if _, err := s.Pool().Exec(ctx, `CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$;
		CREATE TRIGGER full_disk BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION full_disk()`); err != nil {
		t.Fatal(err)
	}
	err := s.CreateRun(ctx, storetest.NewRun("T", "emulator-5554"))
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrResourceExhausted || !ae.Retryable {
		t.Fatalf("CreateRun on a full disk: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, `DROP TRIGGER full_disk ON runs`); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRun(ctx, storetest.NewRun("T", "emulator-5554")); err != nil {
		t.Fatalf("CreateRun once space is back: %v", err)
	}
}
