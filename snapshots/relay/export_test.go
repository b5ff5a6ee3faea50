package relay

import "time"

// SetMarkCoalesce sets the streaming relay's markCoalesce (every relay of
// the process) and returns the previous value; for the side-by-side
// benchmark.
func SetMarkCoalesce(d time.Duration) time.Duration {
	return time.Duration(markCoalesce.Swap(int64(d)))
}
