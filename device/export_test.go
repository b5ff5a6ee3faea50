package device

// OnAbsent sets the hook called when d begins waiting for its serial.
func OnAbsent(d *ADBDevice, f func()) { d.onAbsent = f }
