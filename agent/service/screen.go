package service

// The device's screen, live (issue 27 part 2): ONE capture loop per device,
// shared by every viewer of it, started by the first viewer and stopped when
// the last one leaves. Each viewer has a mailbox of one frame: a viewer
// that has not taken the previous frame when the next is captured loses the
// older one (counted as dropped), so a slow viewer never makes a queue grow
// and never slows the loop or the other viewers.
//
// Tenancy: a frame is tagged with the device's lease it was captured under
// (its fencing token; 0 for a free device), and a viewer only ever gets
// frames of the lease it was let in under. A tenant is let in only while a
// run of its own holds the device (the admin always); when the lease changes
// hands, the viewer's watch ends (ErrScreenLeaseChanged) and a new watch is
// decided again. Lease changes this daemon makes (acquire, release, take
// back, a lost renewal) bump a generation before the new holder's run can
// touch the device, and a frame whose capture overlapped a bump is
// discarded (the generation is the daemon's, not the device's: a change on
// any device costs the captures in flight on every device, a few per run);
// changes made by other daemons of a fleet are seen by a re-read of the
// active leases at most ScreenLeasePoll old (one query per daemon, shared
// by every loop).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// ScreenCapturer captures one frame of a device's screen: a PNG (for adb,
// `adb exec-out screencap -p`, checked to be a PNG). Errors are the device's
// (*agent.Error: device_not_found, device_offline, …). The returned bytes
// are not modified afterwards by the caller or the capturer.
type ScreenCapturer interface {
	CaptureScreen(ctx context.Context, serial string) ([]byte, error)
}

// The live screen's limits.
const (
	// DefaultScreenInterval is the capture loop's period (Config.ScreenInterval):
	// 100 ms aims at 10 frames/s so that at least 5 arrive each second on a
	// loaded host (BenchmarkLiveScreen32: 150 ms gave 5.2 per device, the
	// slowest 4.7, at a load average of 25 on 2 cores; 100 ms gave 8.0).
	DefaultScreenInterval = 100 * time.Millisecond
	// MaxScreenViewers caps the open watches of the daemon and
	// MaxScreenViewersPerTenant those of one tenant (the admin counts as
	// one tenant); more are refused with ErrScreenViewers (HTTP 429).
	MaxScreenViewers          = 64
	MaxScreenViewersPerTenant = 32
	// ScreenCaptureTimeout bounds one capture.
	ScreenCaptureTimeout = 10 * time.Second
	// ScreenFailures is how many captures in a row may fail before the
	// device's watches end with the last error.
	ScreenFailures = 3
	// ScreenLeasePoll is the oldest re-read of the active leases a frame is
	// checked against (lease changes by other daemons of a fleet).
	ScreenLeasePoll = time.Second
)

var (
	// ErrScreenLeaseChanged ends a watch: the device's lease changed hands
	// (a run took it, released it, or another run holds it now).
	ErrScreenLeaseChanged = errors.New("the device's lease changed hands")
	// ErrScreenViewers: too many open watches (MaxScreenViewers,
	// MaxScreenViewersPerTenant).
	ErrScreenViewers = errors.New("too many live screen viewers")
)

// ScreenFrame is one captured frame.
type ScreenFrame struct {
	// PNG is the frame (shared by every viewer: read only).
	PNG []byte
	// Seq numbers the device loop's frames from 1.
	Seq uint64
	// CapturedAt is when the capture ended (the service's clock).
	CapturedAt time.Time
	// FencingToken is the lease the frame was captured under (0: none).
	FencingToken int64
}

// ScreenStats are the live screen's counters (metrics).
type ScreenStats struct {
	// Loops are the capture loops running (one per watched device; a
	// stopped loop's in-flight capture ends first), Viewers the open watches.
	Loops, Viewers   int
	Captured, Failed uint64 // captures since start
	Delivered        uint64 // frames handed to viewers
	Dropped          uint64 // frames a slow viewer lost to a newer one
}

