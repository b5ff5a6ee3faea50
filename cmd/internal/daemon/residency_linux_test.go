package daemon

import (
	"os"
	"testing"
)

// exeResidentKB is the resident kB of the test binary's read-only mappings.
func exeResidentKB(t *testing.T) (rss int64, n int) {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range readOnlyMappings(raw, exe) {
		rss += m.rssKB
		n++
	}
	return rss, n
}

func TestDropBinaryPagesLowersResidentText(t *testing.T) {
	before, n := exeResidentKB(t)
	if n == 0 {
		t.Fatal("no read-only mapping of the executable in /proc/self/smaps")
	}
	kb, err := DropBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := exeResidentKB(t)
	t.Logf("read-only mappings: %d; resident %d kB before, %d kB dropped, %d kB after", n, before, kb, after)
	if kb < before/2 || after > before/2 {
		t.Fatalf("resident %d kB before, %d after (%d dropped): want at most half left", before, after, kb)
	}
}
