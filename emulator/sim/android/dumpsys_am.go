package android

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// dumpsys services of the activity side: window, activity, gfxinfo, power.
// Formats follow fixtures/captures (dumpsys-window-windows/api30.txt, api31.txt,
// dumpsys-activity-activities/api34.txt) and the AOSP dump code cited per
// function; only the sections and lines the simulator models are printed, each
// line in its real form.

func init() {
	registerDumpsys("window", dumpsysWindow)
	registerDumpsys("activity", dumpsysActivity)
	registerDumpsys("gfxinfo", dumpsysGfxinfo)
	registerDumpsys("power", dumpsysPower)
}

// --- frame statistics ---------------------------------------------------------

// The frame model: every frame a window draws sits on the display's vsync
// grid (IntendedVsync = k*vsyncPeriod of device uptime, the CLOCK_MONOTONIC
// the "Uptime:" line and HWUI's timestamps share) and exists from its
// FrameCompleted on. The counters of `dumpsys gfxinfo` and the rows of
// `framestats` are both computed from this one timeline, so they agree.

// vsyncPeriod is the frame interval of the 60 Hz display in ns (SurfaceFlinger's
// "VSYNC period: 16666666 ns"; HWUI's FrameInterval on such a display).
const vsyncPeriod int64 = 16_666_666

// framestatsRing is how many frames HWUI keeps per window for `framestats`
// (JankTracker's RingBuffer<FrameInfo, 120>).
const framestatsRing = 120

// frameBurst is the frames an activity window draws when it comes to the
// front: the first `janky` of them are slow (a first frame after a cold or
// warm start misses its deadline).
type frameBurst struct {
	at     time.Time
	frames int
	janky  int
	rec    *amRecord // the window (activity record) that draws them
}

// frameSegment is an animation of rec's window: one frame per vsync from
// start until end (or for ever when endless).
type frameSegment struct {
	start, end time.Time
	endless    bool
	rec        *amRecord
}

type gfxStats struct {
	since    time.Time // process start or last `dumpsys gfxinfo PKG reset`
	launches []frameBurst
	segments []frameSegment
}

// resetLocked starts counting afresh at now: the counters only count frames
// completed after it. The frames themselves stay: framestats rows survive a
// reset, as measured by a frame-stats tool, although AOSP's JankTracker::reset
// clears its ring (conflict noted in SOURCES.md).
func (g *gfxStats) resetLocked(now time.Time) {
	g.since = now
}

// frame durations (ms) the model assigns: animation frames, launch frames,
// janky first frames; and their GPU times.
const (
	animFrameMs   = 7
	launchFrameMs = 9
	jankyFrameMs  = 48
)

type frameKind int

const (
	frameAnim frameKind = iota
	frameLaunch
	frameJanky
)

// totalNs is FrameCompleted - IntendedVsync. It is the nominal duration plus
// 0.5 ms so that HWUI's own measure of the frame (which subtracts the
// SyncQueued->SyncStart stall, 0.32 ms here) and the naive one both fall in
// the histogram bucket of the nominal duration.
func (k frameKind) totalNs() int64 {
	ms := map[frameKind]int64{frameAnim: animFrameMs, frameLaunch: launchFrameMs, frameJanky: jankyFrameMs}[k]
	return ms*1_000_000 + 500_000
}

// gpuNs is GpuCompleted - SwapBuffers (HWUI FrameInfo::gpuDrawTime): 1.5 ms
// lands in the "2ms" GPU bucket, 7.5 ms in "8ms" (bucket = floor(ms)+1).
func (k frameKind) gpuNs() int64 {
	if k == frameJanky {
		return 7_500_000
	}
	return 1_500_000
}

// frameStages are one frame's FrameInfo timestamps as offsets (ns) from its
// IntendedVsync. The UI-thread stages keep the offsets of real rows (two
// pre-Q rows quoted in SOURCES.md: HandleInputStart +0.52 ms, AnimationStart
// +0.55, PerformTraversalsStart +0.62; DrawStart->SyncQueued 0.14 ms,
// SyncQueued->SyncStart 0.32, SyncStart->IssueDrawCommandsStart 0.09,
// IssueDrawCommandsStart->SwapBuffers 0.82); the rest is placed back from
// FrameCompleted so every stage precedes it.
type frameStages struct {
	frameStart, handleInput, animation, traversals, drawStart          int64
	syncQueued, syncStart, issueDraw, swap, cmdDone, swapDone, gpuDone int64
	completed                                                          int64
}

func (k frameKind) stages() frameStages {
	var s frameStages
	s.completed = k.totalNs()
	s.gpuDone = s.completed - 150_000
	s.swap = s.gpuDone - k.gpuNs()
	s.cmdDone = s.swap + 60_000
	s.swapDone = s.swap + 120_000
	s.issueDraw = s.swap - 823_750
	s.syncStart = s.issueDraw - 89_844
	s.syncQueued = s.syncStart - 321_718
	s.drawStart = s.syncQueued - 141_563
	s.frameStart = 199_246 // Choreographer's frame start, before input (a real S row)
	s.handleInput = 523_226
	s.animation = 545_986
	s.traversals = 624_268
	return s
}

// slots is how many vsyncs the frame keeps the window's UI thread busy: the
// next frame of the same window can start at the first vsync after this
// frame's SyncStart (a 48 ms first frame skips two vsyncs).
func (k frameKind) slots() int64 {
	n := (k.stages().syncStart + vsyncPeriod - 1) / vsyncPeriod
	return max(n, 1)
}

// frameRef is one frame of a window: its vsync index on the grid.
type frameRef struct {
	k     int64
	kind  frameKind
	first bool // first frame after the window was shown (FrameInfo Flags bit 0)
}

func (f frameRef) intendedNs() int64  { return f.k * vsyncPeriod }
func (f frameRef) completedNs() int64 { return f.k*vsyncPeriod + f.kind.totalNs() }

// windowTimeline is every frame of one window: launch bursts (each occupying a
// run of vsyncs) and animation ranges, which draw at every vsync no burst
// occupies.
type windowTimeline struct {
	launch  []frameRef
	busy    [][2]int64 // vsync ranges [from, to) the bursts occupy, sorted, disjoint
	anim    [][2]int64 // merged animation vsync ranges [from, to); to = math.MaxInt64 when endless
	created time.Time  // first burst: when the window's renderer started; zero when none
}

