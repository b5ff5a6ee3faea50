package android

import (
	"context"
	"sync"

	"github.com/screengraph/screengraph-agent/device"
)

// SessionCaps remembers the capabilities each Appium session reported to a
// full probe (Driver.Probe). A session's capabilities do not change, so a
// session still answering is probed in one call (device.AliveProber) with
// them put back. Safe for concurrent use; the zero value is empty; nil
// remembers nothing.
type SessionCaps struct {
	mu   sync.Mutex
	caps map[string]map[string]any // by session id
}

// maxSessionCaps bounds SessionCaps; when full it starts again empty.
const maxSessionCaps = 1024

// Probe is drv.Probe, or drv.ProbeAlive with the capabilities kept for id
// in details["capabilities"] when s knows them and drv can.
func (s *SessionCaps) Probe(ctx context.Context, drv device.Driver, id string) (device.Health, map[string]any, error) {
	ap, ok := drv.(device.AliveProber)
	if s == nil || !ok {
		return drv.Probe(ctx, id)
	}
	s.mu.Lock()
	caps := s.caps[id]
	s.mu.Unlock()
	if caps == nil {
		return drv.Probe(ctx, id)
	}
	health, details, err := ap.ProbeAlive(ctx, id)
	if details == nil {
		details = map[string]any{}
	}
	details["capabilities"] = caps
	return health, details, err
}

// Keep records the capabilities a full probe of session id read.
func (s *SessionCaps) Keep(id string, caps map[string]any) {
	if s == nil || caps == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caps == nil || len(s.caps) >= maxSessionCaps {
		s.caps = map[string]map[string]any{}
	}
	s.caps[id] = caps
}

// Forget drops session id (it is gone).
func (s *SessionCaps) Forget(id string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.caps, id)
}
