// Package service is the daemon's core: it accepts runs (Submit), schedules
// them onto devices through device leases (one run per device at a time,
// queued runs wait PENDING in submission order), drives each with the graph
// engine, records control requests (cancel, pause, resume, policy switch)
// that the engine honors between nodes, and resumes unfinished runs when the
// daemon starts. It uses only agent ports (Store, Leases and the small
// interfaces below), so the embedded and the Postgres stores serve it alike.
package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// Runner drives one run to a terminal status or until ctx ends (the engine
// with the setup graph). See agent.Engine.Run for its errors.
type Runner interface {
	Run(ctx context.Context, runID string) (agent.RunStatus, error)
}

var _ Runner = agent.GraphRunner{}

// Preparer validates a run request (the JSON body of POST /v1/runs) and
// builds the run row to store: RunID as given, Status PENDING, Serial, Graph,
// Input, ProjectID and PolicyVersion filled, TenantID as the request names it
// or, when it names none, tenant (Submit passes the caller's: a tenant
// scope's own, Config.DefaultTenant for admin). Submit validates the tenant
// (agent.ValidTenantID) and checks the caller may submit for it; the Preparer
// need not. A request it refuses is an *agent.Error (invalid_request_error)
// whose message names the JSON path. nodes.SetupPreparer is the daemon's.
type Preparer interface {
	Prepare(ctx context.Context, runID, tenant string, body []byte) (agent.Run, error)
}

// Reachability lists the devices this daemon can drive, for the scheduler
// (see Config.Reachable). adbdevice.Reachable is the daemon's.
type Reachability interface {
	Candidates(ctx context.Context) ([]Candidate, error)
}

// Prober checks that a quarantined device answers again (nil: healthy), for
// the scheduler (see Config.QuarantineAfter). adbdevice.BootCompletedProbe
// is the daemon's.
type Prober interface {
	Probe(ctx context.Context, serial string) error
}

// RunnerFunc adapts a function to Runner, as http.HandlerFunc does: tests and
// small programs drive runs with a closure; the daemon uses agent.GraphRunner.
type RunnerFunc func(ctx context.Context, runID string) (agent.RunStatus, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, runID string) (agent.RunStatus, error) {
	return f(ctx, runID)
}

// Device is one device the adb server knows, as GET /v1/devices shows it.
type Device struct {
	// ID is the device's identity in the fleet, the key of its leases
	// (agent.DeviceKey of its identity read from the device and its
	// serial; Keys.Key). Omitted for a device whose identity cannot be
	// read (offline, unauthorized, not answering yet).
	ID        string `json:"id,omitempty"`
	Serial    string `json:"serial"`
	State     string `json:"state"` // adb state: device, offline, unauthorized, …
	Model     string `json:"model,omitempty"`
	APILevel  int    `json:"apiLevel,omitempty"`
	BootReady bool   `json:"bootReady"`
	// Readiness: ready (booted, state device), booting, or the adb state.
	Readiness string `json:"readiness"`
	// HeldBy is the run holding the device's lease ("" when free).
	HeldBy string `json:"heldBy,omitempty"`
	// Lease is the active lease, when one is held.
	Lease *agent.Lease `json:"lease,omitempty"`
	// Quarantined: runs kept failing on the device; it is offered to no run
	// until a health probe passes.
	Quarantined      bool   `json:"quarantined,omitempty"`
	QuarantineReason string `json:"quarantineReason,omitempty"`
}

// DeviceLister lists the devices of the host's adb server.
type DeviceLister interface {
	Devices(ctx context.Context) ([]Device, error)
}

// Errors of the service besides agent.ErrNotFound (unknown run).
var (
	// ErrRunTerminal: control of a run that already ended (HTTP 409).
	ErrRunTerminal = agent.ErrRunTerminal
	// ErrStopping: the daemon is shutting down and takes no new work (HTTP 503).
	ErrStopping = errors.New("daemon is stopping")
)

