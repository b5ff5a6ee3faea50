package android

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// `screenrecord` as AOSP frameworks/av/cmds/screenrecord/screenrecord.cpp
// behaves on Android 10-14: it records the display as H.264 (AVC) in an MP4
// until its time limit (--time-limit, 1..180 s, 180 by default), SIGINT or
// SIGHUP (the adb shell closing), each of which ends the file cleanly (the
// moov atom written at the end), exit 0. SIGKILL leaves the file as far as
// it got, without its index: unplayable, as on a device. Options and messages
// follow screenrecord.cpp's usage() and its fprintf calls; an unusable
// option prints its message and exits 2, a size the encoder cannot take
// exits 1 ("ERROR: unable to configure video encoder").
//
// The simulator has no MediaCodec: frames are the rendered screen
// (ScreenshotPNG, cached while it does not change) piped at a constant
// rate to Debian's ffmpeg (libx264, baseline profile as MediaCodec's
// default AVC encoder, one thread), which scales the display into the
// requested size keeping its aspect ratio (screenrecord letterboxes too:
// "Content area is WxH at offset x=.. y=.."). Missing frames are repeated
// by the wall clock, so the file's duration is the recording's time.

func init() {
	registerCommand("screenrecord", cmdScreenrecord)
	registerCommand("kill", cmdKill)
	registerCommand("pkill", cmdPkill)
}

// RecordFPS is the simulator's recording frame rate (frames/s). A device
// records at the display's refresh rate when the screen changes; the
// simulated screen changes at most a few times a second.
const RecordFPS = 5

const (
	srMaxTimeLimit   = 180      // kMaxTimeLimitSec (Android 10-14; 1800 on a few vendor builds)
	srMinBitRate     = 100000   // kMinBitRate, 0.1 Mbps
	srMaxBitRate     = 200e6    // kMaxBitRate, 200 Mbps
	srDefaultBitRate = 20000000 // kDefaultBitRate, 20 Mbps (Android 10+)
	srVersionMajor   = 1
	srVersionMinor   = 3
)

// Signals a recording honours (Linux numbers, as `kill -l` lists them).
const (
	sigHUP  = 1
	sigINT  = 2
	sigKILL = 9
	sigTERM = 15
)

// recording is one running screenrecord process.
type recording struct {
	pid  int
	sig  chan int // buffered: the first signal wins
	args string
}

// recordings is the device's table of running screenrecord processes
// (listed by ps, signalled by kill/pkill); its own lock, so ps under d.mu
// may read it.
type recordings struct {
	mu  sync.Mutex
	run map[int]*recording
}

func (r *recordings) add(rec *recording) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.run == nil {
		r.run = map[int]*recording{}
	}
	r.run[rec.pid] = rec
}

func (r *recordings) remove(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.run, pid)
}

