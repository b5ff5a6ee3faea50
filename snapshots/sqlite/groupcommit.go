package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
)

// writeReq is one write waiting for its group: fn runs in the group's
// transaction (under a SAVEPOINT of its own when the group has others).
type writeReq struct {
	fn     func(ctx context.Context, tx *sql.Tx) error
	notify bool       // it writes outbox rows: wake the relay after the commit
	done   chan error // buffered 1: the outcome
}

// groupCommitter runs the embedded store's hot writes (step commits, run
// creation, lease acquisition and renewal, status changes, outbox marks).
// SQLite has one writer; with many runs writing at once (32 devices on one
// daemon) each write used to wait for the writer connection behind every
// other, in random order (database/sql hands a freed connection to a random
// waiter), for up to 60 ms at p99 while each transaction held it about 1 ms.
// Here the first writer to find the writer free becomes the leader and runs
// every write queued meanwhile in one IMMEDIATE transaction, one SAVEPOINT
// per write (a write that fails rolls back alone), as if they ran one after
// the other; the others wait for their outcome. A write waits at most for the
// group in progress and its own.
type groupCommitter struct {
	s      *Store
	leader chan struct{} // capacity 1: held by the committing leader
	mu     sync.Mutex
	queue  []*writeReq
	// maxGroup bounds the steps of one transaction.
	maxGroup int
	// groups counts the transactions led, steps the steps they carried.
	groups, steps atomic.Int64
}

func newGroupCommitter(s *Store) *groupCommitter {
	return &groupCommitter{s: s, leader: make(chan struct{}, 1), maxGroup: 64}
}

// do runs fn in a group transaction and returns its outcome (see commit).
func (g *groupCommitter) do(ctx context.Context, notify bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return g.commit(ctx, &writeReq{fn: fn, notify: notify})
}

// commit queues r and returns its outcome. When ctx ends while r is still
// queued, r is withdrawn (nothing written) and ctx's error returned; once a
// leader took r, commit waits for its outcome, so the caller never takes a
// written step for an unwritten one.
func (g *groupCommitter) commit(ctx context.Context, r *writeReq) error {
	r.done = make(chan error, 1)
	g.mu.Lock()
	g.queue = append(g.queue, r)
	g.mu.Unlock()
	for {
		select {
		case err := <-r.done:
			return err
		case g.leader <- struct{}{}:
			g.lead()
			<-g.leader
		case <-ctx.Done():
			if g.withdraw(r) {
				return ctx.Err()
			}
			return <-r.done
		}
	}
}

// withdraw removes r from the queue; false when a leader has taken it.
func (g *groupCommitter) withdraw(r *writeReq) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lead commits the queued writes (at most maxGroup) in one transaction and
// hands each its outcome.
func (g *groupCommitter) lead() {
	g.mu.Lock()
	n := min(len(g.queue), g.maxGroup)
	batch := append([]*writeReq(nil), g.queue[:n]...)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	// The steps were accepted by their callers; one caller's ctx ending must
	// not fail the others', so the group runs on a context of its own, one
	// that never ends: modernc.org/sqlite watches a cancellable context with
	// a goroutine (and a progress handler) per statement, about 15% of a
	// step commit's CPU (BenchmarkCommitStep/embedded: 213-238 -> 182-192
	// µs, 37 fewer allocations). A deadline here bought nothing: lock waits
	// end at busy_timeout, and an interrupt reaches no stalled write.
	errs, err := g.s.commitGroup(context.Background(), batch)
	g.groups.Add(1)
	g.steps.Add(int64(len(batch)))
	if err == nil && g.s.ckpt != nil {
		g.s.ckpt.commit()
	}
	if err == nil {
		// The transaction committed: the disk took it (full.go).
		g.s.full.Store(false)
	}
	wrote := false
	for i, r := range batch {
		e := err
		if e == nil {
			e = errs[i]
			wrote = wrote || (e == nil && r.notify)
		}
		// A full disk is resource_exhausted, whichever write met it.
		r.done <- g.s.exhausted(e)
	}
	if wrote {
		select {
		case g.s.commits <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// commitGroup runs batch in one transaction, each write under its own
// SAVEPOINT. errs[i] is write i's own failure (rolled back alone); err, when
// not nil, is the transaction's, and then nothing of the batch is written.
func (s *Store) commitGroup(ctx context.Context, batch []*writeReq) (errs []error, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	errs = make([]error, len(batch))
	single := len(batch) == 1
	for i, r := range batch {
		if single {
			// Alone in its transaction: its failure rolls the transaction back.
			if errs[i] = r.fn(ctx, tx); errs[i] != nil {
				return errs, nil
			}
			continue
		}
		if err := s.execTx(ctx, tx, sqlSavepoint); err != nil {
			return nil, fmt.Errorf("savepoint: %w", err)
		}
		if errs[i] = r.fn(ctx, tx); errs[i] != nil {
			if err := s.execTx(ctx, tx, sqlRollbackTo); err != nil {
				return nil, fmt.Errorf("rollback to savepoint: %w", err)
			}
		}
		if err := s.execTx(ctx, tx, sqlRelease); err != nil {
			return nil, fmt.Errorf("release savepoint: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return errs, nil
}

// The savepoint of each write in a group (prepared at open, stmtCache).
const (
	sqlSavepoint  = `SAVEPOINT step`
	sqlRollbackTo = `ROLLBACK TO step`
	sqlRelease    = `RELEASE step`
)

// execTx runs the prepared statement q in tx.
func (s *Store) execTx(ctx context.Context, tx *sql.Tx, q string) error {
	st, err := s.ws.tx(ctx, tx, q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx)
	return err
}