// Config wires a Service.
type Config struct {
	Store   agent.Store
	Leases  agent.Leases
	Runner  Runner
	Prepare Preparer
	Devices DeviceLister // may be nil
	// Policy resolves the versions a policy switch may name (an unknown one
	// is an error wrapping agent.ErrNotFound); nil accepts any version.
	Policy agent.PolicySource
	// DefaultTenant is the tenant of a run submitted in the Admin scope
	// without a tenantId (default "local").
	DefaultTenant string
	// Holder names this daemon in lease records: a per-process instance id
	// that names neither host nor paths (`serve` uses "serve:<ulid>", a
	// fresh ULID per start; it shows in GET /v1/devices). HolderPrefix
	// matches the holders known dead: at Start, active leases of other
	// holders with this prefix are taken back (`serve` passes the instance
	// id of the previous daemon of its data dir, read from the data dir's
	// lock it now holds; "" takes back nothing).
	Holder       string
	HolderPrefix string
	// SharedLeases: the lease store is shared with daemons of other data
	// dirs and hosts (a fleet's Postgres). Then HolderPrefix's leases are
	// taken back only once expired by the store's clock: a data dir copied
	// while its daemon runs carries that live daemon's instance in its
	// lock, so the lock says which data dir is in use on this host, never
	// that a holder is dead. A live one's lease is left to expire (the
	// scheduler's takeover then ends it holder_lost). False (the embedded
	// store, a file of the data dir whose lock this daemon holds): at once.
	SharedLeases bool
	// HostID identifies the machine of this daemon's adb server (see
	// device.HostID): the lease of an AVD this host boots is keyed
	// agent.DeviceKey(HostID, AVD name), and so is every device when
	// Identity is nil. "" keys those by the bare name (one host).
	HostID string
	// Identity reads a connected device's identity from the device: its
	// lease is keyed agent.DeviceKey(identity, serial), so every daemon
	// that reaches the device (from any host, with any machine id, through
	// any spelling of the adb server's address) contends for one lease,
	// and every host's emulator-5554 is still a device of its own. nil:
	// HostID keys every device.
	Identity DeviceIdentity
	// LeaseTTL (default 30 s) and Heartbeat (default TTL/3): a lease not
	// renewed within its TTL may be taken by another run.
	LeaseTTL  time.Duration
	Heartbeat time.Duration
	// Tick is the scheduler's fallback poll (default 1 s); submissions and
	// run ends wake it at once, and so do other daemons' new runs and lease
	// releases when the store is an agent.QueueNotifier (Postgres NOTIFY).
	Tick  time.Duration
	Clock agent.Clock
	// NewID makes run ids (ULIDs). A func, like a clock: one call, no state
	// worth a type (ulid.Make().String in the daemon).
	NewID func() string
	// Logf reports what the daemon does in the background, as log.Printf
	// does; nil drops it.
	Logf func(format string, args ...any)
	// RetryAfter is how long a run whose engine stopped on an error (not a
	// terminal status) waits before it is scheduled again (default 2 s); it
	// doubles with each error in a row, up to MaxRetryAfter (default 64
	// times RetryAfter), so a run that keeps failing to start takes and
	// releases its device's lease (a lease history row) at a bounded rate.
	RetryAfter    time.Duration
	MaxRetryAfter time.Duration
	// PendingTimeout: a PENDING run whose device name no daemon of the
	// fleet has reached for this long (the store's device sightings,
	// agent.RunQueue) fails once with device_not_found (default 10 min;
	// negative: runs wait forever). Needs a store with agent.RunQueue and a
	// Runner with Failer.
	PendingTimeout time.Duration
	// MaxPendingPerTenant: Submit refuses a run of a tenant that already
	// has this many PENDING runs (ErrQueueFull, HTTP 429); 0: no cap.
	MaxPendingPerTenant int
	// Reachable, when set, lists the devices this daemon can drive (adb
	// devices in state "device", AVDs it can boot); the scheduler gives a
	// run one free device its device name matches (Candidate.Matches: a
	// serial, "<id>/<serial>", an AVD name, a model, "android-<API
	// level>"), keys the lease by that device and drives the run on it (the
	// lease's serial, which EnsureDevice resolves). A run that matches none
	// is left to the daemons of the fleet that can serve it, unless
	// StartUnmatched. nil: every run's device name is taken as this host's
	// device as named (the lease is keyed by the name).
	Reachable Reachability
	// StartUnmatched (one host) starts a run whose device name matches no
	// reachable device here on its name as given, so EnsureDevice fails it
	// clearly (device_not_found) or waits for the device to come online,
	// instead of leaving it PENDING for another daemon; a device name of
	// another host is then refused at Submit.
	StartUnmatched bool
	// QuarantineAfter consecutive runs FAILED on a device put it in
	// quarantine (default 3; negative: never): it is reported in Devices and
	// offered to no run until Probe passes on it, tried every ProbeEvery
	// (default 5 s). Without a Probe the quarantine lasts ProbeEvery.
	QuarantineAfter int
	Probe           Prober
	ProbeEvery      time.Duration
	// Artifacts and Blobs serve the runs' evidence (artifacts.go); nil
	// serves none.
	Artifacts agent.ArtifactIndex
	Blobs     agent.BlobStore
	// Screens captures device screens for WatchScreen (the live screen of
	// the inspector's device page); nil: no live screen. ScreenInterval is
	// its capture loops' period (default DefaultScreenInterval).
	Screens        ScreenCapturer
	ScreenInterval time.Duration
	// NewRunner, when Runner is nil, builds the Runner over the store the
	// engine must commit through (the service's wrapper of Store, which
	// wakes event followers at each commit): a composition root builds the
	// engine in one pass then, with no Runner set after New.
	NewRunner func(agent.Store) Runner
}

