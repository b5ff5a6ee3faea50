package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux architecture Go supports; sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100

// CPU is the server's CPU time so far: ClusterCPU of its data directory.
func (s *Server) CPU() (time.Duration, error) { return ClusterCPU(s.data()) }

// ClusterCPU is the CPU time (user + system) of the Postgres cluster whose
// data directory is dataDir (`SHOW data_directory`): its postmaster's, with
// its exited children's (cutime, cstime), and its live children's (backends
// and background workers), from /proc/<pid>/stat (proc(5): fields 14-17, in
// clock ticks of 10 ms). The difference of two readings is the cluster's
// consumption between them, a backend that exited meanwhile included.
// Errors: postmaster.pid or the postmaster's stat unreadable (the server not
// running, or on another host).
func ClusterCPU(dataDir string) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("pgtest: postmaster.pid: %w", err)
	}
	_, total, err := procTicks(pid)
	if err != nil {
		return 0, fmt.Errorf("pgtest: the postmaster's stat: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if ppid, ticks, err := procTicks(p); err == nil && ppid == pid {
			total += ticks // else gone meanwhile, or not the cluster's
		}
	}
	return time.Duration(total) * time.Second / clockTicks, nil
}

// procTicks reads process pid's parent and its utime + stime + cutime +
// cstime in clock ticks.
func procTicks(pid int) (ppid int, ticks int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command sits in parentheses and may hold spaces: split after it.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	ppid, _ = strconv.Atoi(f[1])
	for i := 11; i < 15; i++ {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return ppid, ticks, nil
}
