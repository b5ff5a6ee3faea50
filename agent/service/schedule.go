package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

var unfinished = []agent.RunStatus{agent.RunPending, agent.RunRunning, agent.RunPaused, agent.RunCancelRequested}

// Bounds of a round's reads of the queue (agent.RunQueue).
const (
	// maxInFlightRead bounds the started, unfinished runs a round reads
	// (about one per device of the fleet: a round reads them all).
	maxInFlightRead = 2000
	// queuePerTenant: per device name and tenant, the oldest runs read.
	queuePerTenant = 4
	// queueTenants: per device name, the tenants read.
	queueTenants = 64
	// queueOldest: the oldest PENDING runs of any name a round reads where
	// a run may start on its name as given (StartUnmatched, no Reachable).
	queueOldest = 256
	// unseenBatch: runs a pending-timeout sweep fails at most.
	unseenBatch = 100
)

// Failer ends a run FAILED before its next node, with an errorId and a
// summary (agent.GraphRunner: agent.Engine.Fail); the scheduler fails a
// run no daemon can serve with it.
type Failer interface {
	Fail(ctx context.Context, runID string, id agent.ErrorID, summary string) (agent.RunStatus, error)
}

// ErrQueueFull: the tenant has Config.MaxPendingPerTenant PENDING runs
// (HTTP 429); nothing was stored.
var ErrQueueFull = errors.New("too many pending runs for the tenant")

// roundRuns returns the runs a round considers, oldest first, and whether
// it read the queue (agent.RunQueue) rather than every unfinished run.
// names lists the device names to read the queue for (nil: none yet).
func (s *Service) roundRuns(ctx context.Context, q agent.RunQueue, names []string, first bool) ([]agent.Run, error) {
	if q == nil {
		if !first {
			return nil, nil
		}
		runs, err := s.store.ListRuns(ctx, agent.Admin(), agent.RunFilter{Status: unfinished})
		slices.Reverse(runs) // ListRuns is newest first
		return runs, err
	}
	if first {
		// The oldest queued runs, and when due the started ones (to resume
		// when no daemon drives them): enough to know whether a device
		// listing is worth it this round.
		oldest := 1
		if s.cfg.Reachable == nil || s.cfg.StartUnmatched {
			oldest = queueOldest
		}
		started := 0
		if s.startedDue(time.Now()) {
			started = maxInFlightRead
		}
		runs, err := q.QueuedRuns(ctx, agent.QueueQuery{Oldest: oldest, Started: started})
		if started > 0 {
			s.mu.Lock()
			if err != nil {
				s.startedWanted = true // read them again next round
			} else {
				// Fair share counts each tenant's runs in flight from the
				// latest read, until the next.
				s.startedTenants = map[string]int{}
				for _, r := range runs {
					if r.Status != agent.RunPending {
						s.startedTenants[r.TenantID]++
					}
				}
			}
			s.mu.Unlock()
		}
		return runs, err
	}
	if len(names) == 0 {
		return nil, nil
	}
	return q.QueuedRuns(ctx, agent.QueueQuery{Names: names, PerTenant: queuePerTenant, MaxTenants: queueTenants})
}

// startedDue reports whether this round reads the fleet's started runs
// (agent.QueueQuery.Started), and if so records the read. That read is the
// one of a round that grows with the fleet (every run in flight, read by
// every daemon; issue 26 part 4 measured it as most of Postgres's time with
// 1,000 leased devices), and what it finds to start needs no haste: a
// run another daemon drove is resumable only once that daemon's lease
// expired (a TTL after its last renewal), and another daemon's run is not
// tried again before a heartbeat (Service.elsewhere). So it is read at the
// first round, then every Heartbeat, and at once when this daemon has a
// reason: a control request recorded here (a queued run asked to cancel
// ends from this read) or a run of its own whose retry delay
// (Service.notUntil) passed since the last read. Rounds woken by other
// daemons' new runs and releases (NOTIFY) or by the tick read only the
// queue.
func (s *Service) startedDue(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Half a tick of slack: the rounds that come every tick start a hair
	// less than a tick apart, and a read missed by that hair would wait a
	// whole tick more, so a killed daemon's run was taken over up to a tick
	// after TTL + heartbeat (TestFleetChaos: 5.37 s against its 5 s bound).
	due := s.startedAt.IsZero() || s.startedWanted || now.Sub(s.startedAt) >= s.cfg.Heartbeat-s.cfg.Tick/2
	for _, t := range s.notUntil {
		if due {
			break
		}
		due = t.After(s.startedAt) && !t.After(now)
	}
	if due {
		s.startedAt, s.startedWanted = now, false
	}
	return due
}

