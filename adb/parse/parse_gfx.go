package parse

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FrameStats are the counters of `dumpsys gfxinfo PKG` (JankTracker::dumpData).
// A counter absent from the output is -1.
type FrameStats struct {
	PID              int
	Package          string
	TotalFrames      int64 // "Total frames rendered: N"
	JankyFrames      int64 // "Janky frames: N (x%)"
	MissedVsync      int64 // "Number Missed Vsync: N"
	SlowUIThread     int64 // "Number Slow UI thread: N"
	DeadlineMissed   int64 // "Number Frame deadline missed: N" (API 31+)
	HighInputLatency int64 // "Number High input latency: N"
}

var gfxHdrRe = regexp.MustCompile(`\*\* Graphics info for pid (\d+) \[([^\]]+)\] \*\*`)

// ParseGfxinfo parses `dumpsys gfxinfo PKG`. Only the first process block is read
// (one package = one process in the daemon's use). ok is false when the output has
// no "Total frames rendered" line (package not running).
func ParseGfxinfo(out string) (FrameStats, bool) {
	s := FrameStats{TotalFrames: -1, JankyFrames: -1, MissedVsync: -1, SlowUIThread: -1,
		DeadlineMissed: -1, HighInputLatency: -1}
	seenHdr := false
	for _, l := range lines(out) {
		t := strings.TrimSpace(l)
		if t == "Profile data in ms:" || strings.HasPrefix(t, "Window: ") {
			// With framestats each window repeats the counters for its own
			// frames below this line; the process totals are above it.
			break
		}
		if m := gfxHdrRe.FindStringSubmatch(t); m != nil {
			if seenHdr {
				break
			}
			seenHdr = true
			s.PID, _ = strconv.Atoi(m[1])
			s.Package = m[2]
			continue
		}
		k, v, ok := strings.Cut(t, ": ")
		if !ok {
			continue
		}
		num := func() int64 {
			f := strings.Fields(v)
			if len(f) == 0 {
				return -1
			}
			n, ok := atoi64(f[0])
			if !ok {
				return -1
			}
			return n
		}
		switch k {
		case "Total frames rendered":
			s.TotalFrames = num()
		case "Janky frames":
			s.JankyFrames = num()
		case "Number Missed Vsync":
			s.MissedVsync = num()
		case "Number Slow UI thread":
			s.SlowUIThread = num()
		case "Number Frame deadline missed":
			s.DeadlineMissed = num()
		case "Number High input latency":
			s.HighInputLatency = num()
		}
	}
	return s, s.TotalFrames >= 0
}

// FrameTimeline is what `dumpsys gfxinfo PKG framestats` says about when the
// process last drew. All timestamps are nanoseconds of the device's
// CLOCK_MONOTONIC (System.nanoTime), the clock of the "Uptime:" header line
// (SystemClock.uptimeMillis), so their difference is the time since a frame.
type FrameTimeline struct {
	// UptimeMillis is the "Uptime: N" header: the device's uptime in ms when
	// the dump was taken.
	UptimeMillis int64
	// StatsSinceNanos is the process block's "Stats since: Nns" (the process
	// start or the last `dumpsys gfxinfo PKG reset`); -1 when absent.
	StatsSinceNanos int64
	// Windows is the number of ---PROFILEDATA--- blocks (one per window of
	// the process that has a renderer).
	Windows int
	// Frames is the number of frame rows over all windows (HWUI keeps the
	// last 120 frames of each window).
	Frames int
	// NewestFrameCompletedNanos is the latest FrameCompleted over all rows
	// (IntendedVsync for a row whose FrameCompleted is still 0); 0 when no row.
	NewestFrameCompletedNanos int64
}

// SinceLastFrame is how long before the dump the process last completed a
// frame: Uptime minus the newest FrameCompleted, or minus "Stats since" when
// no window has a frame row (nothing drawn since then). ok is false when
// neither is known. Never negative (Uptime has ms resolution).
func (f FrameTimeline) SinceLastFrame() (d time.Duration, ok bool) {
	ref := f.NewestFrameCompletedNanos
	if f.Frames == 0 {
		if f.StatsSinceNanos < 0 {
			return 0, false
		}
		ref = f.StatsSinceNanos
	}
	d = time.Duration(f.UptimeMillis)*time.Millisecond - time.Duration(ref)
	return max(d, 0), true
}