// Service is the daemon's run service. Create it with New, then Start.
type Service struct {
	cfg   Config
	store *notifyingStore

	wake chan struct{}

	mu          sync.Mutex
	active      map[string]*activeRun // by run id
	notUntil    map[string]time.Time  // run id -> earliest reschedule after an engine error
	errorsInRow map[string]int        // run id -> engine errors in a row (RetryAfter doubles)
	lastStart   map[string]time.Time  // tenant -> when a run of it last took a device here
	// seenAt, seenNames: the last device sightings written (seeDevices);
	// sweptAt: the last pending-timeout sweep (failUnseen).
	seenAt    time.Time
	seenNames []string
	sweptAt   time.Time
	// elsewhere: run id -> until when it is not tried here, as another
	// host's daemon drives it (agent.ErrLeaseRunElsewhere); such a run does
	// not hold back the later runs of its device name here.
	elsewhere map[string]time.Time
	// ended: run id -> when its execution here ended; a round whose run
	// list was read before that saw the run unfinished and must not start
	// it again (it would take a lease for a run that just ended).
	ended map[string]time.Time
	// startedAt: when a round last read the started runs (startedDue);
	// startedWanted: the next round must read them (a control request).
	startedAt      time.Time
	startedWanted  bool
	startedTenants map[string]int // tenant -> its started runs at that read
	// wakeNames: the device names (agent.QueueName) this daemon reached at
	// its last listing; nil before it (wakesFor).
	wakeNames map[string]bool
	// namedWakes: the store's queue signals pass wakesFor (loop), so a
	// round woken by them alone reads the queue for the names they named:
	// woken, since the last round; wokenAll: a signal since then named
	// nothing (Wake, a LISTEN reconnect): read every name. ticked: the tick
	// came since the last round (tickReadsAll decides whether it reads
	// every name).
	namedWakes bool
	woken      map[string]bool
	wokenAll   bool
	ticked     bool
	// tickOldest: the oldest PENDING run of the fleet at the last tick's
	// round; allReadAt: when a round last read every free device's queue.
	tickOldest string
	allReadAt  time.Time
	health     map[string]*deviceHealth // by serial
	stopping   bool
	// draining: StopTaking was called (no new runs); streams ends the
	// event streams (Follow) then.
	draining   bool
	streams    context.Context
	endStreams context.CancelFunc
	runCtx     context.Context
	stopRuns   context.CancelFunc
	wg         sync.WaitGroup
	loopDone   chan struct{}
	// screens are the live screen's capture loops (screen.go).
	screens *screens
	// renewer renews the runs' leases in one statement per heartbeat when
	// the store can (agent.LeaseBatchRenewer); nil: each run's heartbeat
	// renews its own.
	renewer *renewer
}

type activeRun struct {
	run agent.Run
	// device is the lease's serial: the device the run is driven on.
	device string
	lease  *agent.Lease
	since  time.Time // local time the lease's acquisition was sent
	stop   context.CancelFunc
}

// New returns a Service over cfg. cfg.Store is wrapped so that commits wake
// event followers; use Service.Store() as the engine's store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Leases == nil || cfg.Prepare == nil || cfg.NewID == nil {
		return nil, errors.New("service: Store, Leases, Prepare and NewID are required")
	}
	if cfg.Holder == "" {
		return nil, errors.New("service: Holder is required")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, store: newNotifyingStore(cfg.Store), wake: make(chan struct{}, 1),
		active: map[string]*activeRun{}, notUntil: map[string]time.Time{}, errorsInRow: map[string]int{}, lastStart: map[string]time.Time{}, elsewhere: map[string]time.Time{}, ended: map[string]time.Time{}, health: map[string]*deviceHealth{},
	}
	s.streams, s.endStreams = context.WithCancel(context.Background())
	// Every lease change this daemon makes ends the live screens of the
	// previous holder before the next holder's run touches the device.
	s.screens = &screens{s: s, loops: map[string]*screenLoop{}, perTenant: map[string]int{}}
	s.cfg.Leases = watchedLeases{Leases: cfg.Leases, changed: s.screens.leaseChanged}
	if b, ok := cfg.Leases.(agent.LeaseBatchRenewer); ok {
		s.renewer = newRenewer(batchWatched{b, s.screens.leaseChanged}, s.cfg.LeaseTTL, s.cfg.Heartbeat, s.logf)
	}
	if s.cfg.Runner == nil && cfg.NewRunner != nil {
		s.cfg.Runner = cfg.NewRunner(s.store)
	}
	return s, nil
}

// setDefaults fills c's unset durations, counts, tenant and clock with
// their defaults (see Config); an error for an invalid DefaultTenant.
func (c *Config) setDefaults() error {
	if c.DefaultTenant == "" {
		c.DefaultTenant = "local"
	}
	if !agent.ValidTenantID(c.DefaultTenant) {
		return agent.InvalidTenantID("service: DefaultTenant", c.DefaultTenant)
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.LeaseTTL {
		c.Heartbeat = c.LeaseTTL / 3
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 2 * time.Second
	}
	if c.MaxRetryAfter < c.RetryAfter {
		c.MaxRetryAfter = 64 * c.RetryAfter
	}
	if c.PendingTimeout == 0 {
		c.PendingTimeout = 10 * time.Minute
	}
	if c.QuarantineAfter == 0 {
		c.QuarantineAfter = 3
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = 5 * time.Second
	}
	if c.Clock == nil {
		c.Clock = agent.SystemClock{}
	}
	if c.ScreenInterval <= 0 {
		c.ScreenInterval = DefaultScreenInterval
	}
	return nil
}

// SetRunner sets the Runner (when it needs Store() to be built); before Start.
func (s *Service) SetRunner(r Runner) { s.cfg.Runner = r }

// Store is the store the engine must commit through, so followers of a
// run's events wake at each commit.
func (s *Service) Store() agent.Store { return s.store }

// Holder is this daemon's lease holder name.
func (s *Service) Holder() string { return s.cfg.Holder }

func (s *Service) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Start takes back the leases of dead daemons (holder_lost) and starts the
// scheduler, which resumes every unfinished run (RUNNING, PAUSED,
// CANCELED_REQUESTED, PENDING) from its last snapshot. It returns at once;
// Shutdown stops it.
func (s *Service) Start(ctx context.Context) error {
	if s.cfg.Runner == nil {
		return errors.New("service: no Runner")
	}
	if s.cfg.HolderPrefix != "" {
		taken, err := s.cfg.Leases.ReleaseHolderLeases(ctx, func(h string) bool {
			return h != s.cfg.Holder && strings.HasPrefix(h, s.cfg.HolderPrefix)
		}, s.cfg.SharedLeases, agent.LeaseHolderLost)
		if err != nil {
			return fmt.Errorf("service: take back leases: %w", err)
		}
		for _, l := range taken {
			s.logf("took back lease %d of device %s (run %s, dead holder %s)", l.FencingToken, l.Serial, l.RunID, l.Holder)
		}
	}
	s.mu.Lock()
	s.runCtx, s.stopRuns = context.WithCancel(context.Background())
	s.loopDone = make(chan struct{})
	s.mu.Unlock()
	if s.renewer != nil {
		s.wg.Go(func() { s.renewer.run(s.runCtx) })
	}
	go s.loop()
	return nil
}

// StopTaking is the first step of a daemon's stop: Submit refuses new runs
// (ErrStopping) and every Follow returns ErrStopping at once, so the HTTP
// server's shutdown does not wait for event streams (a follower reconnects
// with Last-Event-ID to another daemon or after the restart). Runs go on
// until Shutdown.
func (s *Service) StopTaking() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.endStreams()
	s.screens.stopAll(ErrStopping)
}

