package android

import (
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
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
// The simulator has no MediaCodec. While it records it keeps the screen
// each time it changed (its drawing calls: screencap.go's drawing), with
// the time it changed, as SurfaceFlinger hands a device's encoder a frame
// only when the display changes. The MP4 is made by Debian's ffmpeg
// (libx264, baseline profile as MediaCodec's default AVC encoder, one
// thread, each frame at its time), which scales the display into the
// requested size keeping its aspect ratio (screenrecord letterboxes too:
// "Content area is WxH at offset x=.. y=.."); the last frame is held to the
// end, so the file's duration is the recording's time. A device encodes in
// hardware as it records, at no cost to the host; the simulator encodes
// once the recording has ended (in the background, a read of the file
// waiting for it), and a killed recording only if its file is read (fs.go's
// lazyContent), so a file removed unread costs the host no encoding.

func init() {
	registerCommand("screenrecord", cmdScreenrecord)
	registerCommand("kill", cmdKill)
	registerCommand("pkill", cmdPkill)
}

// RecordFPS is how often a recording compares the screen (times a second),
// so the finest step of a recording's frame times. A device's encoder gets
// a frame when the screen changes, at most at the display's refresh rate;
// the simulated screen changes at most a few times a second.
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
	kept frameLog // the frames kept so far
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
	// The recording's clock starts with the process.
	start := time.Now()
	first, _ := d.screenDrawing(0)
	dw, dh := first.w, first.h
	enc := srEncode{bitRate: o.bitRate, w: o.w, h: o.h}
	var err error
	if enc.w == 0 {
		enc.w, enc.h = dw, dh
	}
	enc.ffmpeg, err = exec.LookPath("ffmpeg")
	if err != nil || enc.w%2 != 0 || enc.h%2 != 0 {
		// An odd size is what the AVC encoder refuses on devices; the
		// simulator's encoder is Debian's ffmpeg (tools/setup.sh installs it).
		io.WriteString(c.Stderr, "ERROR: unable to configure video encoder\n")
		return 1
	}
	// Content area: the display scaled to fit the video, centred.
	enc.cw, enc.ch = enc.w, dh*enc.w/dw
	if enc.ch > enc.h {
		enc.cw, enc.ch = dw*enc.h/dh, enc.h
	}
	enc.cw, enc.ch = enc.cw&^1, enc.ch&^1
	if o.verbose {
		fmt.Fprintf(c.Stdout, "Main display is %dx%d @60.00fps (orientation=ROTATION_0)\n", dw, dh)
		fmt.Fprintf(c.Stdout, "Configuring recorder for %dx%d video/avc at %.2fMbps\n", enc.w, enc.h, float64(o.bitRate)/1e6)
		fmt.Fprintf(c.Stdout, "Content area is %dx%d at offset x=%d y=%d\n", enc.cw, enc.ch, (enc.w-enc.cw)/2, (enc.h-enc.ch)/2)
	}
	// MediaMuxer opens (creates) the file at the start and writes into it
	// until the end: a file removed meanwhile takes the rest with its
	// unlinked inode, and the path stays gone.
	fileName := canon(c.path(o.file))
	file, err := d.createRecording(fileName)
	if err != nil {
		fmt.Fprintf(c.Stderr, "Unable to open '%s': %s\n", o.file, errnoText(err))
		return 1
	}
	d.mu.Lock()
	pid := d.am.nextPID
	d.am.nextPID++
	d.mu.Unlock()
	rec := &recording{pid: pid, sig: make(chan int, 1), args: strings.Join(c.Args, " ")}
	d.rec.add(rec)
	defer d.rec.remove(pid)

	rec.kept.add(first, 0)
	limit := time.Duration(o.timeLimit) * time.Second
	sig := recordFrames(c, rec, first.sum, start, limit, o.verbose)
	enc.frames, enc.end = rec.kept.kept(), min(time.Since(start), limit)
	enc.killed = sig == sigKILL || sig == sigTERM
	// The file's content is what an encoder fed these frames writes. A
	// finished file is encoded now, in the background (the process ends, as
	// screenrecord does once its muxer is done; a read waits for the
	// encoding), unless it is removed first. A killed recording's is made
	// only if it is read: the file a passed run's recording leaves is
	// killed and removed unread, and costs no encoding, as a device's
	// hardware encoder costs its host nothing.
	d.mu.Lock()
	lc := d.setLazyLocked(fileName, file, func(ctx context.Context) []byte { return enc.mp4(ctx, d) }, d.now())
	d.mu.Unlock()
	if enc.killed {
		return 128 + sigKILL
	}
	go lc.get()
	if o.verbose {
		io.WriteString(c.Stdout, "Stopping encoder and muxer\n")
		fmt.Fprintf(c.Stdout, "Encoder stopping; recorded %d frames in %d seconds\n", enc.frameCount(), int64(time.Since(start).Seconds()))
	}
	return 0
}

