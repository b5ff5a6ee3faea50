package evidence

import (
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// Bounds of IdleScreens: the success evidence takes a kept screen right
// after WaitIdle returns (the same engine step), so an entry older than
// IdleScreenTTL was never asked for (a run without evidence, a daemon
// stopping). MaxIdleScreens leaves room for one per device of a large host;
// MaxIdleScreenBytes bounds the PNGs and page sources held at once.
const (
	MaxIdleScreens     = 64
	MaxIdleScreenBytes = 64 << 20
	IdleScreenTTL      = time.Minute
)

// IdleScreens implements device.IdleScreens for a Capturer: it keeps the
// screen WaitIdle proved idle, by run, step and attempt, until the success
// evidence of exactly that attempt takes it (once; then it is dropped).
// Memory is bounded: at most MaxIdleScreens entries and MaxIdleScreenBytes
// of PNG and XML, the oldest dropped first, none older than IdleScreenTTL.
// A screen dropped here is captured afresh, as without it.
type IdleScreens struct {
	// Now is the clock of the TTL; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	kept  []idleEntry // oldest first
	bytes int64
}

type idleEntry struct {
	s  device.IdleScreen
	at time.Time // when kept
}

var _ device.IdleScreens = (*IdleScreens)(nil)

func (k *IdleScreens) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func size(s device.IdleScreen) int64 { return int64(len(s.PageSource) + len(s.Screenshot)) }

// Keep implements device.IdleScreens. A run keeps one screen at a time (a
// newer one replaces it); a part larger than an artifact may be is left out.
func (k *IdleScreens) Keep(s device.IdleScreen) {
	if s.RunID == "" {
		return
	}
	if len(s.PageSource) > agent.MaxArtifactBytes {
		s.PageSource = ""
	}
	if len(s.Screenshot) > agent.MaxArtifactBytes {
		s.Screenshot = nil
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropLocked(func(e idleEntry) bool { return e.s.RunID == s.RunID || now.Sub(e.at) > IdleScreenTTL })
	k.kept = append(k.kept, idleEntry{s: s, at: now})
	k.bytes += size(s)
	for len(k.kept) > MaxIdleScreens || k.bytes > MaxIdleScreenBytes {
		k.bytes -= size(k.kept[0].s)
		k.kept[0] = idleEntry{}
		k.kept = k.kept[1:]
	}
}

// take removes and returns the screen kept for run's step and attempt;
// false when there is none (never kept, dropped, or another attempt's).
func (k *IdleScreens) take(runID string, step, attempt int) (device.IdleScreen, bool) {
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	var found device.IdleScreen
	ok := false
	k.dropLocked(func(e idleEntry) bool {
		if e.s.RunID != runID {
			return now.Sub(e.at) > IdleScreenTTL
		}
		// The run's screen goes whichever attempt it was: a later request
		// of the run never wants an earlier attempt's.
		if e.s.StepOrdinal == step && e.s.Attempt == attempt && now.Sub(e.at) <= IdleScreenTTL {
			found, ok = e.s, true
		}
		return true
	})
	return found, ok
}

// Len is the number of screens kept (for tests and metrics).
func (k *IdleScreens) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept)
}

func (k *IdleScreens) dropLocked(drop func(idleEntry) bool) {
	j := 0
	for _, e := range k.kept {
		if drop(e) {
			k.bytes -= size(e.s)
			continue
		}
		k.kept[j] = e
		j++
	}
	clear(k.kept[j:])
	k.kept = k.kept[:j]
}
