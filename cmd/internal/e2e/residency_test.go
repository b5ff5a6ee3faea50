package e2e

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// exeReadOnlyKB is the resident kB of pid's read-only mappings of its own
// executable (/proc/PID/smaps: text, rodata, pclntab).
func exeReadOnlyKB(t *testing.T, pid int) int64 {
	t.Helper()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kb int64
	in := false
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = len(f) >= 6 && strings.Join(f[5:], " ") == exe && !strings.Contains(f[1], "w")
			continue
		}
		if in && len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			kb += n
		}
	}
	return kb
}

// TestServeDropsStartupBinaryPages: once serving, the daemon unmaps the
// pages of its executable that start-up touched (daemon.DropBinaryPages),
// so fewer of them stay resident than it dropped: the code and tables only
// start-up used do not count in its RSS for the daemon's life.
func TestServeDropsStartupBinaryPages(t *testing.T) {
	srv := simtest.StartADBServer(t)
	d := startDaemon(t, srv)
	re := regexp.MustCompile(`binary pages dropped kb=(\d+)`)
	var dropped int64
	for deadline := time.Now().Add(30 * time.Second); dropped == 0; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(d.log()); m != nil {
			dropped, _ = strconv.ParseInt(m[1], 10, 64)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"binary pages dropped\" line in the serve log\n%s", d.log())
		}
	}
	d.call(t, "GET", "/v1/devices", nil, nil) // some work after the drop
	now := exeReadOnlyKB(t, d.cmd.Process.Pid)
	t.Logf("dropped %d kB of the executable's read-only pages at ready; %d kB resident again after a request", dropped, now)
	if dropped < 8<<10 || now >= dropped*4/5 {
		t.Fatalf("dropped %d kB, %d kB resident again: want at least 8 MiB dropped and under four fifths back", dropped, now)
	}
}
