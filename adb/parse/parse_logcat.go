package parse

import (
	"regexp"
	"strconv"
	"strings"
)

// Parsers of crash and ANR evidence in logcat output (sources:
// fixtures/captures/SOURCES.md, "logcat"; format: liblog logprint.cpp,
// RuntimeInit.LoggingHandler).

// Input limits: the parsers read at most this much of a dump, so a huge or
// hostile output costs bounded time and memory.
const (
	maxEvidenceInput = 32 << 20 // bytes of one logcat / dumpsys output
	maxCrashes       = 256      // FATAL EXCEPTION blocks kept per dump
	maxCrashFrames   = 512      // stack lines kept per crash
	maxLogLineBytes  = 64 << 10 // longer lines are not log lines
	maxCrashMessage  = 64 << 10 // a multi-line exception message stops growing here (no quadratic appends)
)

// LogLine is one line of `logcat -v threadtime` output.
type LogLine struct {
	// Time is the timestamp as printed, "MM-DD HH:MM:SS.mmm" (device local
	// time; with -v year "YYYY-MM-DD HH:MM:SS.mmm").
	Time     string
	PID, TID int
	// Priority is one of V D I W E F A.
	Priority byte
	// Tag is the log tag without logcat's padding.
	Tag string
	// Message is the text after "TAG: " (one line of a multi-line entry).
	Message string
}

var threadtimeRe = regexp.MustCompile(`^((?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d\.\d{3,9}) +(\d+) +(\d+) ([VDIWEFA]) (.*?) *: (.*)$`)

// ParseThreadtimeLine parses one threadtime line
// ("MM-DD HH:MM:SS.mmm  PID  TID P TAG     : message", logprint.cpp's
// "%s %5d %5d %c %-8.*s: "). ok is false for anything else (dividers such
// as "--------- beginning of main", other formats, blank lines). A tag
// holding ": " cannot be told from the message; the first ": " ends the tag.
func ParseThreadtimeLine(line string) (LogLine, bool) {
	line = strings.TrimRight(line, "\r")
	if len(line) > maxLogLineBytes {
		return LogLine{}, false
	}
	m := threadtimeRe.FindStringSubmatch(line)
	// An empty message leaves "TAG: " with the trailing blank trimmed by some
	// tools. Only tried when the line does not parse as it is: a message that
	// itself ends in ':' must not gain a blank.
	if m == nil && strings.HasSuffix(line, ":") {
		m = threadtimeRe.FindStringSubmatch(line + " ")
	}
	if m == nil {
		return LogLine{}, false
	}
	pid, err1 := strconv.Atoi(m[2])
	tid, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || pid < 0 || tid < 0 {
		return LogLine{}, false
	}
	return LogLine{Time: m[1], PID: pid, TID: tid, Priority: m[4][0], Tag: m[5], Message: m[6]}, true
}

// JavaCrash is one uncaught-exception report ("FATAL EXCEPTION") from the
// AndroidRuntime tag.
type JavaCrash struct {
	// Time is the timestamp of the "FATAL EXCEPTION" line.
	Time string
	// Thread is the crashing thread's name ("main").
	Thread string
	// Process and PID come from "Process: NAME, PID: N"; Process is empty when
	// the line is missing (a null process name, or the system process).
	Process string
	PID     int
	// System marks "*** FATAL EXCEPTION IN SYSTEM PROCESS".
	System bool
	// Exception is the thrown class ("java.lang.IllegalStateException") and
	// Message its message ("" when none).
	Exception string
	Message   string
	// Frames are the "at" frames of the whole report (cause chain included),
	// without "at ", in order.
	Frames []string
	// Causes are the "Caused by: …" classes, outermost first.
	Causes []string
	// TopFrame is the first frame in the package asked for (see
	// ParseFatalExceptions), "" when no frame is in it.
	TopFrame string
}

var (
	fatalRe        = regexp.MustCompile(`^(\*\*\* )?FATAL EXCEPTION(?: IN SYSTEM PROCESS)?: (.*)$`)
	processPIDRe   = regexp.MustCompile(`^Process: (.*), PID: (\d+)$`)
	throwableRe    = regexp.MustCompile(`^([A-Za-z_$][\w$]*(?:\.[\w$]+)*)(?:: (.*))?$`)
	causedByRe     = regexp.MustCompile(`^Caused by: ([A-Za-z_$][\w$]*(?:\.[\w$]+)*)(?::|$)`)
	frameRe        = regexp.MustCompile(`^\s*at (.+)$`)
	moreRe         = regexp.MustCompile(`^\s*\.\.\. \d+ more$`)
	systemProcName = "system_server"
)

// ParseFatalExceptions finds the uncaught-exception reports in threadtime
// logcat output (`logcat -d`, `-b crash`, or the default buffers): each
// starts with an E AndroidRuntime "FATAL EXCEPTION: THREAD" line; the
// report's other lines are the AndroidRuntime lines of the same pid that
// follow (other processes' lines may interleave). pkg, when not empty, picks
// JavaCrash.TopFrame: the first frame whose class is in that package
// ("pkg." prefix). Lines that are not threadtime are skipped. At most
// maxCrashes reports of maxCrashFrames frames each are returned, from the
// first maxEvidenceInput bytes.
func ParseFatalExceptions(logcat, pkg string) []JavaCrash {
	if len(logcat) > maxEvidenceInput {
		logcat = logcat[:maxEvidenceInput]
	}
	r := crashReader{open: map[int]*openCrash{}}
	for _, raw := range lines(logcat) {
		l, ok := ParseThreadtimeLine(raw)
		if !ok || l.Tag != "AndroidRuntime" {
			continue
		}
		if !r.line(l) {
			break
		}
	}
	if pkg != "" {
		setTopFrames(r.crashes, pkg+".")
	}
	return r.crashes
}