// screens is the service's set of capture loops.
type screens struct {
	s *Service
	// gen is bumped by every lease change this daemon makes.
	gen atomic.Uint64

	mu        sync.Mutex
	loops     map[string]*screenLoop // by serial
	viewers   int
	perTenant map[string]int

	leaseMu sync.Mutex
	snap    struct {
		gen   uint64
		at    time.Time
		byKey map[string]agent.Lease
	}

	captured, failed, delivered, dropped atomic.Uint64
	// running counts the capture loops' goroutines (ScreenStats.Loops).
	running atomic.Int64
}

type screenLoop struct {
	serial, key string
	viewers     map[*ScreenWatch]struct{}
	last        *ScreenFrame
	stop        context.CancelFunc
	done        chan struct{}
}

// ScreenWatch is one viewer of a device's screen: Next returns its frames
// until the watch ends; Close leaves (the last viewer's Close stops the
// device's loop).
type ScreenWatch struct {
	h      *screens
	loop   *screenLoop
	tenant string
	// FencingToken is the lease the watch was let in under (0: none).
	FencingToken int64
	slot         chan ScreenFrame
	end          chan struct{}
	endErr       error // set before end is closed
	endOnce      sync.Once
	closeOnce    sync.Once
	dropped      atomic.Uint64
}

// WatchScreen opens a watch of the screen of serial (a device of this
// daemon's adb server). The admin may watch any device; a tenant only one
// an active lease of its runs holds (else permission_error, ErrForbidden:
// HTTP 403). Errors: invalid_request_error for a serial that is not 1-255
// printable bytes; agent.ErrNotFound when the daemon has no ScreenCapturer;
// ErrScreenViewers over the caps. The device's own errors (device_not_found
// …) come from Next.
func (s *Service) WatchScreen(ctx context.Context, sc agent.Scope, serial string) (*ScreenWatch, error) {
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	if err := checkSerial(serial); err != nil {
		return nil, err
	}
	if s.cfg.Screens == nil {
		return nil, fmt.Errorf("live screen: this daemon captures no screens: %w", agent.ErrNotFound)
	}
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return nil, ErrStopping
	}
	key := s.DeviceKey(ctx, serial)
	ls, err := s.cfg.Leases.ActiveLeases(ctx, sc)
	if err != nil {
		return nil, err
	}
	var token int64
	held := false
	for _, l := range ls {
		if l.Device == key {
			token, held = l.FencingToken, true
		}
	}
	if !held && !sc.IsAdmin() {
		return nil, agent.Wrap(agent.ErrPermission, agent.ErrForbidden, "device %s: no run of your tenant holds it; its screen is shown to the tenant whose run holds the device", serial)
	}
	h := s.screens
	tenant := sc.TenantID()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.viewers >= MaxScreenViewers || h.perTenant[tenant] >= MaxScreenViewersPerTenant {
		return nil, agent.Wrap(agent.ErrInvalidRequest, ErrScreenViewers, "at most %d live screens per tenant and %d per daemon are open: close one", MaxScreenViewersPerTenant, MaxScreenViewers)
	}
	l := h.loops[serial]
	if l == nil {
		// The loop outlives the request that started it (it serves every
		// viewer of the device): its own context, canceled by the last Close.
		lctx, stop := context.WithCancel(context.Background())
		l = &screenLoop{serial: serial, key: key, viewers: map[*ScreenWatch]struct{}{}, stop: stop, done: make(chan struct{})}
		h.loops[serial] = l
		go h.run(lctx, l)
	}
	w := &ScreenWatch{h: h, loop: l, tenant: tenant, FencingToken: token, slot: make(chan ScreenFrame, 1), end: make(chan struct{})}
	l.viewers[w] = struct{}{}
	h.viewers++
	h.perTenant[tenant]++
	if l.last != nil && l.last.FencingToken == token {
		w.slot <- *l.last // the newest frame at once, not a period later
	}
	return w, nil
}

