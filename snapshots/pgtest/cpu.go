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

// CPUByKind is the server's CPU time so far by process kind:
// ClusterCPUByKind of its data directory.
func (s *Server) CPUByKind() (map[string]time.Duration, error) { return ClusterCPUByKind(s.data()) }

// ClusterCPU is the CPU time (user + system) of the Postgres cluster whose
// data directory is dataDir (`SHOW data_directory`): its postmaster's, with
// its exited children's (cutime, cstime), and its live children's (backends
// and background workers), from /proc/<pid>/stat (proc(5): fields 14-17, in
// clock ticks of 10 ms). The difference of two readings is the cluster's
// consumption between them, a backend that exited meanwhile included.
// Errors: postmaster.pid or the postmaster's stat unreadable (the server not
// running, or on another host).
func ClusterCPU(dataDir string) (time.Duration, error) {
	by, err := ClusterCPUByKind(dataDir)
	var total time.Duration
	for _, d := range by {
		total += d
	}
	return total, err
}

// ClusterCPUByKind is ClusterCPU split by process kind, read from each
// process's title (/proc/<pid>/cmdline, which Postgres rewrites to
// "postgres: <kind> ..."): "client backend" (a connection's process),
// "walwriter", "checkpointer", "autovacuum launcher", "autovacuum worker"
// and the other background workers by their title, "postmaster" (itself)
// and "exited" (its children that ended: their times are the postmaster's
// cutime and cstime, whatever their kind). The sum of the kinds is
// ClusterCPU's; errors as ClusterCPU's.
func ClusterCPUByKind(dataDir string) (map[string]time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return nil, fmt.Errorf("pgtest: postmaster.pid: %w", err)
	}
	_, own, exited, err := procTicks(pid)
	if err != nil {
		return nil, fmt.Errorf("pgtest: the postmaster's stat: %w", err)
	}
	ticks := map[string]int64{"postmaster": own, "exited": exited}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		ppid, own, exited, err := procTicks(p)
		if err != nil || ppid != pid {
			continue // gone meanwhile, or not the cluster's
		}
		ticks[processKind(p)] += own + exited
	}
	out := make(map[string]time.Duration, len(ticks))
	for k, n := range ticks {
		out[k] = time.Duration(n) * time.Second / clockTicks
	}
	return out, nil
}

// processKind is a cluster process's kind from its title: "postgres:
// walwriter", "postgres: autovacuum worker ...", or for a connection
// "postgres: <user> <database> <host>(<port>) <state>" ("client backend").
func processKind(pid int) string {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	title := strings.TrimSpace(strings.TrimPrefix(strings.ReplaceAll(string(raw), "\x00", " "), "postgres: "))
	for _, kind := range []string{"autovacuum launcher", "autovacuum worker", "logical replication launcher", "background writer", "walwriter", "checkpointer", "archiver", "startup", "walsender", "parallel worker"} {
		if strings.HasPrefix(title, kind) {
			return kind
		}
	}
	if strings.Contains(title, "(") {
		return "client backend" // the peer's address and port
	}
	return "other"
}

// ProcessCPU is one cluster process's CPU time so far (user + system, its
// exited children's included), e.g. a backend by its pid
// (pg_stat_activity.pid). Errors: the process is gone, or /proc unreadable.
func ProcessCPU(pid int) (time.Duration, error) {
	_, own, exited, err := procTicks(pid)
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	return time.Duration(own+exited) * time.Second / clockTicks, nil
}

// procTicks reads process pid's parent, its own utime + stime and its
// exited children's cutime + cstime, in clock ticks.
func procTicks(pid int) (ppid int, own, exited int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command sits in parentheses and may hold spaces: split after it.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the command", pid, len(f))
	}
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	ppid, _ = strconv.Atoi(f[1])
	var t [4]int64
	for i := range t {
		t[i], _ = strconv.ParseInt(f[11+i], 10, 64)
	}
	return ppid, t[0] + t[1], t[2] + t[3], nil
}