// ParseFramestats parses `dumpsys gfxinfo PKG framestats` (API 29+): the
// "Uptime: N Realtime: N" header (ActivityManagerService.dumpGraphicsHardwareUsage),
// the process block's "Stats since", and each window's block between two
// "---PROFILEDATA---" lines (HWUI JankTracker::dumpFrames): a CSV header
// naming the FrameInfo columns ("Flags,IntendedVsync,…,FrameCompleted,…,"
// before API 31, "Flags,FrameTimelineVsyncId,IntendedVsync,…" from 31, with
// columns added since), then one row per frame; header and rows end with a
// comma. Columns are found by name, not position, as their set differs by
// release. ok is false without the Uptime line or without any PROFILEDATA
// header naming IntendedVsync and FrameCompleted (no process, or a release
// without framestats).
func ParseFramestats(out string) (FrameTimeline, bool) {
	r := framestatsReader{f: FrameTimeline{StatsSinceNanos: -1}, intended: -1, completed: -1}
	for _, l := range lines(out) {
		r.line(strings.TrimSpace(l))
	}
	return r.f, r.upSeen && r.headerSeen
}

// framestatsReader is ParseFramestats' state between lines.
type framestatsReader struct {
	f FrameTimeline
	// upSeen: the Uptime line was read; headerSeen: a PROFILEDATA header
	// named both columns; inBlock: between a window's two PROFILEDATA lines.
	upSeen, headerSeen, inBlock bool
	// intended and completed are the IntendedVsync and FrameCompleted
	// columns of the block's header, -1 until it names them.
	intended, completed int
}

// line reads one trimmed line of the dump.
func (r *framestatsReader) line(t string) {
	switch {
	case t == "---PROFILEDATA---":
		r.inBlock = !r.inBlock
		r.intended, r.completed = -1, -1
	case r.inBlock && strings.HasPrefix(t, "Flags,"):
		r.header(t)
	case r.inBlock:
		r.row(t)
	case !r.upSeen && strings.HasPrefix(t, "Uptime: "):
		// "Uptime: N Realtime: N"
		if n, ok := atoi64(strings.Fields(t)[1]); ok && n >= 0 {
			r.f.UptimeMillis, r.upSeen = n, true
		}
	case r.f.StatsSinceNanos < 0 && r.f.Windows == 0 && strings.HasPrefix(t, "Stats since: "):
		if n, ok := atoi64(strings.TrimSuffix(strings.TrimPrefix(t, "Stats since: "), "ns")); ok && n >= 0 {
			r.f.StatsSinceNanos = n
		}
	}
}

// header finds the IntendedVsync and FrameCompleted columns in a block's
// "Flags,…" header; a header naming both counts a window.
func (r *framestatsReader) header(t string) {
	for i, name := range strings.Split(t, ",") {
		switch name {
		case "IntendedVsync":
			r.intended = i
		case "FrameCompleted":
			r.completed = i
		}
	}
	if r.intended >= 0 && r.completed >= 0 {
		r.headerSeen = true
		r.f.Windows++
	}
}

// row counts one frame row of a block whose header named both columns: its
// FrameCompleted, or its IntendedVsync while FrameCompleted is 0 (a frame
// not yet completed). Rows without a positive IntendedVsync are skipped.
func (r *framestatsReader) row(t string) {
	if r.intended < 0 || r.completed < 0 || t == "" {
		return
	}
	cols := strings.Split(t, ",")
	if len(cols) <= max(r.intended, r.completed) {
		return
	}
	iv, ok1 := atoi64(cols[r.intended])
	fc, ok2 := atoi64(cols[r.completed])
	if !ok1 || !ok2 || iv <= 0 {
		return
	}
	if fc <= 0 {
		fc = iv
	}
	r.f.Frames++
	r.f.NewestFrameCompletedNanos = max(r.f.NewestFrameCompletedNanos, fc)
}

// DisplaySize is the output of `wm size`.
type DisplaySize struct {
	PhysicalWidth, PhysicalHeight int
	// Override is set by `wm size WxH`; zero when none.
	OverrideWidth, OverrideHeight int
}

// Effective returns the override when set, else the physical size.
func (d DisplaySize) Effective() (int, int) {
	if d.OverrideWidth > 0 {
		return d.OverrideWidth, d.OverrideHeight
	}
	return d.PhysicalWidth, d.PhysicalHeight
}

var wmSizeRe = regexp.MustCompile(`^(Physical|Override) size: (\d+)x(\d+)`)

// ParseWmSize parses `wm size` ("Physical size: 1080x1920", optionally "Override
// size: 720x1280"; appium-adb 16.0.9 device-settings.js). ok is false when no
// physical size is printed.
func ParseWmSize(out string) (DisplaySize, bool) {
	var d DisplaySize
	for _, l := range lines(out) {
		m := wmSizeRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		w, _ := strconv.Atoi(m[2])
		h, _ := strconv.Atoi(m[3])
		if m[1] == "Physical" {
			d.PhysicalWidth, d.PhysicalHeight = w, h
		} else {
			d.OverrideWidth, d.OverrideHeight = w, h
		}
	}
	return d, d.PhysicalWidth > 0
}
