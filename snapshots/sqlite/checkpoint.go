package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"
)

// checkpointer copies the WAL back into the database file off the writer's
// commits. SQLite's automatic checkpoint (every 1000 WAL pages) runs inside
// the COMMIT that crosses the mark: that group commit, and every step queued
// behind it, waited for the copy and its two fsyncs (synchronous=NORMAL syncs
// nothing else), the largest part of the commit's p99 at 32 devices
// (docs/decisions.md, issue 17). The writer connection runs with
// wal_autocheckpoint=0; after group commits this goroutine runs a PASSIVE
// checkpoint on a connection of its own, at most every interval, which
// copies while the writer goes on. A PASSIVE checkpoint only finishes the WAL
// (so that the writer's next transaction starts it over from its beginning)
// when no commit lands meanwhile; under steady load it may never, so once
// the WAL holds restartFrames pages the checkpoint runs between two group
// commits (holding the leader slot: a short one, the background passes
// copied most pages already), which bounds the WAL file.
type checkpointer struct {
	db            *sql.DB // one connection of its own
	g             *groupCommitter
	w             *sql.DB // the writer, for the pass between group commits
	interval      time.Duration
	restartFrames int
	kick          chan struct{}
	stop          context.CancelFunc
	done          chan struct{}
	// passes counts checkpoints run, between the background ones and those
	// between group commits; failures those that returned an error.
	passes, between, failures atomic.Int64
}

// Defaults of the checkpointer: a pass at most every checkpointInterval while
// commits come in; the WAL restarted between group commits past
// checkpointRestartFrames pages (16 MiB at 4 KiB pages).
const (
	checkpointInterval      = 200 * time.Millisecond
	checkpointRestartFrames = 4096
)

func startCheckpointer(path string, busy time.Duration, g *groupCommitter, w *sql.DB) (*checkpointer, error) {
	db, err := openOneConn(sqliteDSN(path, busy, true, Options{}))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, g: g, w: w, interval: checkpointInterval, restartFrames: checkpointRestartFrames,
		kick: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c, nil
}

// commit tells the checkpointer that a group committed (never blocks).
func (c *checkpointer) commit() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		if wait := c.interval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		frames, err := c.pass(ctx, c.db)
		if err == nil && frames >= c.restartFrames {
			// Between two group commits: no commit lands before the writer's
			// next transaction, which then starts the WAL over.
			select {
			case c.g.leader <- struct{}{}:
				_, err = c.pass(ctx, c.w)
				<-c.g.leader
				c.between.Add(1)
			case <-ctx.Done():
				return
			}
		}
		if err != nil && ctx.Err() == nil {
			c.failures.Add(1)
		}
	}
}

// pass runs one PASSIVE checkpoint on db and returns the WAL's size in pages.
// A failed pass is retried at the next commit.
func (c *checkpointer) pass(ctx context.Context, db *sql.DB) (frames int, err error) {
	var busy, copied int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied); err != nil {
		return 0, fmt.Errorf("snapshots: WAL checkpoint: %w", err)
	}
	c.passes.Add(1)
	return frames, nil
}

// close stops the goroutine and closes its connection (the store's last
// connection to close checkpoints what is left).
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.db.Close()
}