// Shutdown stops taking work, stops the scheduler, discards the node in
// flight of every active run (nothing of it is committed; the engine re-runs
// it on resume), releases their leases (LeaseShutdown) and waits for them, or
// until ctx ends. Unfinished runs stay resumable.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping || s.stopRuns == nil {
		s.mu.Unlock()
		return nil
	}
	s.stopping = true
	s.stopRuns()
	done := s.loopDone
	s.mu.Unlock()
	<-done
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wake asks the scheduler to look for work now, on every device.
func (s *Service) Wake() {
	s.mu.Lock()
	s.wokenAll = true
	s.mu.Unlock()
	s.signal()
}

// wakeNamed asks the scheduler to look for work on the devices named name
// now, when this daemon reaches one (wakesFor): the store's queue signal
// of the same change wakes the daemons that reach it. orAll: a name this
// daemon does not reach wakes it for every device instead.
func (s *Service) wakeNamed(name string, orAll bool) {
	s.mu.Lock()
	named := s.namedWakes
	s.mu.Unlock()
	switch {
	case !named:
		s.Wake()
	case s.wakesFor(agent.QueueName(name)):
		s.signal()
	case orAll:
		s.Wake()
	}
}

// takeWoken returns the device names (agent.QueueName) the wake-ups since
// the last round named (empty after the tick alone), and whether the tick
// came since, and resets them; nil: read every name (a signal named
// nothing, the first round's, or the store's signals are not filtered).
func (s *Service) takeWoken() (only map[string]bool, tick bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	only, tick = s.woken, s.ticked
	if !s.namedWakes || s.wokenAll || only == nil {
		// Every name, whatever the tick says.
		only, tick = nil, false
	}
	s.woken, s.wokenAll, s.ticked = map[string]bool{}, false, false
	return only, tick
}

func (s *Service) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Service) loop() {
	defer close(s.loopDone)
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	var changed <-chan struct{} // nil: the store wakes no one
	if qn, ok := s.store.Store.(agent.QueueNotifier); ok {
		changed = qn.QueueChanged()
	}
	if f, ok := s.store.Store.(agent.QueueWakeFilter); ok && s.cfg.Reachable != nil && !s.cfg.StartUnmatched {
		// Only a daemon that knows its devices can tell which signals are
		// its own (a run on a name as given may start anywhere).
		s.mu.Lock()
		s.namedWakes = true
		s.mu.Unlock()
		f.FilterQueueWakes(s.wakesFor)
		defer f.FilterQueueWakes(nil)
	}
	only, tick := map[string]bool(nil), false
	for {
		if err := s.schedule(s.runCtx, only, tick); err != nil && s.runCtx.Err() == nil {
			s.logf("scheduler: %v", err)
		}
		select {
		case <-s.runCtx.Done():
			return
		case <-s.wake:
		case <-changed:
		case <-t.C:
			// The tick is the fallback for what a wake-up could not name (a
			// device listed since, a missed signal): tickReadsAll.
			s.mu.Lock()
			s.ticked = true
			s.mu.Unlock()
		}
		only, tick = s.takeWoken()
	}
}

// anyToStart reports whether a round listed at listed may start one of
// runs: one not active here, not waiting on another holder, and not ended
// here after the listing (schedule's first test of each run).
func (s *Service) anyToStart(runs []agent.Run, listed time.Time) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range runs {
		_, isActive := s.active[r.RunID]
		other := s.elsewhere[r.RunID]
		endedAt, hasEnded := s.ended[r.RunID]
		if !(isActive || now.Before(other) || (hasEnded && !endedAt.Before(listed))) {
			return true
		}
	}
	return false
}

func (s *Service) everStarted(ctx context.Context, runID string) bool {
	seq, err := s.store.LastSequence(ctx, runID)
	return err != nil || seq > 0
}

// launch drives run r on device (the lease's serial, or the run's device
// name when it holds no lease).
func (s *Service) launch(r agent.Run, lease *agent.Lease, since time.Time, device string) {
	ctx, cancel := context.WithCancel(s.runCtx)
	a := &activeRun{run: r, device: device, lease: lease, since: since, stop: cancel}
	s.mu.Lock()
	s.active[r.RunID] = a
	s.mu.Unlock()
	s.wg.Add(1)
	go s.execute(ctx, a)
}