// mergeOldestFirst merges run lists into one, oldest first, each run once.
func mergeOldestFirst(lists ...[]agent.Run) []agent.Run {
	var all []agent.Run
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortStableFunc(all, func(a, b agent.Run) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.RunID, b.RunID)
	})
	return slices.CompactFunc(all, func(a, b agent.Run) bool { return a.RunID == b.RunID })
}

// deviceNames are the device names that select c on this daemon's host
// (what Candidate.Matches accepts), for the queue's reads and sightings.
func (s *Service) deviceNames(c Candidate) []string {
	// Both "<id>/<serial>" spellings Matches accepts: the device's own
	// identity (fleetid: read from the device) and this host's.
	out := []string{c.Serial, agent.DeviceKey(s.cfg.HostID, c.Serial)}
	if c.ID != "" && c.ID != s.cfg.HostID {
		out = append(out, agent.DeviceKey(c.ID, c.Serial))
	}
	for _, v := range []string{c.AVD, c.Model, c.Product, c.Device} {
		if v != "" {
			out = append(out, v)
		}
	}
	if c.APILevel > 0 {
		out = append(out, "android-"+strconv.Itoa(c.APILevel))
	}
	return out
}

// schedule starts the runs it can: every started run no daemon drives
// (resumed), and PENDING runs on free devices their name matches. The
// queue is read per free device name (agent.RunQueue: bounded, indexed),
// never in full. Among the runs that could take a device, the run of the
// tenant with the fewest runs in flight goes first, then the oldest: a
// tenant's backlog is served in submission order, but never ahead of
// another tenant's first run. A run whose devices are all busy keeps its
// place.
//
// only, when not nil, limits the queue's read to the devices with one of
// those names (agent.QueueName): a round woken by named signals alone, or
// by the tick (tick), which reads every device's when tickReadsAll says so.
func (s *Service) schedule(ctx context.Context, only map[string]bool, tick bool) error {
	listed := time.Now()
	q, _ := s.store.Store.(agent.RunQueue)
	runs, err := s.roundRuns(ctx, q, nil, true)
	if err != nil {
		return err
	}
	if tick && only != nil && s.tickReadsAll(runs, listed) {
		only = nil
	}
	s.forgetStale(listed)
	if !s.anyToStart(runs, listed) {
		// Every unfinished run is driven here, or waits elsewhere: no device
		// listing (an adb connection, a getprop per new device) this round.
		return nil
	}
	var cands []Candidate
	if s.cfg.Reachable != nil {
		// A failed listing starts nothing this round (the adb server is
		// down, or serve holds runs back while its Appium is replaced).
		if cands, err = s.cfg.Reachable.Candidates(ctx); err != nil {
			return fmt.Errorf("reachable devices: %w", err)
		}
	}
	r := &round{s: s, ctx: ctx, cands: cands, listed: listed, busy: s.activeDevices(), only: only}
	if q != nil {
		queued, err := r.readQueue(q)
		if err != nil {
			return err
		}
		runs = mergeOldestFirst(runs, queued)
		s.failUnseen(ctx, q)
	}
	waiting, stop := r.waiting(runs)
	if stop {
		return nil
	}
	return r.acquire(r.fairShare(waiting, s.inflight(runs, q == nil)))
}

// round is one scheduler round's view: the devices reachable at its
// listing and those busy (driven here, claimed this round, or found held
// by another holder this round).
type round struct {
	s      *Service
	ctx    context.Context
	cands  []Candidate
	listed time.Time
	busy   map[string]bool // by lease serial
	// only: the device names (agent.QueueName) whose devices' queue this
	// round reads; nil: every device's.
	only map[string]bool
}

// choice is a run that may take a device this round.
type choice struct {
	run     agent.Run
	devices []string // what the run's name matches, in order
	device  string   // the one tried
	// lastStart: when this daemon last started a run of the tenant.
	lastStart time.Time
}