// recordFrames keeps the screen's frames (rec.kept) until the time limit, a
// signal or the shell's end (SIGHUP), and returns the signal that ended it
// (0 for the time limit and SIGHUP). Like SurfaceFlinger feeding a device's
// encoder, a frame is kept only when the screen changed: the screen is
// compared RecordFPS times a second by its drawing's hash (a few
// microseconds), and a changed one kept as its drawing calls (kilobytes),
// drawn and encoded only if the file is made (srEncode).
func recordFrames(c *Ctx, rec *recording, last uint64, start time.Time, limit time.Duration, verbose bool) int {
	tick := time.NewTicker(time.Second / RecordFPS)
	defer tick.Stop()
	timeUp := time.NewTimer(limit - time.Since(start))
	defer timeUp.Stop()
	for {
		select {
		case now := <-tick.C:
			if dr, changed := c.Device.screenDrawing(last); changed {
				rec.kept.add(dr, min(now.Sub(start), limit))
				last = dr.sum
			}
		case <-timeUp.C:
			if verbose {
				io.WriteString(c.Stdout, "Time limit reached\n")
			}
			return 0
		case s := <-rec.sig:
			// SIGINT and SIGHUP are caught and finish the file; SIGTERM
			// and SIGKILL end the process where it is.
			return s
		case <-c.Context.Done():
			return 0 // SIGHUP: the adb shell went away
		}
	}
}

// createRecording creates the empty output file as the shell user and
// returns its node, which the recording's end gives its content.
func (d *Device) createRecording(p string) (*fsNode, error) {
	if err := d.writeFileAs(p, nil, 0o660, d.now(), ownerShell); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.fs.nodes[canon(p)]
	if n == nil {
		return nil, fs.ErrNotExist
	}
	return n, nil
}

// srFrame is a frame a recording kept: the screen's drawing and when it
// was first shown, from the recording's start.
type srFrame struct {
	screen drawing
	at     time.Duration
}

// frameLog is the frames of one recording, in time order, each different
// from the one before. A recording compares the screen at most RecordFPS
// times a second for at most srMaxTimeLimit seconds, so it keeps at most
// 900 frames, each a drawing of kilobytes.
type frameLog struct {
	mu     sync.Mutex
	frames []srFrame
}

func (f *frameLog) add(dr drawing, at time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.frames); n > 0 && f.frames[n-1].screen.sum == dr.sum {
		return
	}
	f.frames = append(f.frames, srFrame{screen: dr, at: at})
}

// kept is the frames so far.
func (f *frameLog) kept() []srFrame {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clip(f.frames)
}

// srEncode is a finished recording to encode: its frames, its length, the
// video's size (w x h) and the content area (cw x ch) the display is
// scaled into, the bit rate (bits/s), and whether it was killed.
type srEncode struct {
	ffmpeg       string
	w, h, cw, ch int
	bitRate      int
	frames       []srFrame
	end          time.Duration
	killed       bool
}

// frameCount is the number of frames the file holds: each kept frame and a
// last one at the end, so the video lasts the recording's time.
func (e srEncode) frameCount() int { return len(e.frames) + 1 }