// checkSerial refuses a serial that no adb server names: empty, over 255
// bytes, or with a byte outside printable ASCII (a space included).
func checkSerial(serial string) error {
	if serial == "" || len(serial) > 255 {
		return agent.Errorf(agent.ErrInvalidRequest, "serial: must be 1-255 bytes")
	}
	for i := 0; i < len(serial); i++ {
		if c := serial[i]; c <= ' ' || c > '~' {
			return agent.Errorf(agent.ErrInvalidRequest, "serial: byte %d is not printable ASCII", i)
		}
	}
	return nil
}

// Next returns the viewer's next frame: the newest one not yet returned,
// waiting for it. It returns the watch's end (ErrScreenLeaseChanged, the
// device's error after ScreenFailures failed captures, the service
// stopping) or ctx's error.
func (w *ScreenWatch) Next(ctx context.Context) (ScreenFrame, error) {
	select {
	case <-w.end:
		return ScreenFrame{}, w.endErr
	default:
	}
	select {
	case f := <-w.slot:
		return f, nil
	case <-w.end:
		return ScreenFrame{}, w.endErr
	case <-ctx.Done():
		return ScreenFrame{}, context.Cause(ctx)
	}
}

// Dropped is how many frames this viewer lost to newer ones (it had not
// taken the previous frame when the next was captured).
func (w *ScreenWatch) Dropped() uint64 { return w.dropped.Load() }

// Close leaves the watch; the device's last viewer stops its loop. Safe to
// call more than once.
func (w *ScreenWatch) Close() {
	w.closeOnce.Do(func() {
		h := w.h
		h.mu.Lock()
		delete(w.loop.viewers, w)
		h.viewers--
		if h.perTenant[w.tenant]--; h.perTenant[w.tenant] <= 0 {
			delete(h.perTenant, w.tenant)
		}
		if len(w.loop.viewers) == 0 && h.loops[w.loop.serial] == w.loop {
			delete(h.loops, w.loop.serial)
			w.loop.stop()
		}
		h.mu.Unlock()
		w.finish(context.Canceled)
	})
}

func (w *ScreenWatch) finish(err error) {
	w.endOnce.Do(func() {
		w.endErr = err
		close(w.end)
	})
}

// give hands f to w, replacing a frame w has not taken (dropped). Only the
// device's loop calls it, so the second send finds the slot empty.
func (w *ScreenWatch) give(f ScreenFrame) bool {
	select {
	case w.slot <- f:
		return false
	default:
	}
	lost := false
	select {
	case <-w.slot:
		lost = true
	default:
	}
	select {
	case w.slot <- f:
	default:
		lost = true
	}
	if lost {
		w.dropped.Add(1)
	}
	return lost
}

// ScreenStats returns the live screen's counters.
func (s *Service) ScreenStats() ScreenStats {
	h := s.screens
	h.mu.Lock()
	st := ScreenStats{Loops: int(h.running.Load()), Viewers: h.viewers}
	h.mu.Unlock()
	st.Captured, st.Failed, st.Delivered, st.Dropped = h.captured.Load(), h.failed.Load(), h.delivered.Load(), h.dropped.Load()
	return st
}

// leaseChanged is called by the lease wrapper after each lease change this
// daemon makes, before the new holder's run can use the device.
func (h *screens) leaseChanged() { h.gen.Add(1) }

// leaseOf returns the device's active lease as of a read no older than
// ScreenLeasePoll and made after generation g (one query of the active
// leases, shared by every loop).
func (h *screens) leaseOf(ctx context.Context, key string, g uint64) (agent.Lease, bool, error) {
	h.leaseMu.Lock()
	defer h.leaseMu.Unlock()
	now := time.Now()
	if h.snap.byKey == nil || h.snap.gen != g || now.Sub(h.snap.at) >= ScreenLeasePoll {
		gq := h.gen.Load()
		ls, err := h.s.cfg.Leases.ActiveLeases(ctx, agent.Admin())
		if err != nil {
			return agent.Lease{}, false, err
		}
		m := make(map[string]agent.Lease, len(ls))
		for _, l := range ls {
			m[l.Device] = l
		}
		h.snap.gen, h.snap.at, h.snap.byKey = gq, now, m
	}
	l, ok := h.snap.byKey[key]
	return l, ok, nil
}

