package adbdevice

import "time"

// OnAbsent sets the hook called when d begins waiting for its serial.
func OnAbsent(d *ADBDevice, f func()) { d.onAbsent = f }

// SetReachableClock sets the clock r times its AVD listings by.
func SetReachableClock(r *Reachable, now func() time.Time) { r.now = now }
