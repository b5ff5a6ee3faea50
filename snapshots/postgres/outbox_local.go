package postgres

import (
	"sync"
	"time"
)

// SweepEvery is how often, at most, a store's relay claims the heads of
// every run in the outbox (ClaimOutbox's sweep), rather than those of the
// runs this process committed: a NOTIFY from another daemon's commit wakes
// this relay for a sweep no sooner than SweepEvery after the last one.
const SweepEvery = time.Second

// localOutbox is what ClaimOutbox knows without asking Postgres: the runs
// this process committed events of that its relay has not yet seen
// published, and when it last swept the whole outbox.
//
// Why (issue 26 part 4): every commit NOTIFYs every daemon, and each woken
// relay used to claim the fleet's heads in id order, so N relays raced for
// every run and each claim walked every unpublished row, the heads the
// others held included (BenchmarkFleetControlPlane: 125-190 ms per claim,
// most of Postgres's statement time with 20 daemons). A run's events are
// committed by the daemon that holds its device's lease, whose relay is
// woken at once by its own commit (InTx): it claims its own runs through
// the (run_id, sequence) index. The rows no live relay takes (a daemon
// killed before its relay published, a requeue from another process) are
// taken by a relay's sweep, at most SweepEvery after a NOTIFY or at the
// relay's poll, and at once again after a sweep that filled its claim (a
// backlog: a relay drains it claim after claim, as before). A sweep walks
// every unpublished row and, until autovacuum, the index entries of the
// rows published since (BenchmarkFleetControlPlane: up to 119,000 pages a
// sweep), so the fleet sweeps once per SweepEvery, not each daemon:
// fleetSweepDue.
type localOutbox struct {
	mu sync.Mutex
	// runs: run id -> commits recorded (a generation: a run is forgotten
	// only if no commit of it came after the claim that found it done).
	runs map[string]uint64
	// sweptAt: the last sweep; armed: a wake-up for the next sweep is
	// pending (timer).
	sweptAt time.Time
	armed   bool
	// again: the last sweep was full; the next claim sweeps at once,
	// without asking the fleet (fleetSweepDue), as does the first
	// (started false): a relay starting (or a Drain) takes what is there.
	again, started bool
	// wanted: a NOTIFY came since the last sweep.
	wanted bool
}

// committed records a commit of runID's events by this process.
func (l *localOutbox) committed(runID string) {
	l.mu.Lock()
	if l.runs == nil {
		l.runs = map[string]uint64{}
	}
	l.runs[runID]++
	l.mu.Unlock()
}

// claimable returns the runs to claim heads of (with their generations)
// and whether this claim may sweep the whole outbox (then recorded as done
// now); again: the last sweep was full, so this one continues it.
func (l *localOutbox) claimable(now time.Time) (runs map[string]uint64, sweep, again bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	runs = make(map[string]uint64, len(l.runs))
	for id, g := range l.runs {
		runs[id] = g
	}
	if now.Sub(l.sweptAt) >= SweepEvery {
		l.sweptAt, sweep, again = now, true, l.again || !l.started
		l.again, l.started = false, true
	}
	return runs, sweep, again
}

// swept records the outcome of the fleet's turn (fleetSweepDue) for a
// sweep claimable allowed: done clears wanted; a sweep still wanted but
// refused (another daemon's turn, its rows maybe already taken) is tried
// again a SweepEvery later, so a NOTIFY is never left unanswered.
func (l *localOutbox) swept(done bool, wake func()) {
	l.mu.Lock()
	if done {
		l.wanted = false
		l.mu.Unlock()
		return
	}
	wanted := l.wanted
	l.mu.Unlock()
	if wanted {
		l.sweepWanted(time.Now(), wake)
	}
}

// sweepAgain makes the next claim sweep at once: the last sweep was full
// (a backlog is left, as after a daemon died or a relay was down).
func (l *localOutbox) sweepAgain() {
	l.mu.Lock()
	l.sweptAt, l.again = time.Time{}, true
	l.mu.Unlock()
}

// forget drops runID unless a commit of it came after generation gen.
func (l *localOutbox) forget(runID string, gen uint64) {
	l.mu.Lock()
	if l.runs[runID] == gen {
		delete(l.runs, runID)
	}
	l.mu.Unlock()
}

// sweepWanted: another process committed (NOTIFY). wake is called now if
// a sweep is due, else once when it becomes due (one timer at a time).
func (l *localOutbox) sweepWanted(now time.Time, wake func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wanted = true
	wait := SweepEvery - now.Sub(l.sweptAt)
	if wait <= 0 {
		wake()
		return
	}
	if l.armed {
		return
	}
	l.armed = true
	time.AfterFunc(wait, func() {
		l.mu.Lock()
		l.armed = false
		l.mu.Unlock()
		wake()
	})
}
