package service

// Queued is how many frames wait in the watch's mailbox (at most one: a
// newer frame replaces an untaken one).
func (w *ScreenWatch) Queued() int { return len(w.slot) }
