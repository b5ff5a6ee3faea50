package android

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The device log (logd): entries in the main, system, crash and events
// buffers, written by the simulator's own events (activity starts, process
// deaths, crashes, ANRs) with the device clock, and read by `logcat` in the
// formats of liblog's logprint.cpp (see fixtures/captures/SOURCES.md, logcat).

// logBuf is a log buffer id (liblog's log_id_t values).
type logBuf int

const (
	bufMain   logBuf = 0
	bufRadio  logBuf = 1
	bufEvents logBuf = 2
	bufSystem logBuf = 3
	bufCrash  logBuf = 4
	numBufs          = 5
)

var logBufNames = [numBufs]string{"main", "radio", "events", "system", "crash"}

// maxLogEntries bounds the store (a device's buffers are 256 KiB each by
// default); the oldest entries go first.
const maxLogEntries = 8192

// maxLogcatArgs bounds a logcat command line; maxFilterSpecs its TAG:PRIO specs.
const (
	maxLogcatArgs  = 64
	maxFilterSpecs = 32
)

// logEntry is one log record. msg may hold several lines; logcat prints each
// with the full prefix.
type logEntry struct {
	seq      uint64
	t        time.Time
	pid, tid int
	prio     byte // V D I W E F
	tag, msg string
	buf      logBuf
}

// logStore is the in-memory logd. It has its own lock, so it can be written
// while d.mu is held.
type logStore struct {
	mu      sync.Mutex
	entries []logEntry
	seq     uint64
	wake    chan struct{} // closed and replaced on every append
}

func newLogStore() *logStore { return &logStore{wake: make(chan struct{})} }

func (s *logStore) add(e logEntry) {
	s.mu.Lock()
	s.seq++
	e.seq = s.seq
	// logd orders by time: an entry is never stamped before the last one.
	if n := len(s.entries); n > 0 && e.t.Before(s.entries[n-1].t) {
		e.t = s.entries[n-1].t
	}
	s.entries = append(s.entries, e)
	if len(s.entries) > maxLogEntries {
		s.entries = append(s.entries[:0:0], s.entries[len(s.entries)-maxLogEntries:]...)
	}
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// since returns the entries after seq and the channel closed on the next append.
func (s *logStore) since(seq uint64) ([]logEntry, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.entries)
	for i > 0 && s.entries[i-1].seq > seq {
		i--
	}
	return append([]logEntry(nil), s.entries[i:]...), s.wake
}

// clear drops the entries of the given buffers (logcat -c).
func (s *logStore) clear(bufs [numBufs]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.entries[:0]
	for _, e := range s.entries {
		if !bufs[e.buf] {
			kept = append(kept, e)
		}
	}
	s.entries = kept
}

// logAt appends one entry stamped t. Safe with or without d.mu held.
func (d *Device) logAt(t time.Time, buf logBuf, pid, tid int, prio byte, tag, msg string) {
	d.logs.add(logEntry{t: t, pid: pid, tid: tid, prio: prio, tag: tag, msg: msg, buf: buf})
}

// log appends one entry stamped now.
func (d *Device) log(buf logBuf, pid, tid int, prio byte, tag, msg string) {
	d.logAt(d.now(), buf, pid, tid, prio, tag, msg)
}

// sysLog is a system_server entry of the system buffer (ActivityManager,
// ActivityTaskManager, WindowManager). tid is one of system_server's binder
// or handler threads.
func (d *Device) sysLog(tid int, prio byte, tag, msg string) {
	d.log(bufSystem, pidSystemSrv, tid, prio, tag, msg)
}

// system_server threads seen in the lines (fixed, as a device's are for one boot).
const (
	tidAMHandler = pidSystemSrv + 25 // "ActivityManager" handler thread
	tidBinder    = pidSystemSrv + 389
	tidUIThread  = pidSystemSrv + 22 // android.ui (crash/ANR dialogs)
	tidAnr       = pidSystemSrv + 46 // AnrConsumer
)