// forgetStale drops the scheduler's memories that a round listed at
// listed no longer needs.
func (s *Service) forgetStale(listed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, until := range s.elsewhere {
		if time.Now().After(until) {
			delete(s.elsewhere, id)
		}
	}
	for id, at := range s.ended {
		if at.Before(listed) {
			delete(s.ended, id) // this round's list is newer
		}
	}
	for t, at := range s.lastStart {
		if time.Since(at) > time.Hour {
			delete(s.lastStart, t) // served long ago: as good as never
		}
	}
}

// activeDevices are the devices (lease serials) driven here.
func (s *Service) activeDevices() map[string]bool {
	busy := map[string]bool{}
	s.mu.Lock()
	for _, a := range s.active {
		busy[a.device] = true
	}
	s.mu.Unlock()
	return busy
}

// inflight counts each tenant's started runs (fair share), as the latest
// read of them found (startedDue); without a queue, from runs.
func (s *Service) inflight(runs []agent.Run, noQueue bool) map[string]int {
	inflight := map[string]int{}
	s.mu.Lock()
	for t, n := range s.startedTenants {
		inflight[t] = n
	}
	s.mu.Unlock()
	if noQueue {
		for _, r := range runs {
			if r.Status != agent.RunPending {
				inflight[r.TenantID]++
			}
		}
	}
	return inflight
}

// tickReadsAll decides whether a tick's round (of a daemon whose wake-ups
// name their devices) reads the queue for every free device, from the
// oldest PENDING run of the fleet this round read (runs, oldest first):
// only when that run was already the oldest at the last tick's round, so
// it waited a whole tick and its own wake-up did not start it (a device
// listed since, a missed signal, a device freed by an expired lease), or
// when no round read every name for a heartbeat. A run younger than a tick
// is its wake-up's: a steady stream of short runs, where some run of the
// fleet is nearly always PENDING, no longer makes every daemon read every
// name every tick (issue 26 part 4: a read per daemon per second, growing
// with the fleet). Compared by run id, not by the store's clock against
// this host's. A run left behind waits two ticks instead of one.
func (s *Service) tickReadsAll(runs []agent.Run, now time.Time) bool {
	oldest := ""
	for _, r := range runs {
		if r.Status == agent.RunPending {
			oldest = r.RunID
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := oldest != "" && (oldest == s.tickOldest || now.Sub(s.allReadAt) >= s.cfg.Heartbeat)
	s.tickOldest = oldest
	return all
}

// readQueue records the round's device names in the sightings and reads
// the queue for the free ones (every free device's, unless only names
// some).
func (r *round) readQueue(q agent.RunQueue) ([]agent.Run, error) {
	if r.only == nil {
		r.s.mu.Lock()
		r.s.allReadAt = r.listed
		r.s.mu.Unlock()
	}
	var all, free []string
	for _, c := range r.cands {
		names := r.s.deviceNames(c)
		all = append(all, names...)
		if !r.busy[c.Serial] && r.named(names) {
			free = append(free, names...)
		}
	}
	r.s.seeDevices(r.ctx, q, all)
	r.s.setWakeNames(all)
	return r.s.roundRuns(r.ctx, q, free, false)
}

// named reports whether the round reads the queue of a device with these
// names: every device's, or one a wake-up named (a new run for any of its
// names, its lease released).
func (r *round) named(names []string) bool {
	if r.only == nil {
		return true
	}
	for _, n := range names {
		if r.only[agent.QueueName(n)] {
			return true
		}
	}
	return false
}

// setWakeNames records the device names this daemon reaches (as of this
// round's listing): the queue's signals naming another device wake it no
// more (wakesFor).
func (s *Service) setWakeNames(names []string) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[agent.QueueName(n)] = true
	}
	s.mu.Lock()
	s.wakeNames = set
	s.mu.Unlock()
}

// wakesFor is the filter of the store's queue signals
// (agent.QueueWakeFilter): a new run or a released lease wakes this
// daemon's scheduler when it names a device this daemon reaches, or
// before its first listing. A device that came since is found at the next
// tick.
//
// It records what woke the daemon for the next round (takeWoken): the
// name, or every name for a signal that names nothing ("") or one before
// the first listing.
func (s *Service) wakesFor(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case name == "" || s.wakeNames == nil:
		s.wokenAll = true
		return true
	case s.wakeNames[name]:
		if s.woken == nil {
			s.woken = map[string]bool{}
		}
		s.woken[name] = true
		return true
	}
	return false
}

