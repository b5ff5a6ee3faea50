package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// binaryPages is one read-only mapping of the daemon's own executable, as
// /proc/self/smaps shows it.
type binaryPages struct {
	start, end uintptr
	rssKB      int64 // resident, kB
	anonKB     int64 // private copies (COW), kB: never dropped
}

// DropBinaryPages unmaps the resident pages of the daemon's own executable
// that nothing changed (its text and read-only data: the code and tables of
// start-up, flag parsing, migrations, and the SDKs a daemon links but this
// one may not use), so that only the pages its work touches again come back
// (each fault maps the page and its neighbours, 64 KiB, from the page cache:
// no disk read). It returns the resident kB it dropped. Only mappings of
// the executable that are not writable and hold no private (copy-on-write)
// page are touched: for them MADV_DONTNEED (madvise(2)) means "read it from
// the file again", never a change of contents. Errors are the /proc read's
// or madvise's, as the agent's own error text; the daemon only logs them.
func DropBinaryPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("residency: %w", err)
	}
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("residency: %w", err)
	}
	var dropped int64
	for _, m := range readOnlyMappings(raw, exe) {
		if m.anonKB != 0 || m.rssKB == 0 {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); e != 0 {
			return dropped, fmt.Errorf("residency: madvise %#x-%#x: %w", m.start, m.end, e)
		}
		dropped += m.rssKB
	}
	return dropped, nil
}

// readOnlyMappings reads smaps (the text of /proc/PID/smaps) for the
// mappings of path without write permission, with their Rss and Anonymous
// sizes.
func readOnlyMappings(smaps []byte, path string) []binaryPages {
	var out []binaryPages
	var cur *binaryPages
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			cur = nil
			if len(f) < 6 || strings.Join(f[5:], " ") != path || strings.Contains(f[1], "w") {
				continue
			}
			lo, hi, _ := strings.Cut(f[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			out = append(out, binaryPages{start: uintptr(s), end: uintptr(e)})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			cur.rssKB = n
		case "Anonymous:":
			cur.anonKB = n
		}
	}
	return out
}