// processTag is the tag ART logs an app's lines under: the process name, of
// which the kernel keeps the last 15 characters (TASK_COMM_LEN 16 with NUL;
// Android sets the thread name from the end of a long process name).
func processTag(proc string) string {
	if len(proc) > 15 {
		return proc[len(proc)-15:]
	}
	return proc
}

// --- logcat ------------------------------------------------------------------

type logFormat int

const (
	fmtThreadtime logFormat = iota
	fmtBrief
	fmtTime
	fmtTag
	fmtProcess
	fmtRaw
)

// logcatOpts are the parsed options of one logcat command.
type logcatOpts struct {
	dump     bool
	clear    bool
	tail     int       // -t/-T N: last N entries (0 = all)
	since    time.Time // -t/-T 'time'
	format   logFormat
	bufs     [numBufs]bool
	nbufs    int
	pid      int
	specs    map[string]byte // tag -> minimum priority; "*" default
	maxCount int             // -m N
}

// prioLevel orders priorities; S (silent) is above all.
func prioLevel(p byte) int {
	return strings.IndexByte("VDIWEFS", p)
}

// parseLogcat parses logcat's options as logcat.cpp's getopt_long does.
// err is the message for stderr (exit 1).
func parseLogcat(args []string, now time.Time) (logcatOpts, string) {
	o := logcatOpts{specs: map[string]byte{}}
	if len(args) > maxLogcatArgs {
		return o, fmt.Sprintf("logcat: too many arguments (%d, at most %d)", len(args), maxLogcatArgs)
	}
	addBuf := func(v string) string {
		for _, name := range strings.Split(v, ",") {
			switch name {
			case "all":
				for i := range o.bufs {
					o.bufs[i] = true
				}
			case "default":
				o.bufs[bufMain], o.bufs[bufSystem], o.bufs[bufCrash] = true, true, true
			case "kernel", "security", "stats":
				// empty on the simulator
			default:
				found := false
				for i, n := range logBufNames {
					if n == name {
						o.bufs[i], found = true, true
					}
				}
				if !found {
					return fmt.Sprintf("logcat: unknown buffer '%s'.", name)
				}
			}
		}
		return ""
	}
	tailArg := func(v string) string {
		if n, err := strconv.Atoi(v); err == nil {
			if n < 1 {
				return fmt.Sprintf("logcat: -t/-T \"%s\" must be a positive number or a time", v)
			}
			o.tail = n
			return ""
		}
		t, ok := parseLogcatTime(v, now)
		if !ok {
			return fmt.Sprintf("logcat: -t/-T \"%s\" not in time format", v)
		}
		o.since = t
		return ""
	}
	var bufsSeen bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		val := func() (string, bool) {
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		// Attached values: -v threadtime / -vthreadtime, --pid=N / --pid N.
		name, attached, hasAttached := a, "", false
		if strings.HasPrefix(a, "--") {
			if k, v, ok := strings.Cut(a, "="); ok {
				name, attached, hasAttached = k, v, true
			}
		} else if len(a) > 2 && a[0] == '-' && strings.IndexByte("vbtTmef", a[1]) >= 0 {
			name, attached, hasAttached = a[:2], a[2:], true
		}
		get := func() (string, bool) {
			if hasAttached {
				return attached, true
			}
			return val()
		}
		switch name {
		case "-d":
			o.dump = true
		case "-c", "--clear":
			o.clear = true
		case "-s":
			o.specs["*"] = 'S'
		case "-D", "--dividers", "-B", "--binary", "-g", "--buffer-size", "-S", "--statistics", "-L", "--last":
			// -D is the default behaviour here; the rest print nothing useful on the simulator.
			if name == "-g" || name == "--buffer-size" {
				o.dump = true
			}
		case "-v", "--format":
			v, ok := get()
			if !ok {
				return o, "logcat: option requires an argument -- 'v'"
			}
			switch v {
			case "threadtime":
				o.format = fmtThreadtime
			case "brief":
				o.format = fmtBrief
			case "time":
				o.format = fmtTime
			case "tag":
				o.format = fmtTag
			case "process":
				o.format = fmtProcess
			case "raw":
				o.format = fmtRaw
			case "color", "printable", "uid", "usec", "nsec", "UTC", "year", "zone", "epoch", "monotonic", "descriptive":
				// adverbs: accepted, the simulator prints the plain form
			default:
				return o, fmt.Sprintf("logcat: Invalid parameter \"%s\" to -v.", v)
			}
		case "-b", "--buffer":
			v, ok := get()
			if !ok {
				return o, "logcat: option requires an argument -- 'b'"
			}
			if e := addBuf(v); e != "" {
				return o, e
			}
			bufsSeen = true
		case "-t", "-T":
			v, ok := get()
			if !ok {
				return o, fmt.Sprintf("logcat: option requires an argument -- '%c'", name[1])
			}
			if e := tailArg(v); e != "" {
				return o, e
			}
			if name == "-t" {
				o.dump = true
			}
		case "-m", "--max-count":
			v, ok := get()
			n, err := strconv.Atoi(v)
			if !ok || err != nil || n < 1 {
				return o, fmt.Sprintf("logcat: -m \"%s\" isn't an integer greater than zero", v)
			}
			o.maxCount = n
		case "--pid":
			v, ok := get()
			n, err := strconv.Atoi(v)
			if !ok || err != nil || n < 0 {
				return o, fmt.Sprintf("logcat: --pid \"%s\" isn't a valid pid", v)
			}
			o.pid = n
		default:
			if strings.HasPrefix(a, "-") {
				return o, fmt.Sprintf("logcat: Unknown option '%s'.", a)
			}
			if len(o.specs) >= maxFilterSpecs {
				return o, "logcat: too many filter specs"
			}
			tag, pr, ok := strings.Cut(a, ":")
			p := byte('V')
			if ok {
				if len(pr) != 1 || prioLevel(pr[0]) < 0 && prioLevel(pr[0]-'a'+'A') < 0 {
					return o, fmt.Sprintf("logcat: Invalid filter expression '%s'", a)
				}
				p = pr[0]
				if p >= 'a' && p <= 'z' {
					p = p - 'a' + 'A'
				}
			}
			o.specs[tag] = p
		}
	}
	if !bufsSeen {
		o.bufs[bufMain], o.bufs[bufSystem], o.bufs[bufCrash] = true, true, true
	}
	for _, b := range o.bufs {
		if b {
			o.nbufs++
		}
	}
	return o, ""
}