// pick is the first device of c that is free here and not quarantined,
// marked busy.
func (r *round) pick(c *choice) bool {
	for _, d := range c.devices {
		if r.busy[d] || r.s.quarantined(r.ctx, d) {
			continue
		}
		r.busy[d] = true
		c.device = d
		return true
	}
	return false
}

// waiting are the runs of runs that may take a device now (a run asked to
// cancel before it ever held a device is launched without one here); stop:
// the round's context ended.
func (r *round) waiting(runs []agent.Run) (waiting []*choice, stop bool) {
	s := r.s
	now := time.Now()
	for _, run := range runs {
		if r.ctx.Err() != nil {
			return nil, true
		}
		s.mu.Lock()
		_, isActive := s.active[run.RunID]
		wait := s.notUntil[run.RunID]
		other := s.elsewhere[run.RunID]
		endedAt, hasEnded := s.ended[run.RunID]
		last := s.lastStart[run.TenantID]
		s.mu.Unlock()
		if isActive || now.Before(other) || (hasEnded && !endedAt.Before(r.listed)) {
			continue
		}
		devices := s.devicesFor(r.ctx, run.Serial, r.cands, s.cfg.Reachable != nil)
		if now.Before(wait) {
			// It keeps its device: later runs naming only it wait behind
			// it. A run several devices serve holds none back.
			if len(devices) == 1 {
				r.busy[devices[0]] = true
			}
			continue
		}
		// A run asked to cancel before it ever held a device ends without one:
		// the engine commits started + canceled and touches no device.
		if run.Status == agent.RunCancelRequested && !s.everStarted(r.ctx, run.RunID) {
			s.launch(run, nil, time.Time{}, run.Serial)
			continue
		}
		waiting = append(waiting, &choice{run: run, devices: devices, lastStart: last})
	}
	return waiting, false
}

// fairShare orders the runs that take a device: among those that can,
// the one of the tenant with the fewest runs in flight, then the oldest
// (waiting is oldest first; the sort is stable). Each chosen run's device
// is marked busy.
func (r *round) fairShare(waiting []*choice, inflight map[string]int) []*choice {
	now := time.Now()
	var take []*choice
	for len(waiting) > 0 {
		slices.SortStableFunc(waiting, func(a, b *choice) int {
			// Started runs (to resume) first: they hold their place.
			ap, bp := a.run.Status == agent.RunPending, b.run.Status == agent.RunPending
			if ap != bp {
				if bp {
					return -1
				}
				return 1
			}
			if c := cmp.Compare(inflight[a.run.TenantID], inflight[b.run.TenantID]); c != 0 {
				return c
			}
			// Round-robin: the tenant this daemon served longest ago first.
			return a.lastStart.Compare(b.lastStart)
		})
		i := slices.IndexFunc(waiting, r.pick)
		if i < 0 {
			break
		}
		c := waiting[i]
		take = append(take, c)
		inflight[c.run.TenantID]++
		for _, w := range waiting {
			if w.run.TenantID == c.run.TenantID {
				w.lastStart = now
			}
		}
		waiting = slices.Delete(waiting, i, i+1)
	}
	return take
}

// acquire takes the leases of take's devices side by side and launches
// each run whose lease it got: with a burst of submits the store commits
// them together (the embedded store's group commit) instead of one after
// the other. A device found held by another holder (another daemon on the
// same adb server) is skipped and the run tries its next free device, a
// few rounds at most.
func (r *round) acquire(take []*choice) error {
	var failed []error
	for attempt := 0; len(take) > 0 && attempt < 4; attempt++ {
		leases, sent, errs := r.acquireAll(take)
		var again []*choice
		for i, c := range take {
			switch err := errs[i]; {
			case err == nil:
				r.s.mu.Lock()
				r.s.lastStart[c.run.TenantID] = time.Now()
				r.s.mu.Unlock()
				r.s.launch(c.run, &leases[i], sent[i], c.device)
			case errors.Is(err, agent.ErrLeaseRunElsewhere):
				// Look again after a heartbeat (its holder may die); meanwhile
				// the device is free for the next run here: look now.
				r.s.mu.Lock()
				r.s.elsewhere[c.run.RunID] = time.Now().Add(r.s.cfg.Heartbeat)
				r.s.mu.Unlock()
				r.s.Wake()
			case errors.Is(err, agent.ErrLeaseHeld):
				if r.pick(c) { // busy[c.device] stays set: held elsewhere
					again = append(again, c)
				}
			default:
				failed = append(failed, fmt.Errorf("lease %s for run %s: %w", c.device, c.run.RunID, err))
			}
		}
		take = again
	}
	return errors.Join(failed...)
}