// endViewers ends the watches of l that fail keep (under h.mu) with err.
func (h *screens) endViewers(l *screenLoop, keep func(*ScreenWatch) bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range l.viewers {
		if !keep(w) {
			w.finish(err)
		}
	}
}

// run is the device's capture loop: capture, check the lease, hand the frame
// to the viewers of that lease, wait for the next period; until stopped.
func (h *screens) run(ctx context.Context, l *screenLoop) {
	h.running.Add(1)
	defer h.running.Add(-1)
	defer close(l.done)
	interval := h.s.cfg.ScreenInterval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	fails := 0
	var seq uint64
	for ctx.Err() == nil {
		g := h.gen.Load()
		lease, held, err := h.leaseOf(ctx, l.key, g)
		if err == nil {
			token := int64(0)
			if held {
				token = lease.FencingToken
			}
			h.endViewers(l, func(w *ScreenWatch) bool { return w.FencingToken == token }, fmt.Errorf("device %s: %w", l.serial, ErrScreenLeaseChanged))
			cctx, cancel := context.WithTimeout(ctx, ScreenCaptureTimeout)
			var b []byte
			b, err = h.s.cfg.Screens.CaptureScreen(cctx, l.serial)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if h.gen.Load() != g {
				continue // the lease changed during the capture: the frame may show either holder
			}
			if err == nil {
				fails = 0
				seq++
				h.captured.Add(1)
				f := ScreenFrame{PNG: b, Seq: seq, CapturedAt: h.s.cfg.Clock.Now(), FencingToken: token}
				h.mu.Lock()
				l.last = &f
				for w := range l.viewers {
					if w.FencingToken != token {
						continue
					}
					if w.give(f) {
						h.dropped.Add(1)
					}
					h.delivered.Add(1)
				}
				h.mu.Unlock()
			}
		}
		if err != nil {
			h.failed.Add(1)
			if fails++; fails >= ScreenFailures {
				h.endViewers(l, func(*ScreenWatch) bool { return false }, fmt.Errorf("device %s: screen capture: %w", l.serial, err))
				fails = 0
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stopAll ends every watch (the service stopping).
func (h *screens) stopAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.loops {
		for w := range l.viewers {
			w.finish(err)
		}
	}
}

// watchedLeases tells the live screen about every lease change this daemon
// makes, after the store has it and before the caller acts on it.
type watchedLeases struct {
	agent.Leases
	changed func()
}

func (w watchedLeases) AcquireLease(ctx context.Context, device, holder, runID string, ttl time.Duration) (agent.Lease, error) {
	l, err := w.Leases.AcquireLease(ctx, device, holder, runID, ttl)
	if err == nil {
		w.changed()
	}
	return l, err
}

func (w watchedLeases) RenewLease(ctx context.Context, serial string, fencingToken int64, ttl time.Duration) (agent.Lease, error) {
	l, err := w.Leases.RenewLease(ctx, serial, fencingToken, ttl)
	if errors.Is(err, agent.ErrLeaseLost) {
		w.changed() // taken over by another run
	}
	return l, err
}

func (w watchedLeases) ReleaseLease(ctx context.Context, serial string, fencingToken int64, reason agent.LeaseReleaseReason) error {
	err := w.Leases.ReleaseLease(ctx, serial, fencingToken, reason)
	w.changed()
	return err
}

func (w watchedLeases) ReleaseHolderLeases(ctx context.Context, match func(holder string) bool, expiredOnly bool, reason agent.LeaseReleaseReason) ([]agent.Lease, error) {
	ls, err := w.Leases.ReleaseHolderLeases(ctx, match, expiredOnly, reason)
	if len(ls) > 0 || err != nil {
		w.changed()
	}
	return ls, err
}