// execute drives one run while a heartbeat renews its lease; a lost lease
// stops the run here (another holder owns the device now).
func (s *Service) execute(ctx context.Context, a *activeRun) {
	defer s.wg.Done()
	defer a.stop()
	// The heartbeat replaces a.lease (under s.mu) as it renews it; this
	// goroutine reads its own copy, whose serial and fencing token a renewal
	// never changes.
	var lease *agent.Lease
	if a.lease != nil {
		l := *a.lease
		lease = &l
	}
	lost := make(chan struct{})
	hbDone := make(chan struct{})
	runCtx := ctx
	if lease != nil {
		go s.keepLease(ctx, a, *lease, lost, hbDone)
		// Every step the engine commits is fenced by the lease's token.
		runCtx = agent.WithFence(ctx, agent.Fence{Serial: lease.Serial, Token: lease.FencingToken})
	} else {
		close(hbDone)
	}
	status, err := s.cfg.Runner.Run(runCtx, a.run.RunID)
	a.stop()
	<-hbDone
	select {
	case <-lost:
		err = agent.ErrLeaseLost
	default:
	}
	shutdown := s.runCtx.Err() != nil
	if err != nil && !shutdown {
		s.logf("run %s: engine stopped (%s): %v; retrying in %v", a.run.RunID, status, err, s.cfg.RetryAfter)
	}
	var failure agent.ErrorID // the FAILED run's errorId, read once
	if err == nil && status == agent.RunFailed {
		failure = s.failureID(a.run.RunID)
	}
	if lease != nil && !errors.Is(err, agent.ErrLeaseLost) {
		s.releaseRunLease(a.run.RunID, *lease, releaseReason(status, err, shutdown, failure))
	}
	if err == nil && lease != nil {
		s.recordHealth(lease.Serial, deviceFailures[failure])
	}
	s.endRun(a.run.RunID, err != nil && !shutdown)
	if lease != nil && err == nil {
		// The device is free: its names' queued runs may start.
		s.wakeNamed(a.device, true)
	} else {
		s.Wake()
	}
}

// keepLease renews lease every heartbeat until ctx ends (with the other
// runs' leases, through the renewer, when the store renews in batches),
// publishing each renewal in a.lease; when it cannot, it closes lost and
// stops the run. It closes done when it returns.
func (s *Service) keepLease(ctx context.Context, a *activeRun, lease agent.Lease, lost, done chan struct{}) {
	defer close(done)
	renewed := func(l agent.Lease) {
		s.mu.Lock()
		a.lease = &l
		s.mu.Unlock()
	}
	failed := func(err error) {
		s.logf("run %s: %v; stopping the run here", a.run.RunID, err)
		close(lost)
		a.stop()
	}
	if s.renewer == nil {
		heartbeat(ctx, s.cfg.Leases, lease, a.since, s.cfg.LeaseTTL, s.cfg.Heartbeat, renewed, failed)
		return
	}
	results := s.renewer.add(lease)
	defer s.renewer.remove(lease.FencingToken)
	keep(ctx, lease, a.since, s.cfg.LeaseTTL, s.cfg.Heartbeat, nil, nil, results, renewed, failed)
}

// releaseReason is why a run's lease ends after the engine returned status
// and err (failure: the FAILED run's errorId).
func releaseReason(status agent.RunStatus, err error, shutdown bool, failure agent.ErrorID) agent.LeaseReleaseReason {
	switch {
	case err != nil && shutdown:
		return agent.LeaseShutdown
	case err != nil:
		return agent.LeaseHolderLost
	case status == agent.RunCanceled:
		return agent.LeaseCanceled
	case failure == agent.ErrDeviceNotFound || failure == agent.ErrDeviceOffline:
		// The device left the adb server.
		return agent.LeaseDeviceAbsent
	}
	return agent.LeaseFinished
}

// releaseRunLease releases the run's lease for reason; the run's context
// is done, so the release has a context of its own.
func (s *Service) releaseRunLease(runID string, lease agent.Lease, reason agent.LeaseReleaseReason) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cfg.Leases.ReleaseLease(rctx, lease.Serial, lease.FencingToken, reason); err != nil {
		s.logf("run %s: release lease %d: %v", runID, lease.FencingToken, err)
	}
}

// endRun forgets the run's execution here; retry: the engine stopped on
// an error (not a shutdown), so the run waits RetryAfter, doubled with
// each error in a row, before it is scheduled again.
func (s *Service) endRun(runID string, retry bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, runID)
	s.ended[runID] = time.Now()
	if retry {
		n := s.errorsInRow[runID]
		s.errorsInRow[runID] = n + 1
		s.notUntil[runID] = time.Now().Add(min(s.cfg.RetryAfter<<min(n, 20), s.cfg.MaxRetryAfter))
	} else {
		delete(s.notUntil, runID)
		delete(s.errorsInRow, runID)
	}
}

// deviceFailures are the errorIds that blame the device, not the app or the
// request: only these count toward a quarantine.
var deviceFailures = map[agent.ErrorID]bool{
	agent.ErrDeviceOffline: true, agent.ErrDeviceUnauthorized: true, agent.ErrBootTimeout: true,
	agent.ErrSessionCreateFailed: true, agent.ErrInstallFailed: true,
}

// failureID is the errorId of the run's final failure ("" when none or unreadable).
func (s *Service) failureID(runID string) agent.ErrorID {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := s.store.LatestSnapshot(ctx, agent.Admin(), runID)
	if err != nil {
		return ""
	}
	st, err := agent.DecodeRunState(snap)
	if err != nil || st.Failure == nil {
		return ""
	}
	return st.Failure.ErrorID
}