// entries lists the running recordings as ps rows, children of a shell.
func (r *recordings) entries() []psEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []psEntry
	for pid := range r.run {
		out = append(out, psEntry{"shell", pid, pidAdbd, 10855560, 6412, "S", "screenrecord"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// signal sends sig to pid; false when no recording has that pid.
func (r *recordings) signal(pid, sig int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.run[pid]
	if !ok {
		return false
	}
	select {
	case rec.sig <- sig:
	default:
	}
	if sig == sigKILL {
		// Gone at once, as the kernel ends it: ps and pkill no longer
		// see it (the simulator's encoder is torn down behind).
		delete(r.run, pid)
	}
	return true
}

// Recordings is the number of screenrecord processes running on the device.
func (d *Device) Recordings() int { return len(d.rec.entries()) }

const srUsage = `Usage: screenrecord [options] <filename>

Android screenrecord v%d.%d.  Records the device's display to a .mp4 file.

Options:
--size WIDTHxHEIGHT
    Set the video size, e.g. "1280x720".  Default is the device's main
    display resolution (if supported), 1280x720 if not.  For best results,
    use a size supported by the AVC encoder.
--bit-rate RATE
    Set the video bit rate, in bits per second.  Value may be specified as
    bits or megabits, e.g. '4000000' is equivalent to '4M'.  Default %dMbps.
--bugreport
    Add additional information, such as a timestamp overlay, that is helpful
    in videos captured to illustrate bugs.
--time-limit TIME
    Set the maximum recording time, in seconds.  Default / maximum is %d.
--verbose
    Display interesting information on stdout.
--help
    Show this message.

Recording continues until Ctrl-C is hit or the time limit is reached.

`

// srOptions are a screenrecord command line's options.
type srOptions struct {
	w, h      int // 0: the display's size
	bitRate   int
	timeLimit int
	verbose   bool
	file      string
}

// parseScreenrecord reads screenrecord's options (getopt_long, so
// "--opt value" and "--opt=value"); a message and exit status on error.
func parseScreenrecord(args []string) (srOptions, string, int) {
	o := srOptions{bitRate: srDefaultBitRate, timeLimit: srMaxTimeLimit}
	usage := fmt.Sprintf(srUsage, srVersionMajor, srVersionMinor, srDefaultBitRate/1000000, srMaxTimeLimit)
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			rest = append(rest, a)
			continue
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		needs := name == "size" || name == "bit-rate" || name == "time-limit" || name == "output-format" || name == "display-id"
		if needs && !hasVal {
			if i+1 >= len(args) {
				return o, fmt.Sprintf("screenrecord: option '--%s' requires an argument\n", name) + usage, 2
			}
			i++
			val = args[i]
		}
		switch name {
		case "help":
			return o, usage, 0
		case "verbose":
			o.verbose = true
		case "bugreport", "rotate", "persistent-surface", "monotonic-time":
			// accepted; the simulated screen has no overlay or rotation
		case "size":
			w, h, ok := strings.Cut(val, "x")
			wi, e1 := strconv.Atoi(w)
			hi, e2 := strconv.Atoi(h)
			if !ok || e1 != nil || e2 != nil {
				return o, fmt.Sprintf("Invalid size '%s', must be width x height\n", val), 2
			}
			if wi <= 0 || hi <= 0 {
				return o, fmt.Sprintf("Invalid size %dx%d, width and height may not be zero\n", wi, hi), 2
			}
			o.w, o.h = wi, hi
		case "bit-rate":
			n, ok := parseValueWithUnit(val)
			if !ok {
				return o, fmt.Sprintf("Invalid bit rate '%s'\n", val), 2
			}
			if n < srMinBitRate || n > srMaxBitRate {
				return o, fmt.Sprintf("Bit rate %dbps outside acceptable range [%d,%d]\n", n, srMinBitRate, int(srMaxBitRate)), 2
			}
			o.bitRate = n
		case "time-limit":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 || n > srMaxTimeLimit {
				return o, fmt.Sprintf("Time limit %ds outside acceptable range [1,%d]\n", n, srMaxTimeLimit), 2
			}
			o.timeLimit = n
		case "output-format":
			if val != "mp4" {
				return o, fmt.Sprintf("Unknown format '%s'\n", val), 2
			}
		case "display-id":
			if val != "0" && val != "4619827259835644672" {
				return o, fmt.Sprintf("ERROR: unable to get display config for display %s\n", val), 1
			}
		default:
			return o, fmt.Sprintf("screenrecord: unrecognized option '%s'\n", a) + usage, 2
		}
	}
	if len(rest) != 1 {
		return o, "Must specify output file (see --help).\n", 2
	}
	o.file = rest[0]
	return o, "", 0
}

// parseValueWithUnit is screenrecord's: a number with an optional 'M'
// (millions) suffix, "4M" == "4000000".
func parseValueWithUnit(s string) (int, bool) {
	mult := 1.0
	if strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m") {
		mult, s = 1e6, s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return int(f * mult), true
}

func cmdScreenrecord(c *Ctx) int {
	o, msg, code := parseScreenrecord(c.Args[1:])
	if msg != "" {
		if code == 0 {
			io.WriteString(c.Stdout, msg)
		} else {
			io.WriteString(c.Stderr, msg)
		}
		return code
	}
	d := c.Device
	// The recording's clock starts with the process, as the encoder's
	// startup is part of a device's recording too: frames due while ffmpeg
	// starts are written when it reads them.
	start := time.Now()
	first := d.Screenshot()
	dw, dh := first.Rect.Dx(), first.Rect.Dy()
	w, h := o.w, o.h
	if w == 0 {
		w, h = dw, dh
	}
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil || w%2 != 0 || h%2 != 0 {
		// An odd size is what the AVC encoder refuses on devices; the
		// simulator's encoder is Debian's ffmpeg (tools/setup.sh installs it).
		io.WriteString(c.Stderr, "ERROR: unable to configure video encoder\n")
		return 1
	}
	// Content area: the display scaled to fit the video, centred.
	cw, ch := w, dh*w/dw
	if ch > h {
		cw, ch = dw*h/dh, h
	}
	cw, ch = cw&^1, ch&^1
	if o.verbose {
		fmt.Fprintf(c.Stdout, "Main display is %dx%d @60.00fps (orientation=ROTATION_0)\n", dw, dh)
		fmt.Fprintf(c.Stdout, "Configuring recorder for %dx%d video/avc at %.2fMbps\n", w, h, float64(o.bitRate)/1e6)
		fmt.Fprintf(c.Stdout, "Content area is %dx%d at offset x=%d y=%d\n", cw, ch, (w-cw)/2, (h-ch)/2)
	}
	dir, err := os.MkdirTemp("", "sim-screenrecord-")
	if err != nil {
		io.WriteString(c.Stderr, "ERROR: unable to create muxer\n")
		return 1
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "out.mp4")
	vf := fmt.Sprintf("scale=%d:%d,pad=%d:%d:(ow-iw)/2:(oh-ih)/2,format=yuv420p", cw, ch, w, h)
	// exec.Command, not CommandContext: the shell's end (SIGHUP) finishes
	// the file cleanly, and only SIGKILL aborts ffmpeg.
	cmd := exec.Command(ffmpeg, "-hide_banner", "-loglevel", "error",
		"-f", "image2pipe", "-c:v", "png", "-framerate", strconv.Itoa(RecordFPS), "-i", "pipe:0",
		"-vf", vf, "-c:v", "libx264", "-preset", "ultrafast", "-profile:v", "baseline",
		"-b:v", strconv.Itoa(o.bitRate), "-maxrate", strconv.Itoa(o.bitRate), "-bufsize", strconv.Itoa(2*o.bitRate),
		"-g", strconv.Itoa(2*RecordFPS), "-threads", "1", "-r", strconv.Itoa(RecordFPS),
		"-f", "mp4", "-y", out)
	var ffErr strings.Builder
	cmd.Stderr = &limitedWriter{w: &ffErr, n: 4096}
	stdin, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		io.WriteString(c.Stderr, "ERROR: unable to create video encoder\n")
		return 1
	}
	// MediaMuxer opens (creates) the file at the start and writes into it
	// until the end: a file removed meanwhile takes the rest with its
	// unlinked inode, and the path stays gone (finish, below).
	if err := d.writeFileAs(c.path(o.file), nil, 0o660, d.now(), ownerShell); err != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		stdin.Close()
		_ = cmd.Wait()
		fmt.Fprintf(c.Stderr, "Unable to open '%s': %s\n", o.file, errnoText(err))
		return 1
	}
	finish := func(b []byte) error {
		if _, err := d.Stat(c.path(o.file)); err != nil {
			return nil // removed while recording
		}
		return d.writeFileAs(c.path(o.file), b, 0o660, d.now(), ownerShell)
	}
	d.mu.Lock()
	pid := d.am.nextPID
	d.am.nextPID++
	d.mu.Unlock()
	rec := &recording{pid: pid, sig: make(chan int, 1), args: strings.Join(c.Args, " ")}
	d.rec.add(rec)
	defer d.rec.remove(pid)

	frames := 0
	limit := time.Duration(o.timeLimit) * time.Second
	feed := func(now time.Time) error {
		el := now.Sub(start)
		if el > limit {
			el = limit
		}
		due := int(el.Seconds()*RecordFPS) + 1
		if frames >= due {
			return nil
		}
		png, err := d.ScreenshotPNG()
		if err != nil {
			return err
		}
		for ; frames < due; frames++ {
			if _, err := stdin.Write(png); err != nil {
				return err
			}
		}
		return nil
	}
	tick := time.NewTicker(time.Second / RecordFPS)
	defer tick.Stop()
	timeUp := time.NewTimer(limit)
	defer timeUp.Stop()
	killed := false
	var feedErr error
loop:
	for feedErr == nil {
		select {
		case now := <-tick.C:
			feedErr = feed(now)
		case <-timeUp.C:
			if o.verbose {
				io.WriteString(c.Stdout, "Time limit reached\n")
			}
			break loop
		case s := <-rec.sig:
			// SIGINT and SIGHUP are caught and finish the file; SIGTERM
			// and SIGKILL end the process where it is.
			killed = s == sigKILL || s == sigTERM
			break loop
		case <-c.Context.Done():
			break loop // SIGHUP: the adb shell went away
		}
	}
	if killed {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		stdin.Close()
		_ = cmd.Wait()
		if b, err := os.ReadFile(out); err == nil {
			_ = finish(b)
		}
		return 128 + sigKILL
	}
	if feedErr == nil {
		feedErr = feed(time.Now())
	}
	if o.verbose {
		io.WriteString(c.Stdout, "Stopping encoder and muxer\n")
	}
	stdin.Close()
	werr := cmd.Wait()
	if werr != nil || (feedErr != nil && !errors.Is(feedErr, os.ErrClosed)) {
		fmt.Fprintf(c.Stderr, "ERROR: encoder failed: %v %v %s\n", werr, feedErr, strings.TrimSpace(ffErr.String()))
		return 1
	}
	b, err := os.ReadFile(out)
	if err == nil {
		err = finish(b)
	}
	if err != nil {
		fmt.Fprintf(c.Stderr, "Unable to open '%s': %s\n", o.file, errnoText(err))
		return 1
	}
	if o.verbose {
		fmt.Fprintf(c.Stdout, "Encoder stopping; recorded %d frames in %d seconds\n", frames, int64(time.Since(start).Seconds()))
	}
	return 0
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// signalByName parses a toybox signal name or number (INT, SIGINT, 2).
func signalByName(s string) (int, bool) {
	s = strings.TrimPrefix(strings.ToUpper(s), "SIG")
	switch s {
	case "HUP":
		return sigHUP, true
	case "INT":
		return sigINT, true
	case "KILL":
		return sigKILL, true
	case "TERM":
		return sigTERM, true
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && n < 65
}

// cmdKill is toybox `kill [-s SIGNAL | -SIGNAL] PID...` (SIGTERM by
// default). The shell user may signal its own processes (screenrecord);
// any other existing pid is "Operation not permitted", an unknown one "No
// such process"; exit 1 when any failed.
func cmdKill(c *Ctx) int {
	sig := sigTERM
	args := c.Args[1:]
	if len(args) > 0 && args[0] == "-s" && len(args) > 1 {
		n, ok := signalByName(args[1])
		if !ok {
			fmt.Fprintf(c.Stderr, "kill: unknown signal '%s'\n", args[1])
			return 1
		}
		sig, args = n, args[2:]
	} else if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		n, ok := signalByName(args[0][1:])
		if !ok {
			fmt.Fprintf(c.Stderr, "kill: unknown signal '%s'\n", args[0][1:])
			return 1
		}
		sig, args = n, args[1:]
	}
	if len(args) == 0 {
		io.WriteString(c.Stderr, "kill: Needs 1 argument\n")
		return 1
	}
	st := 0
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil {
			fmt.Fprintf(c.Stderr, "kill: not a number '%s'\n", a)
			st = 1
			continue
		}
		if c.Device.rec.signal(pid, sig) {
			continue
		}
		c.Device.mu.Lock()
		rows := c.Device.processesLocked(false)
		c.Device.mu.Unlock()
		exists := false
		for _, r := range rows {
			exists = exists || r.pid == pid
		}
		if exists {
			fmt.Fprintf(c.Stderr, "kill: pid %d: Operation not permitted\n", pid)
		} else {
			fmt.Fprintf(c.Stderr, "kill: pid %d: No such process\n", pid)
		}
		st = 1
	}
	return st
}