// acquireAll asks for the lease of each choice's device at once; sent is
// when each request went out (the heartbeat's local expiry counts from
// there).
func (r *round) acquireAll(take []*choice) (leases []agent.Lease, sent []time.Time, errs []error) {
	leases = make([]agent.Lease, len(take))
	errs = make([]error, len(take))
	sent = make([]time.Time, len(take))
	var wg sync.WaitGroup
	for i, c := range take {
		wg.Go(func() {
			key, err := r.s.leaseKey(r.ctx, c.device, r.cands)
			if err != nil {
				errs[i] = err
				return
			}
			sent[i] = time.Now()
			leases[i], errs[i] = r.s.cfg.Leases.AcquireLease(r.ctx, key, r.s.cfg.Holder, c.run.RunID, r.s.cfg.LeaseTTL)
		})
	}
	wg.Wait()
	return leases, sent, errs
}

// seeDevices records this daemon's device names in the store's sightings
// (agent.RunQueue.SeeDevices) when they changed, or every quarter of the
// pending timeout (at most every minute), so that no run waits for a
// device that daemons of the fleet reach.
func (s *Service) seeDevices(ctx context.Context, q agent.RunQueue, names []string) {
	if s.cfg.PendingTimeout < 0 || len(names) == 0 {
		return
	}
	slices.Sort(names)
	names = slices.Compact(names)
	every := min(s.cfg.PendingTimeout/4, time.Minute)
	s.mu.Lock()
	due := time.Since(s.seenAt) >= every || !slices.Equal(names, s.seenNames)
	s.mu.Unlock()
	if !due {
		return
	}
	if err := q.SeeDevices(ctx, names); err != nil {
		s.logf("scheduler: %v", err)
		return
	}
	s.mu.Lock()
	s.seenAt, s.seenNames = time.Now(), names
	s.mu.Unlock()
}

// failUnseen fails, every tenth of the pending timeout (at most every 30
// s), the PENDING runs whose device name no daemon of the fleet reached for
// the pending timeout (agent.RunQueue.UnseenRuns): device_not_found, once,
// without a lease (the engine's Fail: agent.run.started, agent.run.failed).
func (s *Service) failUnseen(ctx context.Context, q agent.RunQueue) {
	f, ok := s.cfg.Runner.(Failer)
	if s.cfg.PendingTimeout < 0 || !ok {
		return
	}
	every := min(s.cfg.PendingTimeout/10, 30*time.Second)
	s.mu.Lock()
	due := time.Since(s.sweptAt) >= every
	if due {
		s.sweptAt = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	runs, err := q.UnseenRuns(ctx, s.cfg.PendingTimeout, unseenBatch)
	if err != nil {
		s.logf("scheduler: pending timeout: %v", err)
		return
	}
	for _, r := range runs {
		s.mu.Lock()
		_, isActive := s.active[r.RunID]
		s.mu.Unlock()
		if isActive {
			continue
		}
		summary := fmt.Sprintf("no daemon of the fleet has reached a device named %q for %v (--pending-timeout); GET /v1/devices lists each daemon's devices", r.Serial, s.cfg.PendingTimeout)
		st, err := f.Fail(ctx, r.RunID, agent.ErrDeviceNotFound, summary)
		if err != nil {
			s.logf("run %s: pending timeout: %v", r.RunID, err)
			continue
		}
		if st == agent.RunFailed {
			s.logf("run %s FAILED device_not_found: %s", r.RunID, summary)
		}
	}
	if len(runs) == unseenBatch {
		s.mu.Lock()
		s.sweptAt = time.Time{} // more to fail: next round
		s.mu.Unlock()
		s.Wake()
	}
}