// Submit validates the request and stores the run PENDING for the caller of
// scope sc (nothing is stored when it is refused). The run's tenant is the
// request's tenantId, or, when it names none, sc's tenant (Admin:
// Config.DefaultTenant); a tenant scope may only submit for itself, whatever
// the body says. Errors: an *agent.Error invalid_request_error naming the
// JSON path, an *agent.Error permission_error wrapping agent.ErrForbidden
// (another tenant), agent.ErrNoScope, ErrStopping, or a store failure.
func (s *Service) Submit(ctx context.Context, sc agent.Scope, body []byte) (agent.Run, error) {
	if err := sc.Valid(); err != nil {
		return agent.Run{}, err
	}
	s.mu.Lock()
	stopping := s.stopping || s.draining
	s.mu.Unlock()
	if stopping {
		return agent.Run{}, ErrStopping
	}
	// Whatever Prepare decodes into: one JSON value, no duplicate keys and no
	// keys of one object differing only by case, at any depth (strictjson).
	if err := strictjson.Check("$", body, nil, strictjson.Options{}); err != nil {
		return agent.Run{}, err
	}
	// The tenant is defaulted by the Preparer (with the run's other ids, so
	// the stored plan carries it) and validated here, once.
	tenant := sc.TenantID()
	if sc.IsAdmin() {
		tenant = s.cfg.DefaultTenant
	}
	run, err := s.cfg.Prepare.Prepare(ctx, s.cfg.NewID(), tenant, body)
	if err != nil {
		return agent.Run{}, err
	}
	if !agent.ValidTenantID(run.TenantID) {
		return agent.Run{}, agent.InvalidTenantID("$.tenantId", run.TenantID)
	}
	if !sc.Sees(run.TenantID) {
		return agent.Run{}, agent.Wrap(agent.ErrPermission, agent.ErrForbidden,
			"$.tenantId: the token of tenant %s cannot submit runs for tenant %s", sc.TenantID(), run.TenantID)
	}
	if err := s.checkDeviceName(ctx, run.Serial); err != nil {
		return agent.Run{}, err
	}
	if err := s.checkQueueRoom(ctx, run.TenantID); err != nil {
		return agent.Run{}, err
	}
	run.Status = agent.RunPending
	if err := s.store.CreateRun(ctx, run); err != nil {
		return agent.Run{}, err
	}
	if run, err = s.store.GetRun(ctx, agent.Admin(), run.RunID); err != nil {
		return agent.Run{}, err
	}
	// Its name's daemons wake for it (the store's queue signal); this one
	// at once when it is one of them.
	s.wakeNamed(run.Serial, false)
	return run, nil
}

// checkQueueRoom refuses (ErrQueueFull) a run of a tenant that has
// Config.MaxPendingPerTenant PENDING runs. Daemons submitting together may
// each admit one run past the cap: it bounds a flood, it is not a quota.
func (s *Service) checkQueueRoom(ctx context.Context, tenant string) error {
	limit := s.cfg.MaxPendingPerTenant
	q, ok := s.store.Store.(agent.RunQueue)
	if limit <= 0 || !ok {
		return nil
	}
	n, err := q.CountQueued(ctx, tenant, limit)
	if err != nil {
		return err
	}
	if n >= limit {
		return &agent.Error{ID: agent.ErrInvalidRequest, Retryable: true, Err: ErrQueueFull,
			Msg: fmt.Sprintf("tenant %s has %d PENDING runs, the most a tenant may queue (--max-pending-per-tenant); submit again once some have started", tenant, n)}
	}
	return nil
}

// Control records a control request for the run and returns it with its
// requestId; the engine honors it at the next node boundary, in the commit it
// leads to. kind is one of agent.KindCancelRequested, KindPauseRequested,
// KindResumeRequested, KindPolicySwitchRequested (with policyVersion). The
// request is committed when Control returns (a 202 is a promise); a cancel
// also moves runs.status to CANCELED_REQUESTED in the same transaction, so it
// ends a queued run without touching its device. Errors: agent.ErrNotFound
// (unknown run, or a run sc does not see), ErrRunTerminal (the run ended
// first; nothing recorded), an *agent.Error invalid_request_error (unknown
// kind or policy version). The HTTP API and the NATS control subjects both
// come here with the caller's scope.
func (s *Service) Control(ctx context.Context, sc agent.Scope, runID, kind string, policyVersion int) (agent.Control, error) {
	if err := sc.Valid(); err != nil {
		return agent.Control{}, err
	}
	switch kind {
	case agent.KindCancelRequested, agent.KindPauseRequested, agent.KindResumeRequested:
	case agent.KindPolicySwitchRequested:
		if policyVersion <= 0 {
			return agent.Control{}, agent.Errorf(agent.ErrInvalidRequest, "$.version: a policy switch needs a policy version >= 1")
		}
		if s.cfg.Policy != nil {
			if _, err := s.cfg.Policy.Policy(ctx, policyVersion); err != nil {
				return agent.Control{}, agent.Wrap(agent.ErrInvalidRequest, err, "$.version: policy version %d", policyVersion)
			}
		}
	default:
		return agent.Control{}, agent.Errorf(agent.ErrInvalidRequest, "$.kind: unknown control kind %q", kind)
	}
	// A run's tenant never changes, so checking it before the request is
	// recorded is enough.
	if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
		return agent.Control{}, err
	}
	c, err := s.store.RequestControl(ctx, agent.Control{RunID: runID, Kind: kind, PolicyVersion: policyVersion})
	if err != nil {
		return c, err
	}
	s.mu.Lock()
	s.startedWanted = true
	s.mu.Unlock()
	s.Wake()
	return c, nil
}

