package android

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/screengraph/screengraph-agent/agent"
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

// SessionCapabilities returns the capabilities of a new session on serial:
// build(serial, adbPort) when given (the nodes' Ports.Capabilities), else platformName Android and
// appium:automationName UiAutomator2; then, whatever the builder said,
// appium:udid = serial, appium:suppressKillServer = true (never let Appium
// kill-server the shared adb server) and appium:adbPort = adbPort; and
// appium:platformVersion when the input names one and the builder did not.
func SessionCapabilities(build func(serial string, adbPort int) (map[string]any, error), serial string, adbPort int, platformVersion string) (map[string]any, error) {
	var caps map[string]any
	if build != nil {
		c, err := build(serial, adbPort)
		if err != nil {
			return nil, err
		}
		caps = maps.Clone(c)
	}
	if caps == nil {
		caps = map[string]any{}
	}
	if _, ok := caps["platformName"]; !ok {
		caps["platformName"] = "Android"
	}
	if _, ok := caps["appium:automationName"]; !ok {
		caps["appium:automationName"] = "UiAutomator2"
	}
	if _, ok := caps["appium:platformVersion"]; !ok && platformVersion != "" {
		caps["appium:platformVersion"] = platformVersion
	}
	caps["appium:udid"] = serial
	caps["appium:suppressKillServer"] = true
	caps["appium:adbPort"] = adbPort
	return caps, nil
}

// CapUDID reads the device a session's capabilities name (Appium echoes
// "udid" and "deviceUDID" without prefix, requests carry "appium:udid").
func CapUDID(caps map[string]any) string {
	for _, k := range []string{"appium:udid", "udid", "deviceUDID"} {
		if s, ok := caps[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// Reusable probes a remembered session id (s.Probe) for serial. It returns
// the session's health and capabilities, or why it cannot be reused (the
// probe's error, UNHEALTHY, another device's session; "" when it can);
// err only when the Appium server cannot be asked (appium_unreachable,
// timeout, interrupted, network). An unhealthy session is forgotten, a
// reusable one's capabilities kept.
func (s *SessionCaps) Reusable(ctx context.Context, drv device.Driver, serial, id string) (health device.Health, caps map[string]any, why string, err error) {
	health, details, err := s.Probe(ctx, drv, id)
	if err != nil {
		e := agent.Classify(err)
		if e.ID == agent.ErrAppiumUnreachable || e.ID == agent.ErrTimeout || e.ID == agent.ErrInterrupted || e.ID == agent.ErrNetwork {
			return health, nil, "", e
		}
		return health, nil, "probe: " + e.Error(), nil
	}
	if health == device.Unhealthy {
		s.Forget(id)
		why := "probe says UNHEALTHY"
		if r, ok := details["reason"].(string); ok && r != "" {
			why += ": " + r
		}
		return health, nil, why, nil
	}
	caps, _ = details["capabilities"].(map[string]any)
	if udid := CapUDID(caps); udid != "" && udid != serial {
		return health, caps, fmt.Sprintf("session drives %s, not %s", udid, serial), nil
	}
	s.Keep(id, caps)
	return health, caps, "", nil
}

// ReuseProbe is a Reusable call started ahead (SessionCaps.StartReusable):
// a warm device's boot recheck (BootProofs.Recheck, a round trip to adbd)
// and its remembered session's probe (a round trip to Appium) do not depend
// on each other, so they overlap. A nil *ReuseProbe was not started.
type ReuseProbe struct {
	ID     string // the session id probed
	cancel context.CancelFunc
	done   chan struct{}
	health device.Health
	caps   map[string]any
	why    string
	err    error
}

// StartReusable runs s.Reusable(ctx, drv, serial, id) in its own goroutine
// under a context of its own derived from ctx. Collect its answer with Wait,
// or drop it with Discard; one of them must be called.
func (s *SessionCaps) StartReusable(ctx context.Context, drv device.Driver, serial, id string) *ReuseProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &ReuseProbe{ID: id, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.health, p.caps, p.why, p.err = s.Reusable(ctx, drv, serial, id)
	}()
	return p
}

// Wait returns the probe's Reusable answer once it has one (zero values
// on nil).
func (p *ReuseProbe) Wait() (health device.Health, caps map[string]any, why string, err error) {
	if p == nil {
		return "", nil, "", nil
	}
	<-p.done
	p.cancel()
	return p.health, p.caps, p.why, p.err
}

// Discard cancels the probe and waits for it to end, its answer unused
// (the device changed under it: the session is probed again after the full
// boot check). Safe on nil and after Wait.
func (p *ReuseProbe) Discard() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}
