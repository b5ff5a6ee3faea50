package android

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Processes as toybox `ps` and `pidof` list them, and the app sockets of
// /proc/net/tcp{,6}.

func init() {
	registerCommand("ps", cmdPs)
	registerCommand("pidof", cmdPidof)
}

type psEntry struct {
	user      string
	pid, ppid int
	vsz, rss  int
	state     string
	name      string
}

// Fixed pids of the system processes (an emulator after boot).
const (
	pidZygote64    = 312 // zygote64 and system_server pids and sizes of an API 33
	pidZygote      = 313 // emulator (toybox-ps/api33-emulator-ps-A-grep-zygote.txt)
	pidSystemSrv   = 513
	pidAdbd        = 412
	psVszApp       = 13821972 // VSZ/RSS of app processes, from the ps capture in SOURCES.md
	psRssApp       = 135664
	psVszZygote    = 14380132
	psRssZygote    = 42920
	psVszSystemSrv = 15566292
	psRssSystemSrv = 172756
)

// processesLocked lists every process: init, kthreadd, the native daemons,
// zygote, system_server, adbd, the app processes (system UI, launcher,
// started apps, instrumented targets) and the shell running ps.
func (d *Device) processesLocked(withSelf bool) []psEntry {
	ps := []psEntry{
		{"root", 1, 0, 10826728, 3728, "S", "init"},
		{"root", 2, 0, 0, 0, "S", "[kthreadd]"},
		{"logd", 227, 1, 10910920, 6540, "S", "logd"},
		{"system", 241, 1, 10789204, 2788, "S", "servicemanager"},
		{"root", pidZygote64, 1, psVszZygote, psRssZygote, "S", "zygote64"},
		{"root", pidZygote, 1, 1712312, 86464, "S", "zygote"},
		{"shell", pidAdbd, 1, 10905772, 3572, "S", "adbd"},
		{"system", pidSystemSrv, pidZygote64, psVszSystemSrv, psRssSystemSrv, "S", "system_server"},
	}
	for _, p := range d.am.sortedProcsLocked() {
		ps = append(ps, psEntry{appUser(p.uid), p.pid, pidZygote64, psVszApp, psRssApp, "S", p.pkg})
	}
	ps = append(ps, d.rec.entries()...)
	if withSelf {
		sh := d.am.nextPID
		d.am.nextPID += 2
		ps = append(ps,
			psEntry{"shell", sh, pidAdbd, 10786820, 2936, "S", "sh"},
			psEntry{"shell", sh + 1, sh, 10814404, 3556, "R", "ps"})
	}
	return ps
}

// appUser is the Android user name of an app uid: u0_a137 for 10137.
func appUser(uid int) string {
	if uid >= 10000 {
		return fmt.Sprintf("u%d_a%d", uid/100000, uid%100000-10000)
	}
	switch uid {
	case 1000:
		return "system"
	case 2000:
		return "shell"
	}
	return "root"
}

type psField struct {
	title string
	width int // negative: left aligned
	get   func(psEntry) string
}

func psFields(api int) map[string]psField {
	vsz := 7
	if api >= 34 {
		vsz = 10 // Android 14 toybox (ps-A/api34-head.txt); an API 33 emulator still pads to 7
	}
	return map[string]psField{
		"USER":    {"USER", -12, func(e psEntry) string { return e.user }},
		"PID":     {"PID", 5, func(e psEntry) string { return strconv.Itoa(e.pid) }},
		"PPID":    {"PPID", 5, func(e psEntry) string { return strconv.Itoa(e.ppid) }},
		"VSZ":     {"VSZ", vsz, func(e psEntry) string { return strconv.Itoa(e.vsz) }},
		"RSS":     {"RSS", 6, func(e psEntry) string { return strconv.Itoa(e.rss) }},
		"WCHAN":   {"WCHAN", -6, func(e psEntry) string { return "0" }},
		"ADDR":    {"ADDR", 14, func(e psEntry) string { return "0" }},
		"S":       {"S", 1, func(e psEntry) string { return e.state }},
		"NAME":    {"NAME", -27, func(e psEntry) string { return e.name }},
		"CMD":     {"CMD", -27, func(e psEntry) string { return e.name }},
		"ARGS":    {"ARGS", -27, func(e psEntry) string { return e.name }},
		"CMDLINE": {"CMDLINE", -27, func(e psEntry) string { return e.name }},
		"UID":     {"UID", 5, func(e psEntry) string { return strconv.Itoa(uidOfUser(e.user)) }},
	}
}