// parseLogcatTime reads logcat's time forms: 'MM-DD hh:mm:ss.mmm' (this
// year), 'YYYY-MM-DD hh:mm:ss.mmm' and 'sssss.mmm' (epoch seconds).
func parseLogcatTime(v string, now time.Time) (time.Time, bool) {
	if t, err := time.ParseInLocation("2006-01-02 15:04:05.000", v, time.UTC); err == nil {
		return t, true
	}
	if t, err := time.ParseInLocation("01-02 15:04:05.000", v, time.UTC); err == nil {
		return t.AddDate(now.UTC().Year(), 0, 0), true
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f < 1e11 {
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), true
	}
	return time.Time{}, false
}

func (o *logcatOpts) matches(e logEntry) bool {
	if !o.bufs[e.buf] {
		return false
	}
	if o.pid != 0 && e.pid != o.pid {
		return false
	}
	if !o.since.IsZero() && e.t.Before(o.since) {
		return false
	}
	if len(o.specs) > 0 {
		min, ok := o.specs[e.tag]
		if !ok {
			min, ok = o.specs["*"]
		}
		if ok && prioLevel(e.prio) < prioLevel(min) {
			return false
		}
	}
	return true
}

// formatPrefix is logprint.cpp's prefix for one line of an entry.
func formatPrefix(f logFormat, e logEntry) string {
	ts := e.t.UTC().Format("01-02 15:04:05.000") // persist.sys.timezone=GMT
	switch f {
	case fmtBrief:
		return fmt.Sprintf("%c/%-8s(%5d): ", e.prio, e.tag, e.pid)
	case fmtTime:
		return fmt.Sprintf("%s %c/%-8s(%5d): ", ts, e.prio, e.tag, e.pid)
	case fmtTag:
		return fmt.Sprintf("%c/%-8s: ", e.prio, e.tag)
	case fmtProcess:
		return fmt.Sprintf("%c(%5d) ", e.prio, e.pid)
	case fmtRaw:
		return ""
	}
	return fmt.Sprintf("%s %5d %5d %c %-8s: ", ts, e.pid, e.tid, e.prio, e.tag)
}