// Get returns the run (agent.ErrNotFound when unknown or not seen by sc).
func (s *Service) Get(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error) {
	return s.store.GetRun(ctx, sc, runID)
}

// List returns the runs sc sees, newest first.
func (s *Service) List(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	return s.store.ListRuns(ctx, sc, f)
}

// Events returns the run's events with sequence > after (agent.ErrNotFound
// for an unknown run or one sc does not see).
func (s *Service) Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error) {
	if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	return s.store.Events(ctx, sc, runID, after)
}

// Follow calls fn with each event of the run with sequence > after, in
// order, as they are committed, until the run is terminal and all its events
// were passed, fn fails, ctx ends, or StopTaking is called (ErrStopping).
// agent.ErrNotFound for a run sc does not see.
func (s *Service) Follow(ctx context.Context, sc agent.Scope, runID string, after int64, fn func(agent.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	err := FollowStore(ctx, s.store, sc, runID, after, func() <-chan struct{} { return s.store.changed(runID) }, time.Second, fn)
	if err != nil && s.streams.Err() != nil {
		return ErrStopping
	}
	return err
}

// FollowRuns calls fn with each run sc sees among the newest
// FollowRunsWindow matching f (f.Limit and f.After are ignored), oldest
// first: every one at the start, then each one whose status, serial, policy
// version or updatedAt changed and each new one, as they are committed.
// It re-lists when any run changes (changes within minGap are taken
// together) and every second (commits of other daemons of a fleet), until
// fn fails, ctx ends, or StopTaking is called (ErrStopping).
func (s *Service) FollowRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter, fn func(agent.Run) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	err := followRuns(ctx, s.store, sc, f, s.store.anyChanged, time.Second, 500*time.Millisecond, fn)
	if err != nil && s.streams.Err() != nil {
		return ErrStopping
	}
	return err
}

// FollowRunsWindow is how many of the newest runs FollowRuns watches.
const FollowRunsWindow = 200

func followRuns(ctx context.Context, st agent.Store, sc agent.Scope, f agent.RunFilter, changed func() <-chan struct{}, poll, minGap time.Duration, fn func(agent.Run) error) error {
	f.Limit, f.After = FollowRunsWindow, nil
	seen := map[string]string{}
	for {
		wake := changed()
		runs, err := st.ListRuns(ctx, sc, f)
		if err != nil {
			return err
		}
		for i := len(runs) - 1; i >= 0; i-- {
			r := runs[i]
			k := fmt.Sprintf("%s|%s|%d|%d", r.Status, r.Serial, r.PolicyVersion, r.UpdatedAt.UnixNano())
			if seen[r.RunID] == k {
				continue
			}
			if err := fn(r); err != nil {
				return err
			}
			seen[r.RunID] = k
		}
		if len(seen) > 4*FollowRunsWindow {
			// Runs that left the window: forget them (a later change of one
			// is sent again, which a client takes as an update).
			keep := map[string]string{}
			for _, r := range runs {
				keep[r.RunID] = seen[r.RunID]
			}
			seen = keep
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		// Take the changes of a burst (a step's commit, then its status) in
		// one listing.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(minGap):
		}
	}
}

// FollowStore is Follow over any store: it reads the run's new events each
// time changed's channel closes (nil: never) or every poll (commits made by
// another process), until the run is terminal and all its events were
// passed to fn, fn fails, or ctx ends. Errors wrap agent.ErrNotFound for an
// unknown run or one sc does not see.
func FollowStore(ctx context.Context, st agent.Store, sc agent.Scope, runID string, after int64, changed func() <-chan struct{}, poll time.Duration, fn func(agent.Event) error) error {
	for {
		var wake <-chan struct{}
		if changed != nil {
			wake = changed()
		}
		r, err := st.GetRun(ctx, sc, runID)
		if err != nil {
			return fmt.Errorf("run %s: %w", runID, err)
		}
		evs, err := st.Events(ctx, sc, runID, after)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Sequence
		}
		if r.Status.Terminal() {
			// The terminal event commits with the status CAS, so it was read above.
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-time.After(poll):
		}
	}
}

// ParkedEvents lists the outbox rows the relay parked (newest first, at most
// limit): events that can never be published. Empty when the store does not
// park (agent.ParkedLister).
func (s *Service) ParkedEvents(ctx context.Context, limit int) ([]agent.ParkedEvent, error) {
	pl, ok := s.store.Store.(agent.ParkedLister)
	if !ok {
		return []agent.ParkedEvent{}, nil
	}
	return pl.ParkedEvents(ctx, limit)
}

// Step returns the state snapshot of step n (agent.ErrNotFound for a run sc
// does not see).
func (s *Service) Step(ctx context.Context, sc agent.Scope, runID string, n int) (agent.Snapshot, error) {
	if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
		return agent.Snapshot{}, err
	}
	return s.store.Snapshot(ctx, sc, runID, n)
}

// LatestState is the run's last state snapshot, decoded (agent.ErrNotFound
// for a run sc does not see or one without a snapshot).
func (s *Service) LatestState(ctx context.Context, sc agent.Scope, runID string) (agent.RunState, error) {
	snap, err := s.store.LatestSnapshot(ctx, sc, runID)
	if err != nil {
		return agent.RunState{}, err
	}
	return agent.DecodeRunState(snap)
}

