package adb

import (
	"regexp"
	"strconv"
	"strings"
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