// writeEntry prints each line of e's message with the full prefix (logprint.cpp
// repeats the prefix per '\n'); process format adds "  (TAG)" after the message.
func writeEntry(w io.Writer, f logFormat, e logEntry) error {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(e.msg, "\n"), "\n") {
		b.WriteString(formatPrefix(f, e))
		b.WriteString(line)
		if f == fmtProcess {
			fmt.Fprintf(&b, "  (%s)", e.tag)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cmdLogcat is /system/bin/logcat over the device log: -d dumps and exits,
// otherwise it keeps printing new entries until the command's context ends.
// More than one buffer selected: "--------- beginning of BUF" before the first
// entry of each buffer (logcat.cpp printDividers).
func cmdLogcat(c *Ctx) int {
	d := c.Device
	d.advance()
	o, perr := parseLogcat(c.Args[1:], d.now())
	if perr != "" {
		fmt.Fprintln(c.Stderr, perr)
		return 1
	}
	if o.clear {
		d.logs.clear(o.bufs)
		return 0
	}
	if o.dump && containsArg(c.Args, "-g", "--buffer-size") {
		for i, on := range o.bufs {
			if on {
				fmt.Fprintf(c.Stdout, "%s: ring buffer is 256 KiB (%d B consumed), max entry is 5120 B, max payload is 4068 B\n", logBufNames[i], d.logBytes(logBuf(i)))
			}
		}
		return 0
	}
	entries, wake := d.logs.since(0)
	var sel []logEntry
	for _, e := range entries {
		if o.matches(e) {
			sel = append(sel, e)
		}
	}
	if o.tail > 0 && len(sel) > o.tail {
		sel = sel[len(sel)-o.tail:]
	}
	var last uint64
	if len(entries) > 0 {
		last = entries[len(entries)-1].seq
	}
	var begun [numBufs]bool
	printed := 0
	emit := func(e logEntry) bool {
		if o.nbufs > 1 && !begun[e.buf] {
			begun[e.buf] = true
			if _, err := fmt.Fprintf(c.Stdout, "--------- beginning of %s\n", logBufNames[e.buf]); err != nil {
				return false
			}
		}
		if writeEntry(c.Stdout, o.format, e) != nil {
			return false
		}
		printed++
		return o.maxCount == 0 || printed < o.maxCount
	}
	for _, e := range sel {
		if !emit(e) {
			return 0
		}
	}
	if o.dump {
		return 0
	}
	for {
		select {
		case <-c.Context.Done():
			return 130
		case <-wake:
		case <-d.faultTick():
			d.advance()
			continue
		}
		var more []logEntry
		more, wake = d.logs.since(last)
		for _, e := range more {
			last = e.seq
			if o.matches(e) && !emit(e) {
				return 0
			}
		}
	}
}

func containsArg(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == n {
				return true
			}
		}
	}
	return false
}

// logBytes is the size logd would account for a buffer's entries.
func (d *Device) logBytes(b logBuf) int {
	entries, _ := d.logs.since(0)
	n := 0
	for _, e := range entries {
		if e.buf == b {
			n += 28 + len(e.tag) + len(e.msg) + 2
		}
	}
	return n
}

