package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// stmtCache keeps prepared statements of one SQLite pool by SQL text (the
// texts are a bounded set: values always go in as arguments). The
// modernc driver compiles every Query/Exec anew (sqlite3_prepare_v2 was
// about 9% of the daemon's CPU with 32 devices, BenchmarkDaemon32);
// database/sql reuses a statement prepared on a pool for each of its
// connections, and inside a transaction through Tx.StmtContext.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}}
}

// prepare prepares qs now. The writer pool has one connection, so statements
// used inside its transactions are prepared here, before any transaction
// holds it (a pool prepare would wait for that very connection).
func (c *stmtCache) prepare(ctx context.Context, qs ...string) error {
	for _, q := range qs {
		if _, err := c.get(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// get returns q prepared on the pool, preparing it on first use. Not for use
// while the caller holds a transaction of a one-connection pool (see tx).
func (c *stmtCache) get(ctx context.Context, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st := c.m[q]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.m[q]; prev != nil {
		st.Close()
		return prev, nil
	}
	c.m[q] = st
	return st, nil
}

// tx returns q bound to tx: the cached statement when q was prepared, else
// one prepared on tx's connection for this transaction only (closed with it).
func (c *stmtCache) tx(ctx context.Context, tx *sql.Tx, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st := c.m[q]
	c.mu.Unlock()
	if st != nil {
		return tx.StmtContext(ctx, st), nil
	}
	return tx.PrepareContext(ctx, q)
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// queryRow runs q on the read pool through its prepared statement.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) storekit.RowScanner {
	st, err := s.rs.get(ctx, q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// query runs q on the read pool through its prepared statement.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.rs.get(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// collect(scan)(rows, err) scans every row of a query with scan, in order,
// and closes rows; err is the query's own error, returned as is, so a query
// call is its argument: collect(scanRun)(s.query(...)). No rows: nil, as the
// loops it replaced returned. The store's one row loop (the Postgres store's
// is pgx.AppendRows).
func collect[T any](scan func(storekit.RowScanner) (T, error)) func(*sql.Rows, error) ([]T, error) {
	return func(rows *sql.Rows, err error) ([]T, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []T
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Err()
	}
}
