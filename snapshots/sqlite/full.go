package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"syscall"

	sqlitedrv "modernc.org/sqlite"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// A full disk is resource exhaustion, not an internal error: every write
// that fails for want of space (SQLite's SQLITE_FULL, "database or disk is
// full", or ENOSPC) comes back as agent.ErrResourceExhausted (the HTTP API's
// 503 with Retry-After), and the store counts itself unwritable until a
// write succeeds again (Writable, the /readyz check). New runs are refused
// up front while the data dir's filesystem has less than MinFreeBytes free:
// the space left goes to the runs in flight, whose commits the engine keeps
// retrying until space comes back.

// MinFreeBytes is the free space (bytes, for unprivileged writers) the data
// dir's filesystem must have for CreateRun to accept a run and for Writable
// to report the store writable: a step's commit (events, outbox, snapshot,
// WAL frames) takes tens of KiB, a checkpoint more.
const MinFreeBytes = 1 << 20

// diskFull reports whether err is SQLite's SQLITE_FULL (13, any extended
// code) or the operating system's ENOSPC.
func diskFull(err error) bool {
	if err == nil {
		return false
	}
	var se *sqlitedrv.Error
	if errors.As(err, &se) && se.Code()&0xff == 13 {
		return true
	}
	return errors.Is(err, syscall.ENOSPC)
}

// exhausted classifies err: a full disk becomes resource_exhausted (and
// marks the store unwritable); anything else is returned as is.
func (s *Store) exhausted(err error) error {
	if !diskFull(err) {
		return err
	}
	s.full.Store(true)
	var ae *agent.Error
	if errors.As(err, &ae) && ae.ID == agent.ErrResourceExhausted {
		return err
	}
	return agent.Wrap(agent.ErrResourceExhausted, err, "the store's disk is full")
}

// freeBytes is the space left to unprivileged writers on the filesystem of
// the store's file.
func (s *Store) freeBytes() (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(s.path), &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// checkSpace returns resource_exhausted when the store's filesystem has
// less than MinFreeBytes free; nil when it has more or cannot be asked.
func (s *Store) checkSpace() error {
	free, err := s.freeBytes()
	if err != nil || free >= MinFreeBytes {
		return nil
	}
	return agent.Errorf(agent.ErrResourceExhausted, "the store's disk is full: %d bytes free on the data dir's filesystem, at least %d needed", free, MinFreeBytes)
}

// Writable reports whether the store can take writes (the daemon's /readyz
// "store" check): resource_exhausted while its filesystem has less than
// MinFreeBytes free, or while the last write failed for want of space and
// none succeeded since (it then tries a small write of its own, so the
// answer changes as soon as space is back, with or without a run in
// flight). Other errors: the store's.
func (s *Store) Writable(ctx context.Context) error {
	if _, err := s.writer(); err != nil {
		return err
	}
	if err := s.checkSpace(); err != nil {
		return err
	}
	if !s.full.Load() {
		return nil
	}
	return s.group.do(ctx, false, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES ('store.write_probe', X'', ?)
			ON CONFLICT (key) DO UPDATE SET updated_at = excluded.updated_at`, storekit.FmtTime(s.clock.Now()))
		return err
	})
}