// vsyncAtOrAfter is the index of the first vsync at or after t.
func (d *Device) vsyncAtOrAfter(t time.Time) int64 {
	u := d.uptimeNanosAt(t)
	if u <= 0 {
		return 0
	}
	return (u + vsyncPeriod - 1) / vsyncPeriod
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// timelineLocked builds rec's frames from g's bursts and segments. A burst
// starts at the first vsync at or after its time, or after the previous
// burst of the window when that one still occupies the UI thread.
func (d *Device) timelineLocked(g *gfxStats, rec *amRecord) windowTimeline {
	var tl windowTimeline
	for _, b := range g.launches {
		if b.rec != rec || b.frames <= 0 {
			continue
		}
		if tl.created.IsZero() || b.at.Before(tl.created) {
			tl.created = b.at
		}
		k := d.vsyncAtOrAfter(b.at)
		if n := len(tl.busy); n > 0 && k < tl.busy[n-1][1] {
			k = tl.busy[n-1][1]
		}
		from := k
		for i := 0; i < b.frames; i++ {
			kind := frameLaunch
			if i < b.janky {
				kind = frameJanky
			}
			tl.launch = append(tl.launch, frameRef{k: k, kind: kind, first: i == 0})
			k += kind.slots()
		}
		tl.busy = append(tl.busy, [2]int64{from, k})
	}
	for _, s := range g.segments {
		if s.rec != rec {
			continue
		}
		from, to := d.vsyncAtOrAfter(s.start), int64(math.MaxInt64)
		if !s.endless {
			to = d.vsyncAtOrAfter(s.end)
		}
		if to > from {
			tl.anim = append(tl.anim, [2]int64{from, to})
		}
	}
	sort.Slice(tl.anim, func(i, j int) bool { return tl.anim[i][0] < tl.anim[j][0] })
	merged := tl.anim[:0]
	for _, r := range tl.anim {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	tl.anim = merged
	return tl
}

// busyIn counts the vsyncs of [lo, hi] that bursts occupy.
func (tl windowTimeline) busyIn(lo, hi int64) int64 {
	var n int64
	for _, b := range tl.busy {
		a, e := max(b[0], lo), min(b[1]-1, hi)
		if e >= a {
			n += e - a + 1
		}
	}
	return n
}

func (tl windowTimeline) isBusy(k int64) (bool, int64) {
	for _, b := range tl.busy {
		if k >= b[0] && k < b[1] {
			return true, b[0]
		}
	}
	return false, 0
}

type frameCounts struct {
	total, janky, anim, launch int
}

func (fc *frameCounts) add(o frameCounts) {
	fc.total += o.total
	fc.janky += o.janky
	fc.anim += o.anim
	fc.launch += o.launch
}

// count counts the frames completed in (sinceNs, nowNs] (device uptime ns).
func (tl windowTimeline) count(sinceNs, nowNs int64) frameCounts {
	var fc frameCounts
	for _, f := range tl.launch {
		if c := f.completedNs(); c > sinceNs && c <= nowNs {
			if f.kind == frameJanky {
				fc.janky++
			} else {
				fc.launch++
			}
		}
	}
	d := frameAnim.totalNs()
	kmin, kmax := floorDiv(sinceNs-d, vsyncPeriod)+1, floorDiv(nowNs-d, vsyncPeriod)
	for _, r := range tl.anim {
		lo, hi := max(r[0], kmin), min(r[1]-1, kmax)
		if hi >= lo {
			fc.anim += int(hi - lo + 1 - tl.busyIn(lo, hi))
		}
	}
	fc.total = fc.anim + fc.launch + fc.janky
	return fc
}

// newest returns the window's last n frames completed by nowNs, oldest first:
// what HWUI's per-window ring holds.
func (tl windowTimeline) newest(nowNs int64, n int) []frameRef {
	var out []frameRef
	for _, f := range tl.launch {
		if f.completedNs() <= nowNs {
			out = append(out, f)
		}
	}
	kmax := floorDiv(nowNs-frameAnim.totalNs(), vsyncPeriod)
	taken := 0
	for i := len(tl.anim) - 1; i >= 0 && taken < n; i-- {
		for k := min(tl.anim[i][1]-1, kmax); k >= tl.anim[i][0] && taken < n; k-- {
			if busy, from := tl.isBusy(k); busy {
				k = from // the loop's k-- steps below the burst
				continue
			}
			out = append(out, frameRef{k: k, kind: frameAnim})
			taken++
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// windowsLocked lists the windows that drew in g (also finished ones: their
// frames stay in the process counters), in the order they first drew.
func windowsLocked(g *gfxStats) []*amRecord {
	var recs []*amRecord
	seen := map[*amRecord]bool{}
	add := func(r *amRecord) {
		if r != nil && !seen[r] {
			seen[r] = true
			recs = append(recs, r)
		}
	}
	for _, b := range g.launches {
		add(b.rec)
	}
	for _, s := range g.segments {
		add(s.rec)
	}
	return recs
}

// countLocked counts the process's frames completed since g.since, up to now.
func (d *Device) countLocked(g *gfxStats, now time.Time) frameCounts {
	var fc frameCounts
	since, up := d.uptimeNanosAt(g.since), d.uptimeNanosAt(now)
	for _, r := range windowsLocked(g) {
		fc.add(d.timelineLocked(g, r).count(since, up))
	}
	return fc
}

// animatingLocked reports whether pkg's front activity is drawing frames now.
func (am *activityManager) animatingLocked(rec *amRecord, now time.Time) bool {
	g := am.gfx[rec.pkg]
	if g == nil {
		return false
	}
	for _, s := range g.segments {
		if s.rec == rec && !now.Before(s.start) && (s.endless || now.Before(s.end)) {
			return true
		}
	}
	return false
}

// HWUI histogram buckets as printed by `dumpsys gfxinfo` (capture: the
// "HISTOGRAM:" and "GPU HISTOGRAM:" lines of an API 31+ device quoted in
// SOURCES.md): 5..32 by 1, 34..48 by 2, 53..133 by 4, 150..4950 by 50.
func frameBuckets() []int {
	var b []int
	for i := 5; i <= 32; i++ {
		b = append(b, i)
	}
	for i := 34; i <= 48; i += 2 {
		b = append(b, i)
	}
	for i := 53; i <= 133; i += 4 {
		b = append(b, i)
	}
	for i := 150; i <= 4950; i += 50 {
		b = append(b, i)
	}
	return b
}

func gpuBuckets() []int {
	var b []int
	for i := 1; i <= 25; i++ {
		b = append(b, i)
	}
	return append(b, 4950)
}

func bucketIndex(buckets []int, ms int) int {
	for i, b := range buckets {
		if ms <= b {
			return i
		}
	}
	return len(buckets) - 1
}

// percentile follows HWUI ProfileData::findPercentile: walking down from the
// slowest bucket; an empty histogram answers the last bucket (4950ms).
func percentile(buckets []int, counts []int, total, pct int) int {
	pos := pct * total / 100
	remaining := total - pos
	for i := len(counts) - 1; i >= 0; i-- {
		remaining -= counts[i]
		if remaining <= 0 {
			return buckets[i]
		}
	}
	return buckets[0]
}

// dumpsysGfxinfo is `dumpsys gfxinfo [PKG] [reset|framestats|-a]` (format: the
// API 31+ capture quoted in SOURCES.md; "Janky frames (legacy)" and "Number
// Frame deadline missed" exist from API 31). "reset" prints the stats, then
// starts counting afresh. No process: "No process found for: PKG". With
// "framestats" (also "-a", and no argument at all: HardwareRenderer's
// FLAG_DUMP_ALL is FLAG_DUMP_FRAMESTATS) each window of the "Profile data in
// ms:" section is followed by its own counters and frame rows
// (writeFramestatsLocked).
func dumpsysGfxinfo(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	var pkg string
	reset, framestats := false, len(args) == 0
	for _, a := range args {
		switch a {
		case "reset":
			reset = true
		case "framestats", "-a":
			framestats = true
		case "--checkin":
		default:
			pkg = a
		}
	}
	now := d.now()
	up := d.uptimeMillis()
	fmt.Fprintln(c.Stdout, "Applications Graphics Acceleration Info:")
	fmt.Fprintf(c.Stdout, "Uptime: %d Realtime: %d\n", up, up)
	d.mu.Lock()
	defer d.mu.Unlock()
	var pkgs []string
	if pkg == "" {
		for p := range d.am.procs {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
	} else {
		if _, ok := d.am.procs[pkg]; !ok {
			fmt.Fprintf(c.Stdout, "No process found for: %s\n", pkg)
			return 0
		}
		pkgs = []string{pkg}
	}
	for _, p := range pkgs {
		proc := d.am.procs[p]
		g := d.am.gfx[p]
		if g == nil {
			g = &gfxStats{since: proc.started}
			d.am.gfx[p] = g
		}
		d.writeGfxLocked(c.Stdout, proc, g, now, framestats)
		if reset {
			g.resetLocked(now)
		}
	}
	return 0
}

// writeProfileDataLocked prints HWUI's ProfileData::dump for frames counted
// since `since`: "Stats since: Nns" through "GPU HISTOGRAM: ...", one line each
// (the process block and, with framestats, each window's block print the same
// lines).
func (d *Device) writeProfileDataLocked(w io.Writer, since time.Time, fc frameCounts) {
	api := d.APILevel()
	fb, gb := frameBuckets(), gpuBuckets()
	counts := make([]int, len(fb))
	gcounts := make([]int, len(gb))
	counts[bucketIndex(fb, animFrameMs)] += fc.anim
	counts[bucketIndex(fb, launchFrameMs)] += fc.launch
	counts[bucketIndex(fb, jankyFrameMs)] += fc.janky
	gcounts[bucketIndex(gb, 2)] += fc.anim + fc.launch
	gcounts[bucketIndex(gb, 8)] += fc.janky
	pctOf := func(n int) string {
		if fc.total == 0 {
			return "0.00"
		}
		return fmt.Sprintf("%.2f", math.Round(float64(n)*10000/float64(fc.total))/100)
	}
	fmt.Fprintf(w, "Stats since: %dns\n", d.uptimeNanosAt(since))
	fmt.Fprintf(w, "Total frames rendered: %d\n", fc.total)
	fmt.Fprintf(w, "Janky frames: %d (%s%%)\n", fc.janky, pctOf(fc.janky))
	if api >= 31 {
		fmt.Fprintf(w, "Janky frames (legacy): %d (%s%%)\n", fc.janky, pctOf(fc.janky))
	}
	for _, p := range []int{50, 90, 95, 99} {
		fmt.Fprintf(w, "%dth percentile: %dms\n", p, percentile(fb, counts, fc.total, p))
	}
	fmt.Fprintln(w, "Number Missed Vsync: 0")
	fmt.Fprintln(w, "Number High input latency: 0")
	fmt.Fprintf(w, "Number Slow UI thread: %d\n", fc.janky)
	fmt.Fprintln(w, "Number Slow bitmap uploads: 0")
	fmt.Fprintln(w, "Number Slow issue draw commands: 0")
	if api >= 31 {
		fmt.Fprintf(w, "Number Frame deadline missed: %d\n", fc.janky)
		fmt.Fprintf(w, "Number Frame deadline missed (legacy): %d\n", fc.janky)
	}
	fmt.Fprintln(w, "HISTOGRAM: "+histogram(fb, counts))
	for _, p := range []int{50, 90, 95, 99} {
		fmt.Fprintf(w, "%dth gpu percentile: %dms\n", p, percentile(gb, gcounts, fc.total, p))
	}
	fmt.Fprintln(w, "GPU HISTOGRAM: "+histogram(gb, gcounts))
}

func (d *Device) writeGfxLocked(w io.Writer, proc *amProcess, g *gfxStats, now time.Time, framestats bool) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "** Graphics info for pid %d [%s] **\n", proc.pid, proc.pkg)
	fmt.Fprintln(w)
	d.writeProfileDataLocked(w, g.since, d.countLocked(g, now))
	fmt.Fprintln(w, "Pipeline=Skia (OpenGL)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Profile data in ms:")
	fmt.Fprintln(w)
	var roots []*amRecord
	for _, t := range d.am.tasks {
		if t.pkg == proc.pkg {
			roots = append(roots, t.records...)
		}
	}
	views := 0
	for _, r := range roots {
		fmt.Fprintf(w, "\t%s/%s/android.view.ViewRootImpl@%s (visibility=0)\n", r.pkg, r.cls, r.winHash)
		if framestats {
			d.writeFramestatsLocked(w, g, r, now)
		}
	}
	fmt.Fprintln(w, "View hierarchy:")
	fmt.Fprintln(w)
	for _, r := range roots {
		n := nodeCount(r.root) + 3 // DecorView, LinearLayout, content FrameLayout
		views += n
		fmt.Fprintf(w, "  %s/%s/android.view.ViewRootImpl@%s\n", r.pkg, r.cls, r.winHash)
		fmt.Fprintf(w, "  %d views, %.2f kB of render nodes\n", n, float64(n)*1.44)
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Total ViewRootImpl   : %d\n", len(roots))
	fmt.Fprintf(w, "Total attached Views : %d\n", views)
	fmt.Fprintf(w, "Total RenderNode     : %.2f kB (used) / %.2f kB (capacity)\n", float64(views)*1.44, float64(views)*2.88)
}

// writeFramestatsLocked prints what HWUI adds for one window with
// `framestats` (API 26+: CanvasContext::dumpFrames = JankTracker::dumpStats +
// dumpFrames), right after the window's "\t<name> (visibility=0)" line:
//
//	Window: <pkg>/<activity class>          (the window title; API 26+)
//	Stats since: <ns>ns ... GPU HISTOGRAM: …   (ProfileData::dump of this window's frames)
//	<3 empty lines>
//	---PROFILEDATA---
//	<column names, each followed by ",">
//	<one row per frame, oldest first, each value followed by ",">
//	---PROFILEDATA---
//	<2 empty lines>
//
// The empty lines are the dprintf sequence of JankTracker::dumpData ("\n"
// after ProfileData::dump's own final "\n"), dumpFrames ("\n\n---PROFILEDATA---\n"
// … "\n---PROFILEDATA---\n\n") and WindowManagerGlobal's "\n\t%s (visibility=%d)"
// before the next window. Rows are the window's last 120 frames completed by
// now, timestamps in ns of device uptime (the "Uptime:" line's clock); a
// window that drew nothing yet prints the column names and no row. The
// per-window counters count since the window's renderer started or the last
// reset. Before API 26 only the PROFILEDATA part exists (none before 23).
func (d *Device) writeFramestatsLocked(w io.Writer, g *gfxStats, r *amRecord, now time.Time) {
	api := d.APILevel()
	if api < 23 {
		return
	}
	tl := d.timelineLocked(g, r)
	if api >= 26 {
		since := g.since
		if tl.created.After(since) {
			since = tl.created
		}
		fmt.Fprintf(w, "Window: %s/%s\n", r.pkg, r.cls)
		d.writeProfileDataLocked(w, since, tl.count(d.uptimeNanosAt(since), d.uptimeNanosAt(now)))
		fmt.Fprint(w, "\n\n")
	}
	fmt.Fprint(w, "\n---PROFILEDATA---\n")
	fmt.Fprint(w, framestatsHeader(api))
	for _, f := range tl.newest(d.uptimeNanosAt(now), framestatsRing) {
		fmt.Fprint(w, "\n")
		for _, v := range framestatsRow(api, f) {
			fmt.Fprintf(w, "%d,", v)
		}
	}
	fmt.Fprint(w, "\n---PROFILEDATA---\n\n\n")
}

// framestatsColumns are HWUI's FrameInfoNames per release, as printed in the
// PROFILEDATA header (sources in SOURCES.md): 16 columns up to P (API 28),
// GpuCompleted added in Q (29-30), the FrameTimeline form from S (31-32,
// 22 columns), CommandSubmissionCompleted added after S (33-35).
func framestatsColumns(api int) []string {
	switch {
	case api <= 30:
		cols := []string{"Flags", "IntendedVsync", "Vsync", "OldestInputEvent", "NewestInputEvent",
			"HandleInputStart", "AnimationStart", "PerformTraversalsStart", "DrawStart", "SyncQueued",
			"SyncStart", "IssueDrawCommandsStart", "SwapBuffers", "FrameCompleted",
			"DequeueBufferDuration", "QueueBufferDuration"}
		if api >= 29 {
			cols = append(cols, "GpuCompleted")
		}
		return cols
	default:
		// Positions 10 and 11 are named "FrameInterval","FrameStartTime" while
		// the FrameInfoIndex enum holds FrameStartTime at 10 and FrameInterval
		// at 11: real rows show the frame start time under "FrameInterval" and
		// the interval (11111111 on a 90 Hz phone) under "FrameStartTime".
		cols := []string{"Flags", "FrameTimelineVsyncId", "IntendedVsync", "Vsync", "InputEventId",
			"HandleInputStart", "AnimationStart", "PerformTraversalsStart", "DrawStart", "FrameDeadline",
			"FrameInterval", "FrameStartTime", "SyncQueued", "SyncStart", "IssueDrawCommandsStart",
			"SwapBuffers", "FrameCompleted", "DequeueBufferDuration", "QueueBufferDuration",
			"GpuCompleted", "SwapBuffersCompleted", "DisplayPresentTime"}
		if api >= 33 {
			cols = append(cols, "CommandSubmissionCompleted")
		}
		return cols
	}
}

// framestatsHeader is the PROFILEDATA header line: every name followed by a
// comma (JankTracker::dumpFrames), no line end.
func framestatsHeader(api int) string {
	return strings.Join(framestatsColumns(api), ",") + ","
}

// Values HWUI records that the model keeps constant: buffer dequeue/queue
// durations of the real pre-Q rows in SOURCES.md, no input event
// (OldestInputEvent = INT64_MAX, NewestInputEvent = 0, InputEventId = 0), no
// present fence (DisplayPresentTime = 0).
const (
	dequeueBufferNs = 96_000
	queueBufferNs   = 146_000
)

// framestatsRow is f's values in the order of framestatsColumns(api).
func framestatsRow(api int, f frameRef) []int64 {
	v := f.intendedNs()
	s := f.kind.stages()
	var flags int64
	if f.first {
		flags = 1
	}
	if api <= 30 {
		row := []int64{flags, v, v, math.MaxInt64, 0,
			v + s.handleInput, v + s.animation, v + s.traversals, v + s.drawStart, v + s.syncQueued,
			v + s.syncStart, v + s.issueDraw, v + s.swap, v + s.completed,
			dequeueBufferNs, queueBufferNs}
		if api >= 29 {
			row = append(row, v+s.gpuDone)
		}
		return row
	}
	row := []int64{flags, f.k, v, v, 0,
		v + s.handleInput, v + s.animation, v + s.traversals, v + s.drawStart, v + vsyncPeriod,
		v + s.frameStart, vsyncPeriod, // enum order: FrameStartTime, FrameInterval
		v + s.syncQueued, v + s.syncStart, v + s.issueDraw,
		v + s.swap, v + s.completed, dequeueBufferNs, queueBufferNs,
		v + s.gpuDone, v + s.swapDone, 0}
	if api >= 33 {
		row = append(row, v+s.cmdDone)
	}
	return row
}

func histogram(buckets, counts []int) string {
	parts := make([]string, len(buckets))
	for i, b := range buckets {
		parts[i] = fmt.Sprintf("%dms=%d", b, counts[i])
	}
	return strings.Join(parts, " ")
}

// uptimeMillis is SystemClock.uptimeMillis: the simulated device booted
// bootUptimeOffset before the Device was created.
const bootUptimeOffset = 20 * time.Second

func (d *Device) uptimeMillis() int64 {
	return int64((d.now().Sub(d.started) + bootUptimeOffset) / time.Millisecond)
}

func (d *Device) uptimeNanosAt(t time.Time) int64 {
	return int64(t.Sub(d.started) + bootUptimeOffset)
}

// --- dumpsys power ---------------------------------------------------------------

// dumpsysPower prints the head of PowerManagerService.dump: "POWER MANAGER
// (dumpsys power)", a blank line, "Power Manager State:" and its first fields
// (field names and order from the AOSP dump and a device capture quoted in
// SOURCES.md), plus the "Display Power: state=ON|OFF" line.
func dumpsysPower(c *Ctx) int {
	d := c.Device
	d.mu.Lock()
	awake := d.am.awake
	d.mu.Unlock()
	wake, disp := "Awake", "ON"
	if !awake {
		wake, disp = "Asleep", "OFF"
	}
	booted := d.Booted()
	w := c.Stdout
	fmt.Fprintln(w, "POWER MANAGER (dumpsys power)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Power Manager State:")
	fmt.Fprintln(w, "  mDirty=0x0")
	fmt.Fprintf(w, "  mWakefulness=%s\n", wake)
	fmt.Fprintln(w, "  mWakefulnessChanging=false")
	fmt.Fprintln(w, "  mIsPowered=true")
	fmt.Fprintln(w, "  mPlugType=1")
	fmt.Fprintln(w, "  mBatteryLevel=100")
	fmt.Fprintln(w, "  mBatteryLevelWhenDreamStarted=0")
	fmt.Fprintln(w, "  mDockState=0")
	fmt.Fprintln(w, "  mStayOn=false")
	fmt.Fprintln(w, "  mProximityPositive=false")
	fmt.Fprintf(w, "  mBootCompleted=%t\n", booted)
	fmt.Fprintf(w, "  mSystemReady=%t\n", booted)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Display Power: state=%s\n", disp)
	return 0
}

// --- dumpsys window ----------------------------------------------------------------

// winGeom is the display geometry used in window dumps: status bar 24dp,
// navigation bar 48dp (portrait) / 42dp (landscape side bar), as in the
// captures (1080x1920@420: status 63, nav 126, rng=1080x1017-1810x1731).
type winGeom struct {
	w, h, dpi              int
	status, nav, navLand   int
	appH, swdp, wdp, hdp   int
	rngA, rngB, rngC, rngD int
}

func (d *Device) geom() winGeom {
	w, h, dpi := d.DisplaySize()
	dp := func(v int) int { return int(math.Round(float64(v) * float64(dpi) / 160)) }
	g := winGeom{w: w, h: h, dpi: dpi, status: dp(24), nav: dp(48), navLand: dp(42)}
	g.appH = h - g.nav
	short, long := w, h
	if short > long {
		short, long = long, short
	}
	g.swdp = short * 160 / dpi
	g.wdp = w * 160 / dpi
	g.hdp = (g.appH - g.status) * 160 / dpi
	g.rngA, g.rngB = short, short-g.status
	g.rngC, g.rngD = long-g.navLand, long-g.status-g.nav
	return g
}

type focusView struct {
	pkg, cls   string
	recHash    string
	winHash    string
	taskID     int
	keyguard   bool
	awake      bool
	lockWin    string // NotificationShade window hash
	statusWin  string
	navWin     string
	shadeOwner int
	// dialog is the focused error dialog's window ("Window{h u0 Application Error: pkg}"), "" if none.
	dialog string
}

func (d *Device) focusLocked() focusView {
	t := d.am.tasks[0]
	r := t.records[len(t.records)-1]
	f := focusView{pkg: r.pkg, cls: r.cls, recHash: r.hash, winHash: r.winHash, taskID: t.id,
		keyguard: d.am.keyguard, awake: d.am.awake, lockWin: "91c910b", statusWin: "7547027", navWin: "e56b35e"}
	if dl := d.topDialogLocked(); dl != nil {
		f.dialog = "Window{" + dl.winHash + " u0 " + dl.title() + "}"
	}
	return f
}

func recordString(pkg, cls, hash string, task int) string {
	return fmt.Sprintf("ActivityRecord{%s u0 %s t%d}", hash, shortComponent(pkg, cls), task)
}

func windowString(hash, pkg, cls string) string {
	return fmt.Sprintf("Window{%s u0 %s/%s}", hash, pkg, cls)
}

// dumpsysWindow: `dumpsys window displays|windows|policy` or the whole dump
// (sections joined by the 79-dash separator WindowManagerService.doDump prints).
func dumpsysWindow(c *Ctx) int {
	d := c.Device
	sub := ""
	if len(c.Args) > 1 {
		sub = c.Args[1]
	}
	switch sub {
	case "displays", "d":
		d.dumpWindowDisplays(c.Stdout)
	case "windows", "w":
		d.dumpWindowWindows(c.Stdout)
	case "policy", "p":
		d.dumpWindowPolicy(c.Stdout)
	case "":
		d.dumpWindowPolicy(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpWindowDisplays(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpWindowWindows(c.Stdout)
	default:
		// WindowManagerService.doDump: an unknown argument is taken as a window name.
		fmt.Fprintln(c.Stdout, "WINDOW MANAGER WINDOWS (dumpsys window windows)")
	}
	return 0
}

const dumpSeparator = "-------------------------------------------------------------------------------"

// dumpWindowPolicy prints the PhoneWindowManager keyguard state Appium's
// isScreenLocked reads: "KeyguardServiceDelegate" with its
// "KeyguardStateMonitor" (mIsShowing, mInputRestricted) (AOSP
// KeyguardServiceDelegate.dump / KeyguardStateMonitor.dump field names).
func (d *Device) dumpWindowPolicy(w io.Writer) {
	d.mu.Lock()
	f := d.focusLocked()
	d.mu.Unlock()
	fmt.Fprintln(w, "WINDOW MANAGER POLICY STATE (dumpsys window policy)")
	fmt.Fprintf(w, "    mAwake=%t\n", f.awake)
	fmt.Fprintf(w, "    mKeyguardDrawComplete=true mWindowManagerDrawComplete=true\n")
	fmt.Fprintln(w, "    KeyguardServiceDelegate")
	fmt.Fprintf(w, "      showing=%t\n", f.keyguard)
	fmt.Fprintf(w, "      inputRestricted=%t\n", f.keyguard)
	fmt.Fprintln(w, "      occluded=false")
	fmt.Fprintln(w, "      secure=false")
	fmt.Fprintln(w, "      dreaming=false")
	fmt.Fprintln(w, "      systemIsReady=true")
	fmt.Fprintln(w, "      deviceHasKeyguard=true")
	fmt.Fprintln(w, "      enabled=true")
	fmt.Fprintln(w, "      KeyguardStateMonitor")
	fmt.Fprintf(w, "        mIsShowing=%t\n", f.keyguard)
	fmt.Fprintln(w, "        mSimSecure=false")
	fmt.Fprintf(w, "        mInputRestricted=%t\n", f.keyguard)
	fmt.Fprintln(w, "        mTrusted=false")
	fmt.Fprintln(w, "        mCurrentUserId=0")
}

// currentFocusLine is the mCurrentFocus value: the keyguard's
// NotificationShade (API 30+; StatusBar on 29) while locked, else the top
// activity's window; mCurrentFocus=null while the screen is off.
func (f focusView) currentFocus(api int) string {
	if !f.awake {
		return "null"
	}
	if f.keyguard {
		if api >= 30 {
			return "Window{" + f.lockWin + " u0 NotificationShade}"
		}
		return "Window{" + f.statusWin + " u0 StatusBar}"
	}
	if f.dialog != "" {
		return f.dialog
	}
	return windowString(f.winHash, f.pkg, f.cls)
}

// focusedAppLine is mFocusedApp: "ActivityRecord{h u0 pkg/.Act tN}" on API 30+;
// on API 29 "AppWindowToken{h token=Token{h ActivityRecord{h u0 pkg/.Act tN}}}"
// (both forms: appium-adb test/unit/apk-utils.spec.ts, SOURCES.md).
func (f focusView) focusedApp(api int) string {
	rec := recordString(f.pkg, f.cls, f.recHash, f.taskID)
	if api <= 29 {
		return fmt.Sprintf("AppWindowToken{%s token=Token{%s %s}}", rev(f.recHash), rev(f.winHash), rec)
	}
	return rec
}

func rev(h string) string {
	b := []byte(h)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	if b[0] == '0' {
		b[0] = 'a'
	}
	return string(b)
}

// dumpWindowDisplays prints `dumpsys window displays` (API 29+): the header
// from RootWindowContainer.dumpDisplayContents and the DisplayContent.dump lines
// of the API 34 capture (dumpsys-activity-activities/api34.txt, section
// "ActivityTaskSupervisor state:"): Display line, init/cur/app/rng, focus, and
// the DisplayPolicy block (mShowingDream/mDreamingLockscreen/isKeyguardShowing,
// mScreenOnFully) Appium's lock check reads.
func (d *Device) dumpWindowDisplays(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	f := d.focusLocked()
	d.mu.Unlock()
	fmt.Fprintln(w, "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)")
	d.writeDisplayContent(w, api, g, f)
}

func (d *Device) writeDisplayContent(w io.Writer, api int, g winGeom, f focusView) {
	org, minSize := "", ""
	if api >= 33 {
		org = " (organized)"
		minSize = " mMinSizeOfResizeableTaskDp=220"
	}
	fmt.Fprintf(w, "  Display: mDisplayId=0%s\n", org)
	fmt.Fprintf(w, "    init=%dx%d %ddpi%s cur=%dx%d app=%dx%d rng=%dx%d-%dx%d\n",
		g.w, g.h, g.dpi, minSize, g.w, g.h, g.w, g.appH, g.rngA, g.rngB, g.rngC, g.rngD)
	fmt.Fprintf(w, "    deferred=false mLayoutNeeded=false mTouchExcludeRegion=SkRegion((0,0,%d,%d))\n", g.w, g.h)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mLayoutSeq=%d\n", 108)
	fmt.Fprintf(w, "  mCurrentFocus=%s\n", f.currentFocus(api))
	fmt.Fprintf(w, "  mFocusedApp=%s\n", f.focusedApp(api))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  mHoldScreenWindow=null")
	fmt.Fprintln(w, "  mLastWakeLockHoldingWindow=null")
	fmt.Fprintln(w, "  mLastWakeLockObscuringWindow=null")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayFrames w="+itoa(g.w)+" h="+itoa(g.h)+" r=0")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayPolicy")
	fmt.Fprintln(w, "    mCarDockEnablesAccelerometer=true mDeskDockEnablesAccelerometer=true")
	fmt.Fprintln(w, "    mDockMode=EXTRA_DOCK_STATE_UNDOCKED mLidState=LID_ABSENT")
	fmt.Fprintf(w, "    mAwake=%t mScreenOnEarly=%t mScreenOnFully=%t\n", f.awake, f.awake, f.awake)
	fmt.Fprintln(w, "    mKeyguardDrawComplete=true mWindowManagerDrawComplete=true")
	fmt.Fprintln(w, "    mHdmiPlugged=false")
	fmt.Fprintf(w, "    mShowingDream=false mDreamingLockscreen=%t\n", f.keyguard)
	fmt.Fprintf(w, "    mStatusBar=Window{%s u0 StatusBar}\n", f.statusWin)
	if api >= 30 {
		fmt.Fprintf(w, "    mExpandedPanel=Window{%s u0 NotificationShade}\n", f.lockWin)
	}
	fmt.Fprintf(w, "    isKeyguardShowing=%t\n", f.keyguard)
	fmt.Fprintf(w, "    mNavigationBar=Window{%s u0 NavigationBar0}\n", f.navWin)
	if cf := f.currentFocus(api); cf != "null" {
		fmt.Fprintf(w, "    mFocusedWindow=%s\n", cf)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  DisplayRotation")
	fmt.Fprintln(w, "    mCurrentAppOrientation=SCREEN_ORIENTATION_UNSPECIFIED")
	fmt.Fprintln(w, "    mLastOrientation=-1")
	fmt.Fprintln(w, "    mRotation=0 mDeferredRotationPauseCount=0")
}

func itoa(i int) string { return fmt.Sprint(i) }

// dumpWindowWindows prints `dumpsys window windows`: the window list (top
// first) in the shape of fixtures/captures/dumpsys-window-windows/api30.txt
// (API 29-30) and api31.txt (API 31+), then the global tail. Only the lines
// whose values the simulator knows are printed for each window.
func (d *Device) dumpWindowWindows(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	f := d.focusLocked()
	type win struct {
		hash, name, pkg string
		uid, pid        int
		rec             string
		ty              string
		frame           string
		visible         bool
	}
	var wins []win
	sysPid := d.am.procs[systemUIPackage].pid
	wins = append(wins, win{hash: f.navWin, name: "NavigationBar0", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
		ty: "NAVIGATION_BAR", frame: fmt.Sprintf("[0,%d][%d,%d]", g.appH, g.w, g.h), visible: true})
	if api >= 30 {
		wins = append(wins, win{hash: f.lockWin, name: "NotificationShade", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
			ty: "NOTIFICATION_SHADE", frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.h), visible: f.keyguard})
	}
	wins = append(wins, win{hash: f.statusWin, name: "StatusBar", pkg: systemUIPackage, uid: d.uidOfLocked(systemUIPackage), pid: sysPid,
		ty: "STATUS_BAR", frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.status), visible: true})
	// Error dialogs are system_server windows (package android, uid 1000), top first.
	for i := len(d.faults.dialogs) - 1; i >= 0; i-- {
		dl := d.faults.dialogs[i]
		b := d.dialogRootLocked(dl).Bounds
		wins = append(wins, win{hash: dl.winHash, name: dl.title(), pkg: "android", uid: 1000, pid: pidSystemSrv,
			ty: "SYSTEM_ERROR", frame: fmt.Sprintf("[%d,%d][%d,%d]", b[0], b[1], b[2], b[3]), visible: true})
	}
	for i, t := range d.am.tasks {
		for j := len(t.records) - 1; j >= 0; j-- {
			r := t.records[j]
			pid := 0
			if p, ok := d.am.procs[r.pkg]; ok {
				pid = p.pid
			}
			wins = append(wins, win{hash: r.winHash, name: r.pkg + "/" + r.cls, pkg: r.pkg, uid: d.uidOfLocked(r.pkg), pid: pid,
				rec: recordString(r.pkg, r.cls, r.hash, t.id), ty: "BASE_APPLICATION",
				frame: fmt.Sprintf("[0,0][%d,%d]", g.w, g.h), visible: i == 0 && j == len(t.records)-1})
		}
	}
	d.mu.Unlock()
	cfg := fmt.Sprintf("{1.0 310mcc260mnc [en_US] ldltr sw%ddp w%ddp h%ddp %ddpi nrml long port finger qwerty/v/v dpad/v winConfig={ mBounds=Rect(0, 0 - %d, %d) mAppBounds=Rect(0, 0 - %d, %d)",
		g.swdp, g.wdp, g.hdp, g.dpi, g.w, g.h, g.w, g.appH)
	if api >= 31 {
		cfg += fmt.Sprintf(" mMaxBounds=Rect(0, 0 - %d, %d)", g.w, g.h)
	}
	cfg += " mWindowingMode=fullscreen mDisplayWindowingMode=fullscreen mActivityType=undefined mAlwaysOnTop=undefined mRotation=ROTATION_0}"
	if api >= 31 {
		cfg += " as.2 s.70 fontWeightAdjustment=0}"
	} else {
		cfg += " s.8}"
	}
	fmt.Fprintln(w, "WINDOW MANAGER WINDOWS (dumpsys window windows)")
	for i, x := range wins {
		fmt.Fprintf(w, "  Window #%d Window{%s u0 %s}:\n", len(wins)-1-i, x.hash, x.name)
		sess := fmt.Sprintf("u0a%d", x.uid%100000-10000)
		if x.uid < 10000 {
			sess = itoa(x.uid) // system uids print bare ("Session{c22240e 423:1000}")
		}
		fmt.Fprintf(w, "    mDisplayId=0 rootTaskId=1 mSession=Session{%s %d:%s} mClient=android.os.BinderProxy@%s\n", rev(x.hash), x.pid, sess, x.hash)
		fmt.Fprintf(w, "    mOwnerUid=%d showForAllUsers=%t package=%s appop=NONE\n", x.uid, x.rec == "", x.pkg)
		if x.rec != "" {
			fmt.Fprintf(w, "    mActivityRecord=%s\n", x.rec)
		}
		fmt.Fprintf(w, "    mViewVisibility=0x%x mHaveFrame=true mObscured=false\n", map[bool]int{true: 0, false: 8}[x.visible])
		fmt.Fprintf(w, "    mFullConfiguration=%s\n", cfg)
		fmt.Fprintf(w, "    mHasSurface=%t isReadyForDisplay()=%t mWindowRemovalAllowed=false\n", x.visible, x.visible)
		fmt.Fprintf(w, "    mFrame=%s last=%s\n", x.frame, x.frame)
		fmt.Fprintf(w, "    isOnScreen=%t\n", x.visible)
		fmt.Fprintf(w, "    isVisible=%t\n", x.visible)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mGlobalConfiguration=%s\n", cfg)
	fmt.Fprintln(w, "  mHasPermanentDpad=false")
	fmt.Fprintln(w, "  mTopFocusedDisplayId=0")
	target := "null"
	if cf := f.currentFocus(api); cf != "null" {
		target = cf
	}
	if api >= 31 {
		fmt.Fprintf(w, "  imeLayeringTarget in display# 0 %s\n", target)
		fmt.Fprintf(w, "  imeInputTarget in display# 0 %s\n", target)
		fmt.Fprintf(w, "  imeControlTarget in display# 0 %s\n", target)
	} else {
		fmt.Fprintf(w, "  mInputMethodTarget in display# 0 %s\n", target)
		fmt.Fprintln(w, "  inputMethodControlTarget in display# 0 null")
	}
	fmt.Fprintln(w, "  mInTouchMode=true")
	fmt.Fprintln(w, "  mSystemBooted=true mDisplayEnabled=true")
	fmt.Fprintln(w, "  mDisplayFrozen=false windows=0 client=false apps=0  mRotation=0  mLastOrientation=5")
	fmt.Fprintln(w, " waitingForConfig=false")
	fmt.Fprintln(w, "  Animation settings: disabled=false window=1.0 transition=1.0 animator=1.0")
}

// uidOfLocked is uidOf for callers holding d.mu: it uses the running process's
// uid (known to the activity manager), else the fixed system uids.
func (d *Device) uidOfLocked(pkg string) int {
	if p, ok := d.am.procs[pkg]; ok && p.uid != 0 {
		return p.uid
	}
	switch pkg {
	case homePackage:
		return homeUID
	case systemUIPackage:
		return systemUIUID
	}
	return 10000
}

// --- dumpsys activity -----------------------------------------------------------------

// dumpsysActivity: `dumpsys activity activities|top|services [PKG]|processes`.
func dumpsysActivity(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "activities", "a":
		d.dumpActivities(c.Stdout)
	case "top":
		d.dumpActivityTop(c.Stdout)
	case "services", "s":
		pkg := ""
		if len(args) > 1 {
			pkg = args[1]
		}
		d.dumpServices(c.Stdout, pkg)
	case "processes", "p":
		d.dumpProcesses(c.Stdout)
	case "":
		d.dumpActivities(c.Stdout)
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpServices(c.Stdout, "")
		fmt.Fprintln(c.Stdout, dumpSeparator)
		d.dumpProcesses(c.Stdout)
	default:
		d.dumpActivities(c.Stdout)
	}
	return 0
}

func procRecord(p *amProcess) string {
	return fmt.Sprintf("ProcessRecord{%x %d:%s/u0a%d}", 0x7863d74+p.pid, p.pid, p.pkg, p.uid-10000)
}

// dumpActivities prints `dumpsys activity activities`. API 31+: the Task form of
// fixtures/captures/dumpsys-activity-activities/api34.txt (topResumedActivity=
// in the resumed task, "Resumed activities in task display areas", "ResumedActivity:").
// API 29-30: the ActivityStack form of an Android 10 device quoted in SOURCES.md
// ("Stack #N: type=… mode=fullscreen", "* TaskRecord{…}", "mResumedActivity: …").
func (d *Device) dumpActivities(w io.Writer) {
	api := d.APILevel()
	g := d.geom()
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	f := d.focusLocked()
	fmt.Fprintln(w, "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)")
	fmt.Fprintln(w, "Display #0 (activities from top to bottom):")
	top := d.am.topLocked()
	topTask := d.am.tasks[0]
	topRec := recordString(top.pkg, top.cls, top.hash, topTask.id)
	for ti, t := range d.am.tasks {
		typ := "standard"
		if t.home {
			typ = "home"
		}
		visible := ti == 0
		if api >= 31 {
			label := "A=" + itoa(d.uidOfLocked(t.pkg)) + ":" + t.pkg
			if t.home {
				label = "I=" + shortComponent(t.pkg, t.root)
			}
			fmt.Fprintf(w, "  * Task{%s #%d type=%s %s U=0 visible=%t visibleRequested=%t mode=fullscreen translucent=false sz=%d}\n",
				t.hash, t.id, typ, label, visible, visible, len(t.records))
			fmt.Fprintln(w, "    isSleeping=false")
			if ti == 0 && f.awake {
				fmt.Fprintf(w, "    topResumedActivity=%s\n", topRec)
			}
		} else {
			fmt.Fprintln(w)
			fmt.Fprintf(w, "  Stack #%d: type=%s mode=fullscreen\n", t.id, typ)
			fmt.Fprintln(w, "  isSleeping=false")
			fmt.Fprintln(w, "  mBounds=Rect(0, 0 - 0, 0)")
			fmt.Fprintln(w)
			fmt.Fprintf(w, "    Task id #%d\n", t.id)
			fmt.Fprintln(w, "    mBounds=Rect(0, 0 - 0, 0)")
			label := "A=" + t.pkg
			if t.home {
				label = "I=" + shortComponent(t.pkg, t.root)
			}
			fmt.Fprintf(w, "    * TaskRecord{%s #%d %s U=0 StackId=%d sz=%d}\n", t.hash, t.id, label, t.id, len(t.records))
			fmt.Fprintf(w, "      intent={%s}\n", strings.TrimSuffix(strings.TrimPrefix(t.intent.String(), "Intent { "), " }"))
		}
		proc := d.am.procs[t.pkg]
		for j := len(t.records) - 1; j >= 0; j-- {
			r := t.records[j]
			rs := recordString(r.pkg, r.cls, r.hash, t.id)
			indent := "    "
			if api < 31 {
				indent = "      "
			}
			if api >= 31 {
				fmt.Fprintf(w, "%s* Hist  #%d: %s\n", indent, j, rs)
			} else {
				fmt.Fprintf(w, "%s* Hist #%d: %s\n", indent, j, rs)
			}
			in := indent + "    "
			fmt.Fprintf(w, "%spackageName=%s processName=%s\n", in, r.pkg, r.pkg)
			if proc != nil {
				fmt.Fprintf(w, "%sapp=%s\n", in, procRecord(proc))
			}
			if j == 0 {
				fmt.Fprintf(w, "%s%s\n", in, t.intent.String())
			} else {
				fmt.Fprintf(w, "%sIntent { cmp=%s }\n", in, shortComponent(r.pkg, r.cls))
			}
			fmt.Fprintf(w, "%smActivityComponent=%s\n", in, shortComponent(r.pkg, r.cls))
			state := "STOPPED"
			if ti == 0 && j == len(t.records)-1 {
				state = "RESUMED"
			}
			fmt.Fprintf(w, "%sstate=%s delayedResume=false finishing=false\n", in, state)
			idle := !d.am.animatingLocked(r, now)
			fmt.Fprintf(w, "%skeysPaused=false inHistory=true idle=%t\n", in, idle)
			fmt.Fprintf(w, "%snowVisible=%t lastVisibleTime=-%s\n", in, state == "RESUMED", durShort(now.Sub(r.shownAt)))
		}
		if api < 31 {
			if ti == 0 && f.awake {
				fmt.Fprintf(w, "    mResumedActivity: %s\n", topRec)
			}
		}
		fmt.Fprintln(w)
	}
	if api >= 31 {
		fmt.Fprintln(w, "  Resumed activities in task display areas (from top to bottom):")
		fmt.Fprintf(w, "    Resumed: %s\n", topRec)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  ResumedActivity: %s\n", topRec)
	fmt.Fprintln(w)
	if api >= 31 {
		fmt.Fprintln(w, "ActivityTaskSupervisor state:")
		fmt.Fprintf(w, "  topDisplayFocusedRootTask=Task{%s #%d type=%s}\n", topTask.hash, topTask.id, map[bool]string{true: "home", false: "standard"}[topTask.home])
	} else {
		fmt.Fprintln(w, "ActivityStackSupervisor state:")
	}
	d.writeDisplayContent(w, api, g, f)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  KeyguardController:")
	fmt.Fprintf(w, "    mKeyguardShowing=%t\n", f.keyguard)
	fmt.Fprintln(w, "    mAodShowing=false")
	fmt.Fprintln(w, "    mKeyguardGoingAway=false")
	fmt.Fprintln(w, "    mDismissalRequested=false")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  mCurTaskIdForUser={0=%d}\n", d.am.nextTask-1)
}

func durShort(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	ms := int64(d / time.Millisecond)
	s, ms := ms/1000, ms%1000
	m, s := s/60, s%60
	if m > 0 {
		return fmt.Sprintf("%dm%ds%dms", m, s, ms)
	}
	return fmt.Sprintf("%ds%dms", s, ms)
}

// dumpActivityTop prints `dumpsys activity top`: "TASK pkg id=N userId=0" and
// "  ACTIVITY pkg/.Act hash pid=N" for the resumed activity (the line adbutils
// parses: ACTIVITY pkg/act … pid=N; header "ACTIVITY MANAGER TOP ACTIVITIES"
// from ActivityManagerService.dumpActivity). The activity's view hierarchy
// is not dumped.
func (d *Device) dumpActivityTop(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.am.tasks[0]
	r := t.records[len(t.records)-1]
	pid := 0
	if p, ok := d.am.procs[r.pkg]; ok {
		pid = p.pid
	}
	fmt.Fprintf(w, "TASK %s id=%d userId=0\n", t.pkg, t.id)
	fmt.Fprintf(w, "  ACTIVITY %s %s pid=%d\n", shortComponent(r.pkg, r.cls), r.hash, pid)
}

// dumpServices prints `dumpsys activity services [PKG]` for the foreground
// services the simulator runs (the Appium Settings helper's): a ServiceRecord
// block with "isForeground=true foregroundId=N" (line forms from device
// captures quoted in SOURCES.md); nothing running → "  (nothing)".
func (d *Device) dumpServices(w io.Writer, pkg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(w, "ACTIVITY MANAGER SERVICES (dumpsys activity services)")
	var pkgs []string
	for p := range d.am.fgService {
		if pkg == "" || p == pkg {
			pkgs = append(pkgs, p)
		}
	}
	sort.Strings(pkgs)
	if len(pkgs) == 0 {
		fmt.Fprintln(w, "  (nothing)")
		return
	}
	fmt.Fprintln(w, "  User 0 active services:")
	for i, p := range pkgs {
		cls := d.am.fgService[p]
		comp := shortComponent(p, cls)
		fmt.Fprintf(w, "  * ServiceRecord{%x u0 %s}\n", 0x9f2f9f2+i, comp)
		fmt.Fprintf(w, "    intent={cmp=%s}\n", comp)
		fmt.Fprintf(w, "    packageName=%s\n", p)
		fmt.Fprintf(w, "    processName=%s\n", p)
		if proc, ok := d.am.procs[p]; ok {
			fmt.Fprintf(w, "    app=%s\n", procRecord(proc))
		}
		fmt.Fprintln(w, "    isForeground=true foregroundId=1 types=0x00000000")
	}
}

// dumpProcesses prints the "ACTIVITY MANAGER RUNNING PROCESSES (dumpsys
// activity processes)" header and one "*APP* UID N ProcessRecord{…}" line per
// app process.
func (d *Device) dumpProcesses(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintln(w, "ACTIVITY MANAGER RUNNING PROCESSES (dumpsys activity processes)")
	procs := d.am.sortedProcsLocked()
	for _, p := range procs {
		fmt.Fprintf(w, "  *APP* UID %d %s\n", p.uid, procRecord(p))
		fmt.Fprintf(w, "    user #0 uid=%d\n", p.uid)
		fmt.Fprintf(w, "    pid=%d\n", p.pid)
	}
}

func (am *activityManager) sortedProcsLocked() []*amProcess {
	var ps []*amProcess
	for _, p := range am.procs {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	return ps
}
