package android

import (
	"sync"
	"time"
)

// Action is one package-level action the device performed: an install that
// succeeded ("install") or an activity start ("start"), with the package id
// and the device's time. Tests use the history to prove what ran, e.g. that
// a node whose result was committed never ran again after a daemon crash.
type Action struct {
	Kind    string    `json:"kind"`
	Package string    `json:"package"`
	At      time.Time `json:"at"`
}

type actionLog struct {
	mu  sync.Mutex
	all []Action
}

func (l *actionLog) add(kind, pkg string, at time.Time) {
	l.mu.Lock()
	l.all = append(l.all, Action{Kind: kind, Package: pkg, At: at})
	l.mu.Unlock()
}

// History returns the device's installs and activity starts so far, oldest first.
func (d *Device) History() []Action {
	d.actions.mu.Lock()
	defer d.actions.mu.Unlock()
	return append([]Action(nil), d.actions.all...)
}