// crashReader is ParseFatalExceptions' state between lines.
type crashReader struct {
	crashes []JavaCrash
	// open holds the report each pid is writing, until a line of that pid
	// that belongs to no report ends it.
	open map[int]*openCrash
}

// openCrash is a report being read: its index in crashes, and whether its
// throwable line ("java.lang.X: message") was read.
type openCrash struct {
	i         int
	throwable bool
}

// line reads one AndroidRuntime line; false when a report begins past
// maxCrashes.
func (r *crashReader) line(l LogLine) bool {
	if m := fatalRe.FindStringSubmatch(l.Message); m != nil && (l.Priority == 'E' || l.Priority == 'F') {
		if len(r.crashes) >= maxCrashes {
			return false
		}
		c := JavaCrash{Time: l.Time, Thread: m[2], PID: l.PID, System: m[1] != ""}
		if c.System {
			c.Process = systemProcName
		}
		r.crashes = append(r.crashes, c)
		r.open[l.PID] = &openCrash{i: len(r.crashes) - 1}
		return true
	}
	if o, ok := r.open[l.PID]; ok {
		r.continueReport(o, l)
	}
	return true
}

// continueReport reads a line of pid's open report: its "Process: NAME,
// PID: N" line, a frame, a "Caused by:", the throwable, or the throwable
// message's next line. Any other line ends the report.
func (r *crashReader) continueReport(o *openCrash, l LogLine) {
	c, msg := &r.crashes[o.i], l.Message
	switch {
	case c.Exception == "" && !o.throwable && processPIDRe.MatchString(msg):
		m := processPIDRe.FindStringSubmatch(msg)
		c.Process = m[1]
		if n, err := strconv.Atoi(m[2]); err == nil {
			c.PID = n
		}
	case frameRe.MatchString(msg):
		if len(c.Frames) < maxCrashFrames {
			c.Frames = append(c.Frames, strings.TrimSpace(frameRe.FindStringSubmatch(msg)[1]))
		}
	case causedByRe.MatchString(msg):
		if len(c.Causes) < maxCrashFrames {
			c.Causes = append(c.Causes, causedByRe.FindStringSubmatch(msg)[1])
		}
	case moreRe.MatchString(msg), strings.HasPrefix(strings.TrimSpace(msg), "Suppressed: "):
	case !o.throwable && throwableRe.MatchString(msg):
		m := throwableRe.FindStringSubmatch(msg)
		c.Exception, c.Message = m[1], m[2]
		o.throwable = true
	case o.messageContinues(c):
		c.Message += "\n" + msg
	default:
		// Anything else from AndroidRuntime ends the report.
		delete(r.open, l.PID)
	}
}

// messageContinues: a multi-line throwable message continues until the
// first frame (up to maxCrashMessage bytes).
func (o *openCrash) messageContinues(c *JavaCrash) bool {
	return o.throwable && len(c.Frames) == 0 && c.Message != "" && len(c.Message) < maxCrashMessage
}

// setTopFrames sets each crash's TopFrame to its first frame starting with
// prefix ("pkg.").
func setTopFrames(crashes []JavaCrash, prefix string) {
	for i := range crashes {
		for _, f := range crashes[i].Frames {
			if strings.HasPrefix(f, prefix) {
				crashes[i].TopFrame = f
				break
			}
		}
	}
}

// ANRReport is the "ANR in …" entry ActivityManager logs (E, system buffer).
type ANRReport struct {
	Time string
	// Process is the process name; Activity the component in parentheses
	// ("pkg/.Act"), "" when none was known.
	Process  string
	Activity string
	PID      int
	Reason   string
}

var anrInRe = regexp.MustCompile(`^ANR in (\S+)(?: \((\S+)\))?\s*$`)

// ParseANRs finds the "ANR in PROC (COMPONENT)" reports of ActivityManager
// in threadtime logcat output, with the PID: and Reason: lines of the same
// entry (same pid and tid). At most maxCrashes reports.
func ParseANRs(logcat string) []ANRReport {
	if len(logcat) > maxEvidenceInput {
		logcat = logcat[:maxEvidenceInput]
	}
	var out []ANRReport
	type key struct{ pid, tid int }
	open := map[key]int{}
	for _, raw := range lines(logcat) {
		l, ok := ParseThreadtimeLine(raw)
		if !ok || l.Tag != "ActivityManager" || l.Priority != 'E' {
			continue
		}
		k := key{l.PID, l.TID}
		if m := anrInRe.FindStringSubmatch(l.Message); m != nil {
			if len(out) >= maxCrashes {
				break
			}
			out = append(out, ANRReport{Time: l.Time, Process: m[1], Activity: m[2]})
			open[k] = len(out) - 1
			continue
		}
		i, ok := open[k]
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(l.Message, "PID: "):
			if n, err := strconv.Atoi(strings.TrimSpace(l.Message[5:])); err == nil {
				out[i].PID = n
			}
		case strings.HasPrefix(l.Message, "Reason: "):
			out[i].Reason = l.Message[8:]
			delete(open, k)
		}
	}
	return out
}