// cmdPkill is toybox `pkill [-SIGNAL] [-f] [-x] PATTERN`: signals the
// shell's processes whose name (or, with -f, command line: its arguments
// joined by spaces) matches PATTERN, an extended regular expression
// (toybox ps.c: regcomp REG_EXTENDED; -x: the whole of it). The shell
// user's own processes here are its screenrecord recordings. Exit 1 when
// none matched; a bad expression is "pkill: bad REGEX" (exit 1).
func cmdPkill(c *Ctx) int {
	sig, full, exact := sigTERM, false, false
	var pat string
	for _, a := range c.Args[1:] {
		switch {
		case a == "-f":
			full = true
		case a == "-x":
			exact = true
		case strings.HasPrefix(a, "-"):
			n, ok := signalByName(a[1:])
			if !ok {
				fmt.Fprintf(c.Stderr, "pkill: unknown signal '%s'\n", a[1:])
				return 1
			}
			sig = n
		default:
			pat = a
		}
	}
	if pat == "" {
		io.WriteString(c.Stderr, "pkill: Needs 1 argument\n")
		return 1
	}
	if exact {
		pat = "^(" + pat + ")$"
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		fmt.Fprintf(c.Stderr, "pkill: bad REGEX '%s'\n", pat)
		return 1
	}
	r := &c.Device.rec
	r.mu.Lock()
	var pids []int
	for pid, rec := range r.run {
		if re.MatchString("screenrecord") && !full || full && re.MatchString(rec.args) {
			pids = append(pids, pid)
		}
	}
	r.mu.Unlock()
	for _, pid := range pids {
		r.signal(pid, sig)
	}
	// toybox leaves itself out, not the sh running it: a pattern that
	// matches that sh's `sh -c LINE` kills it, and the rest of LINE never
	// runs (catchable signals too: mksh -c sets no handler).
	if sh := c.shell; sh != nil && sh.cmdline != "" && (full && re.MatchString(sh.cmdline) || !full && re.MatchString("sh")) {
		sh.killedBy = sig
		pids = append(pids, 0)
	}
	if len(pids) == 0 {
		return 1
	}
	return 0
}