// formatDuration is TimeUtils.formatDuration as ActivityMetricsLogger prints
// launch times: "+412ms", "+1s43ms".
func formatDuration(ms int) string {
	if ms < 1000 {
		return fmt.Sprintf("+%dms", ms)
	}
	return fmt.Sprintf("+%ds%03dms", ms/1000, ms%1000)
}

// --- what the activity manager logs ------------------------------------------

// bootLog writes the lines of the boot the device "went through" (the home
// activity's start by system_server), stamped at start-up.
func (d *Device) bootLog() {
	t := d.started
	d.logAt(t, bufMain, pidZygote64, pidZygote64, 'I', "Zygote", "Preloading classes...")
	d.logAt(t, bufSystem, pidSystemSrv, pidSystemSrv, 'I', "SystemServer", "Entered the Android system server!")
	d.logAt(t, bufSystem, pidSystemSrv, tidAMHandler, 'I', "ActivityManager", "System now ready")
	home := d.am.tasks[len(d.am.tasks)-1]
	d.logStartLocked(home.intent, t)
}

// atmTag is the tag of activity-start lines: ActivityTaskManager from API 29.
func (d *Device) atmTag() string {
	if d.APILevel() >= 29 {
		return "ActivityTaskManager"
	}
	return "ActivityManager"
}

// logStartLocked is ActivityStarter's "START u0 {intent} from uid N" (the
// intent's toShortString inside braces; the shell's uid 2000).
func (d *Device) logStartLocked(it amIntent, now time.Time) {
	s := strings.TrimSuffix(strings.TrimPrefix(it.render(it.flags), "Intent { "), " }")
	d.logAt(now, bufSystem, pidSystemSrv, tidBinder, 'I', d.atmTag(), "START u0 {"+s+"} from uid 2000")
}

// logProcStartLocked is ProcessList's "Start proc PID:PROC/u0aN for
// HOSTINGTYPE {pkg/cls}" (hosting type "activity" before API 29,
// "pre-top-activity" on 29-30, "next-top-activity" from 31) and the new
// process's first lines.
func (d *Device) logProcStartLocked(p *amProcess, cls string, now time.Time) {
	hosting := "next-top-activity"
	switch api := d.APILevel(); {
	case api < 29:
		hosting = "activity"
	case api < 31:
		hosting = "pre-top-activity"
	}
	d.logAt(now, bufSystem, pidSystemSrv, tidAMHandler, 'I', "ActivityManager",
		fmt.Sprintf("Start proc %d:%s/u0a%d for %s {%s/%s}", p.pid, p.pkg, p.uid%100000-10000, hosting, p.pkg, cls))
	tag := processTag(p.pkg)
	d.logAt(now, bufMain, p.pid, p.pid, 'I', tag, "Late-enabling -Xcheck:jni")
	d.logAt(now, bufMain, p.pid, p.pid, 'I', tag, "Using CollectorTypeCC GC.")
	d.logAt(now, bufMain, p.pid, p.pid, 'D', "CompatibilityChangeReporter",
		fmt.Sprintf("Compat change id reported: 171979766; UID %d; state: ENABLED", p.uid))
}

// logDisplayedLocked is ActivityMetricsLogger's "Displayed pkg/.Act: +412ms"
// ("Displayed pkg/.Act for user 0: +412ms" from API 34).
func (d *Device) logDisplayedLocked(r *amRecord, totalMs int, now time.Time) {
	if totalMs < 0 {
		return
	}
	user := ""
	if d.APILevel() >= 34 {
		user = " for user 0"
	}
	d.logAt(now, bufSystem, pidSystemSrv, tidAMHandler, 'I', d.atmTag(),
		fmt.Sprintf("Displayed %s%s: %s", shortComponent(r.pkg, r.cls), user, formatDuration(totalMs)))
}