// concatList is the ffconcat script showing each kept frame (fNNNNN.png)
// until the next one, in milliseconds (each image at framerate 1000, so
// ffmpeg keeps the times to the millisecond rather than its default 25
// frames/s), then the last frame again for 1 ms at the end.
func (e srEncode) concatList() string {
	var b strings.Builder
	b.WriteString("ffconcat version 1.0\n")
	endMs := max(e.end.Milliseconds(), e.frames[len(e.frames)-1].at.Milliseconds()+2)
	for i, f := range e.frames {
		next := endMs - 1
		if i+1 < len(e.frames) {
			next = e.frames[i+1].at.Milliseconds()
		}
		fmt.Fprintf(&b, "file f%05d.png\noption framerate 1000\nduration %.3f\n", i, float64(max(next-f.at.Milliseconds(), 1))/1000)
	}
	fmt.Fprintf(&b, "file f%05d.png\noption framerate 1000\nduration 0.001\n", len(e.frames)-1)
	return b.String()
}

// mp4 encodes the recording, unless ctx ends first, with Debian's ffmpeg (libx264, baseline as
// MediaCodec's default AVC encoder, one thread, variable frame rate: a
// frame where the screen changed, as screenrecord writes them), moov at the
// end as MPEG4Writer writes it. A killed recording's file ends before its
// index (moov), as a SIGKILLed muxer leaves it: no player reads it. An
// encoder that fails leaves an empty file and a line in the device's log.
func (e srEncode) mp4(ctx context.Context, d *Device) []byte {
	b, err := e.encode(ctx)
	if err != nil {
		if ctx.Err() == nil { // not the file removed meanwhile
			d.log(bufMain, 0, 0, 'E', "screenrecord", "encoder failed: "+err.Error())
		}
		return nil
	}
	if e.killed {
		b = beforeBox(b, "moov")
	}
	return b
}

func (e srEncode) encode(ctx context.Context) ([]byte, error) {
	dir, err := os.MkdirTemp("", "sim-screenrecord-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for i, f := range e.frames {
		if err := writePNG(filepath.Join(dir, fmt.Sprintf("f%05d.png", i)), f.screen.image()); err != nil {
			return nil, err
		}
	}
	list := filepath.Join(dir, "frames.ffconcat")
	if err := os.WriteFile(list, []byte(e.concatList()), 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "out.mp4")
	vf := fmt.Sprintf("scale=%d:%d,pad=%d:%d:(ow-iw)/2:(oh-ih)/2,format=yuv420p", e.cw, e.ch, e.w, e.h)
	cmd := exec.CommandContext(ctx, e.ffmpeg, "-hide_banner", "-loglevel", "error",
		"-f", "concat", "-safe", "0", "-i", list,
		"-vf", vf, "-fps_mode", "vfr", "-enc_time_base", "1/1000",
		"-c:v", "libx264", "-preset", "ultrafast", "-profile:v", "baseline",
		"-b:v", strconv.Itoa(e.bitRate), "-maxrate", strconv.Itoa(e.bitRate), "-bufsize", strconv.Itoa(2*e.bitRate),
		"-g", strconv.Itoa(2*RecordFPS), "-threads", "1",
		"-f", "mp4", "-y", out)
	var ffErr strings.Builder
	cmd.Stderr = &limitedWriter{w: &ffErr, n: 4096}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(ffErr.String()))
	}
	return os.ReadFile(out)
}

// writePNG writes a drawn screen to the file name as PNG.
func writePNG(name string, img *image.Paletted) error {
	b, err := encodeScreenPNG(img)
	if err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o600)
}

// beforeBox is b (an ISO BMFF file, ISO/IEC 14496-12: boxes of a 32-bit
// big-endian size, with 1 meaning a 64-bit size after the type, and a
// four-character type) cut before its first top-level box of type typ; b
// whole when it has none.
func beforeBox(b []byte, typ string) []byte {
	for off := 0; off+8 <= len(b); {
		size := int(binary.BigEndian.Uint32(b[off:]))
		if string(b[off+4:off+8]) == typ {
			return b[:off]
		}
		if size == 1 && off+16 <= len(b) {
			size = int(binary.BigEndian.Uint64(b[off+8:]))
		}
		if size < 8 {
			break // 0: to the end of the file
		}
		off += size
	}
	return b
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