func uidOfUser(u string) int {
	var usr, app int
	if _, err := fmt.Sscanf(u, "u%d_a%d", &usr, &app); err == nil {
		return usr*100000 + 10000 + app
	}
	switch u {
	case "system":
		return 1000
	case "shell":
		return 2000
	case "logd":
		return 1036
	}
	return 0
}

// writePsTable prints rows the way toybox does: each field padded to its width,
// a field longer than its width pushes the next one right and the next field
// absorbs the overflow (capture "u0_a184 4700 319 13821972 135664 0 … 0 S …");
// the last field is not padded.
func writePsTable(w io.Writer, fields []psField, rows []psEntry) {
	line := func(vals []string) {
		var b strings.Builder
		debt := 0
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(' ')
			}
			v := vals[i]
			width := f.width
			left := width < 0
			if left {
				width = -width
			}
			width -= debt
			if width < 0 {
				width = 0
			}
			if i == len(fields)-1 && left {
				b.WriteString(v)
				break
			}
			pad := width - len(v)
			if pad < 0 {
				debt = -pad
				pad = 0
			} else {
				debt = 0
			}
			if left {
				b.WriteString(v + strings.Repeat(" ", pad))
			} else {
				b.WriteString(strings.Repeat(" ", pad) + v)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	titles := make([]string, len(fields))
	for i, f := range fields {
		titles[i] = f.title
	}
	line(titles)
	for _, r := range rows {
		vals := make([]string, len(fields))
		for i, f := range fields {
			vals[i] = f.get(r)
		}
		line(vals)
	}
}

// psHelp is the start of toybox ps's help text on API 29+ (quoted from the
// devicefarmer adbkit ps command docs, see SOURCES.md); appium-adb tests
// /^-A\b/m on it to decide whether to call `ps -A`.
const psHelp = `usage: ps [-AadefLlnwZ] [-gG GROUP,] [-k FIELD,] [-o FIELD,] [-p PID,] [-t TTY,] [-uU USER,]

List processes.

Which processes to show (-gGuUpPt selections may be comma separated lists):

-A  All                                 -a  Has terminal not session leader
-d  All but session leaders             -e  Synonym for -A
-g  In GROUPs                           -G  In real GROUPs (before sgid)
-p  PIDs (--pid)                        -P  Parent PIDs (--ppid)
-s  In session IDs                      -t  Attached to selected TTYs
-T  Show threads also                   -u  Owned by selected USERs
-U  Real USERs (before suid)

Output modifiers:

-k  Sort FIELDs (-FIELD to reverse)     -M  Measure/pad future field widths
-n  Show numeric USER and GROUP         -w  Wide output (don't truncate fields)

Which FIELDs to show. (-o HELP for list, default = -o PID,TTY,TIME,CMD)

-f  Full listing (-o USER:12=UID,PID,PPID,C,STIME,TTY,TIME,ARGS=CMD)
-l  Long listing (-o F,S,UID,PID,PPID,C,PRI,NI,ADDR,SZ,WCHAN,TTY,TIME,CMD)
-o  Output FIELDs instead of defaults, each with optional :size and =title
-O  Add FIELDS to defaults
-Z  Include LABEL
`

// cmdPs is toybox ps. Without a terminal (adb shell COMMAND) plain `ps` lists
// every process like `ps -A` (capture: "Android 14: adb shell,v2:ps == adb
// shell ps -A", SOURCES.md). Options: -A/-e, -o FIELD[,FIELD], -p PID[,PID],
// --help. An unknown -o field: "ps: bad -o 'ARG'" and the field help (exit 1).
func cmdPs(c *Ctx) int {
	d := c.Device
	api := d.APILevel()
	all := psFields(api)
	order := []string{"USER", "PID", "PPID", "VSZ", "RSS", "WCHAN", "ADDR", "S", "NAME"}
	var pids map[int]bool
	args := c.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--help":
			fmt.Fprint(c.Stdout, psHelp)
			return 0
		case a == "-A" || a == "-e" || a == "-w" || a == "-Z" || a == "-AT" || a == "-T":
		case a == "-o" || a == "-O":
			if i+1 >= len(args) {
				fmt.Fprintf(c.Stderr, "ps: Missing argument to %s\n", a)
				return 1
			}
			i++
			order = nil
			for _, f := range strings.Split(args[i], ",") {
				name := strings.ToUpper(strings.SplitN(f, "=", 2)[0])
				if _, ok := all[name]; !ok {
					// toybox quotes the whole -o argument, then prints its field help
					// (toybox-ps/api33-emulator-bad-o-field.txt).
					fmt.Fprintf(c.Stderr, "ps: bad -o '%s'\n", args[i])
					fmt.Fprint(c.Stderr, psFieldHelp)
					return 1
				}
				order = append(order, name)
			}
		case a == "-p" || a == "--pid":
			if i+1 >= len(args) {
				fmt.Fprintf(c.Stderr, "ps: Missing argument to %s\n", a)
				return 1
			}
			i++
			pids = map[int]bool{}
			for _, s := range strings.Split(args[i], ",") {
				n, err := strconv.Atoi(s)
				if err != nil {
					fmt.Fprintf(c.Stderr, "ps: bad -p %s\n", s)
					return 1
				}
				pids[n] = true
			}
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(c.Stderr, "ps: Unknown option '%s' (see \"ps --help\")\n", strings.TrimLeft(a, "-"))
			return 1
		}
	}
	d.mu.Lock()
	rows := d.processesLocked(true)
	d.mu.Unlock()
	if pids != nil {
		kept := rows[:0]
		for _, r := range rows {
			if pids[r.pid] {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	fields := make([]psField, len(order))
	for i, n := range order {
		fields[i] = all[n]
	}
	writePsTable(c.Stdout, fields, rows)
	return 0
}

// cmdPidof is toybox pidof: the pids of processes named NAME on one line,
// exit 1 (no output) when none.
func cmdPidof(c *Ctx) int {
	d := c.Device
	names := map[string]bool{}
	single := false
	for _, a := range c.Args[1:] {
		if a == "-s" {
			single = true
			continue
		}
		names[a] = true
	}
	d.mu.Lock()
	rows := d.processesLocked(false)
	d.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool { return rows[i].pid > rows[j].pid })
	var out []string
	for _, r := range rows {
		if names[r.name] {
			out = append(out, strconv.Itoa(r.pid))
			if single {
				break
			}
		}
	}
	if len(out) == 0 {
		return 1
	}
	fmt.Fprintln(c.Stdout, strings.Join(out, " "))
	return 0
}

// --- /proc/net/tcp{,6} ---------------------------------------------------------

// netSocket is one connection of an app in its Busy.NetworkFor period.
type netSocket struct {
	uid, inode int
	port       int
	txQueue    int
}

func (d *Device) busySocketsLocked() []netSocket {
	now := d.now()
	var out []netSocket
	for ti, t := range d.am.tasks {
		p, ok := d.am.procs[t.pkg]
		if !ok {
			continue
		}
		for ri, r := range t.records {
			if r.busy.NetworkFor > 0 && now.Before(r.shownAt.Add(r.busy.NetworkFor)) && !now.Before(r.shownAt) {
				out = append(out, netSocket{uid: p.uid, inode: 41000 + ti*100 + ri, port: 40000 + (p.pid+ri)%20000, txQueue: 0x2a3 + 0x40*ri})
			}
		}
	}
	return out
}

// procNetTCP renders /proc/net/tcp (v6=false) or /proc/net/tcp6 in the Linux
// kernel's format (tcp4_seq_show / tcp6_seq_show: header line, then per socket
// "sl: local rem st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
// …"; IPv4 lines padded to 149 columns). An app in its network busy period has
// an ESTABLISHED connection (st 01) from 10.0.2.15 to 142.250.74.78:443 with
// unsent bytes in tx_queue and a retransmit timer running.
func (d *Device) procNetTCP(v6 bool) []byte {
	d.mu.Lock()
	socks := d.busySocketsLocked()
	d.mu.Unlock()
	var b bytes.Buffer
	if !v6 {
		fmt.Fprintf(&b, "%-149s\n", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode")
	} else {
		b.WriteString("  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
	}
	const local4, remote4 = 0x0F02000A, 0x4E4AFA8E // 10.0.2.15, 142.250.74.78 (little-endian words)
	for i, s := range socks {
		if !v6 {
			line := fmt.Sprintf("%4d: %08X:%04X %08X:%04X %02X %08X:%08X %02X:%08X %08X %5d %8d %d %d %016x %d %d %d %d %d",
				i, local4, s.port, remote4, 443, 1, s.txQueue, 0, 1, 0x14, 0, s.uid, 0, s.inode, 2, 0, 20, 4, 30, 10, -1)
			fmt.Fprintf(&b, "%-149s\n", line)
		} else {
			fmt.Fprintf(&b, "%4d: %08X%08X%08X%08X:%04X %08X%08X%08X%08X:%04X %02X %08X:%08X %02X:%08X %08X %5d %8d %d %d %016x %d %d %d %d %d\n",
				i, 0, 0, 0xFFFF0000, local4, s.port+1, 0, 0, 0xFFFF0000, remote4, 443, 1, s.txQueue+0x11, 0, 1, 0x14, 0, s.uid, 0, s.inode+1, 2, 0, 20, 4, 30, 10, -1)
		}
	}
	return b.Bytes()
}

// psFieldHelp is what toybox prints after "ps: bad -o '…'" (verbatim from
// fixtures/captures/toybox-ps/api33-emulator-bad-o-field.txt).
const psFieldHelp = "Command line field types:\n\n" +
	"  ARGS    CMDLINE minus initial path     CMD     Thread name (/proc/TID/stat:2)\n" +
	"  CMDLINE Command line (argv[])          COMM    EXE filename (/proc/PID/exe)\n" +
	"  COMMAND EXE path (/proc/PID/exe)       NAME    Process name (PID's argv[0])\n\n" +
	"Process attribute field types:\n\n" +
	"  S       Process state:\n" +
	"\t  R (running) S (sleeping) D (device I/O) T (stopped)  t (trace stop)\n" +
	"\t  X (dead)    Z (zombie)   P (parked)     I (idle)\n" +
	"\t  Also between Linux 2.6.33 and 3.13:\n" +
	"\t  x (dead)    K (wakekill) W (waking)\n\n" +
	"  SCH     Scheduling policy (0=other, 1=fifo, 2=rr, 3=batch, 4=iso, 5=idle)\n" +
	"  STAT    Process state (S) plus:\n" +
	"\t  < high priority          N low priority L locked memory\n" +
	"\t  s session leader         + foreground   l multithreaded\n" +
	"                               ^\n" +
	"  %CPU    Percentage of CPU time used    %MEM    RSS as % of physical memory\n" +
	"  %VSZ    VSZ as % of physical memory    ADDR    Instruction pointer\n" +
	"  BIT     32 or 64                       C       Total %CPU used since start\n" +
	"  CPU     Which processor running on     DIO     Disk I/O\n" +
	"  DREAD   Data read from disk            DWRITE  Data written to disk\n" +
	"  ELAPSED Elapsed time since PID start   F       Flags 1=FORKNOEXEC 4=SUPERPRIV\n" +
	"  GID     Group ID                       GROUP   Group name\n" +
	"  IO      Data I/O                       LABEL   Security label\n" +
	"  MAJFL   Major page faults              MINFL   Minor page faults\n" +
	"  NI      Niceness (static 19 to -20)    PCY     Android scheduling policy\n" +
	"  PGID    Process Group ID               PID     Process ID\n" +
	"  PPID    Parent Process ID              PR      Prio Reversed (dyn 39-0, RT)\n" +
	"  PRI     Priority (dynamic 0 to 139)    PSR     Processor last executed on\n" +
	"  READ    Data read                      RES     Short RSS\n" +
	"  RGID    Real (before sgid) Group ID    RGROUP  Real (before sgid) group name\n" +
	"  RSS     Resident Set Size (DRAM pages) RTPRIO  Realtime priority\n" +
	"  RUID    Real (before suid) user ID     RUSER   Real (before suid) user name\n" +
	"  SHR     Shared memory                  STIME   Start time (ISO 8601)\n" +
	"  SWAP    Swap I/O                       SZ      4k pages to swap out\n" +
	"  TCNT    Thread count                   TID     Thread ID\n" +
	"  TIME    CPU time consumed              TIME+   CPU time (high precision)\n" +
	"  TTY     Controlling terminal           UID     User id\n" +
	"  USER    User name                      VIRT    Virtual memory size\n" +
	"  VSZ     Virtual memory size (1k units) WCHAN   Wait location in kernel\n" +
	"  WRITE   Data written\n"