// Devices lists the adb server's devices with the run holding each. A
// device is shared hardware and always listed; which run holds it (HeldBy,
// Lease) is shown only when sc sees that run.
func (s *Service) Devices(ctx context.Context, sc agent.Scope) ([]Device, error) {
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	var devs []Device
	if s.cfg.Devices != nil {
		var err error
		if devs, err = s.cfg.Devices.Devices(ctx); err != nil {
			return nil, err
		}
	}
	leases, err := s.cfg.Leases.ActiveLeases(ctx, sc)
	if err != nil {
		return nil, err
	}
	byKey := map[string]agent.Lease{}
	for _, l := range leases {
		byKey[l.Device] = l
	}
	s.markQuarantined(devs)
	for i := range devs {
		if s.cfg.Identity == nil || devs[i].State == "device" {
			devs[i].ID, _ = s.keys().Key(ctx, devs[i].Serial)
		}
		if l, ok := byKey[devs[i].ID]; ok && devs[i].ID != "" {
			devs[i].HeldBy, devs[i].Lease = l.RunID, &l
		}
		if devs[i].Readiness == "" {
			devs[i].Readiness = readiness(devs[i])
		}
	}
	return devs, nil
}

// markQuarantined marks the devices whose health check quarantined them,
// with the reason.
func (s *Service) markQuarantined(devs []Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range devs {
		if h := s.health[devs[i].Serial]; h != nil && h.quarantined {
			devs[i].Quarantined = true
			devs[i].QuarantineReason = fmt.Sprintf("%d runs in a row FAILED on it; waiting for a health probe to pass", h.failures)
		}
	}
}

// readiness is a device's Readiness when its source gave none: "ready"
// (online and boot-ready), "booting" (online), else its adb state.
func readiness(d Device) string {
	switch {
	case d.State == "device" && d.BootReady:
		return "ready"
	case d.State == "device":
		return "booting"
	}
	return d.State
}

// Leases returns the active leases of the runs sc sees, or their whole
// history with all.
func (s *Service) Leases(ctx context.Context, sc agent.Scope, all bool) ([]agent.Lease, error) {
	if all {
		return s.cfg.Leases.LeaseHistory(ctx, sc, "")
	}
	return s.cfg.Leases.ActiveLeases(ctx, sc)
}

// DeviceKey is the lease key of this daemon's device with that serial
// (Keys.Key); a device whose identity cannot be read now is keyed by the
// host id (the key its leases had before identities were read from devices).
func (s *Service) DeviceKey(ctx context.Context, serial string) string {
	if k, err := s.keys().Key(ctx, serial); err == nil {
		return k
	}
	return agent.DeviceKey(s.cfg.HostID, serial)
}

// LeasePage returns one page of the lease history sc sees, newest first
// (agent.Leases.LeasePage; invalid_request_error for a query outside
// agent.LeaseQuery.Check).
func (s *Service) LeasePage(ctx context.Context, sc agent.Scope, q agent.LeaseQuery) ([]agent.Lease, error) {
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	return s.cfg.Leases.LeasePage(ctx, sc, q)
}

// RunLease returns the run's newest device lease (active, or the last one
// it held), false when it never held one. agent.ErrNotFound for a run sc
// does not see.
func (s *Service) RunLease(ctx context.Context, sc agent.Scope, runID string) (agent.Lease, bool, error) {
	if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
		return agent.Lease{}, false, err
	}
	ls, err := s.cfg.Leases.LeasePage(ctx, sc, agent.LeaseQuery{RunID: runID, Limit: 1})
	if err != nil || len(ls) == 0 {
		return agent.Lease{}, false, err
	}
	return ls[0], true, nil
}

// ActiveRuns is how many runs this daemon drives now.
func (s *Service) ActiveRuns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.active)
}

// deviceHealth counts a device's consecutive FAILED runs on this daemon.
type deviceHealth struct {
	failures    int
	quarantined bool
	nextProbe   time.Time
}

// recordHealth notes a run's end on serial: a FAILED run counts, any other
// end clears the count.
func (s *Service) recordHealth(serial string, failed bool) {
	if s.cfg.QuarantineAfter < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health[serial]
	if !failed {
		delete(s.health, serial)
		return
	}
	if h == nil {
		h = &deviceHealth{}
		s.health[serial] = h
	}
	h.failures++
	if !h.quarantined && h.failures >= s.cfg.QuarantineAfter {
		h.quarantined, h.nextProbe = true, time.Now().Add(s.cfg.ProbeEvery)
		s.logf("device %s quarantined: %d runs in a row FAILED on it", serial, h.failures)
	}
}

// quarantined reports whether serial is in quarantine, probing it when a
// probe is due; a passing probe ends the quarantine.
func (s *Service) quarantined(ctx context.Context, serial string) bool {
	s.mu.Lock()
	h := s.health[serial]
	if h == nil || !h.quarantined {
		s.mu.Unlock()
		return false
	}
	due := !time.Now().Before(h.nextProbe)
	if due {
		h.nextProbe = time.Now().Add(s.cfg.ProbeEvery)
	}
	s.mu.Unlock()
	if !due {
		return true
	}
	var err error
	if s.cfg.Probe != nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.cfg.Probe.Probe(pctx, serial)
		cancel()
	}
	if err != nil {
		s.logf("device %s stays quarantined: health probe: %v", serial, err)
		return true
	}
	s.mu.Lock()
	delete(s.health, serial)
	s.mu.Unlock()
	s.logf("device %s leaves quarantine: health probe passed", serial)
	return false
}
