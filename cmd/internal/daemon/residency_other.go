//go:build !linux

package daemon

// DropBinaryPages is Linux's (madvise on /proc/self/smaps' mappings): on
// other systems it drops nothing.
func DropBinaryPages() (int64, error) { return 0, nil }
