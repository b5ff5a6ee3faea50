package android

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

// hwuiRing is the 120 frames HWUI keeps per window (RingBuffer<FrameInfo, 120>
// in JankTracker); a literal here, so a change of the model's constant fails.
const hwuiRing = 120

// The header of an API 33+ device, verbatim from an emulator capture (index
// id 62456845039, see SOURCES.md); note the trailing comma.
const header23 = "Flags,FrameTimelineVsyncId,IntendedVsync,Vsync,InputEventId,HandleInputStart,AnimationStart,PerformTraversalsStart,DrawStart,FrameDeadline,FrameInterval,FrameStartTime,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,GpuCompleted,SwapBuffersCompleted,DisplayPresentTime,CommandSubmissionCompleted,"

// fsWindow is one window's block of `dumpsys gfxinfo PKG framestats`.
type fsWindow struct {
	name   string            // the "Window: " value
	stats  map[string]string // "Total frames rendered" -> "3"
	header string            // the PROFILEDATA header line, as printed
	cols   []string          // header names
	rows   [][]int64
}

func (w fsWindow) col(t *testing.T, row []int64, name string) int64 {
	t.Helper()
	i := slices.Index(w.cols, name)
	if i < 0 {
		t.Fatalf("no column %s in %q", name, w.header)
	}
	return row[i]
}

func (w fsWindow) total(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(w.stats["Total frames rendered"])
	if err != nil {
		t.Fatalf("window %s: Total frames rendered %q", w.name, w.stats["Total frames rendered"])
	}
	return n
}

type fsDump struct {
	out      string
	uptimeMs int64
	process  map[string]string // the process block's "key: value" lines
	windows  []fsWindow
}

func (f fsDump) window(t *testing.T, cls string) fsWindow {
	t.Helper()
	for _, w := range f.windows {
		if w.name == amPkg+"/"+amPkg+cls {
			return w
		}
	}
	t.Fatalf("no window %s in:\n%s", cls, f.out)
	return fsWindow{}
}

// parseFS reads a framestats dump line by line, failing on any header or row
// that does not end with a comma or whose width differs from its header's.
func parseFS(t *testing.T, out string) fsDump {
	t.Helper()
	f := fsDump{out: out, process: map[string]string{}}
	var cur *fsWindow
	inProfile, inBlock, headerNext := false, false, false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "Uptime: "):
			f.uptimeMs, _ = strconv.ParseInt(strings.Fields(l)[1], 10, 64)
		case l == "Profile data in ms:":
			inProfile = true
		case strings.HasPrefix(l, "Window: "):
			f.windows = append(f.windows, fsWindow{name: strings.TrimPrefix(l, "Window: "), stats: map[string]string{}})
			cur = &f.windows[len(f.windows)-1]
		case l == "---PROFILEDATA---":
			if cur == nil {
				t.Fatalf("PROFILEDATA outside a window block:\n%s", out)
			}
			inBlock = !inBlock
			headerNext = inBlock
		case inBlock && headerNext:
			headerNext = false
			if !strings.HasSuffix(l, ",") {
				t.Fatalf("header does not end with a comma: %q", l)
			}
			cur.header = l
			cur.cols = strings.Split(strings.TrimSuffix(l, ","), ",")
		case inBlock:
			if !strings.HasSuffix(l, ",") {
				t.Fatalf("row does not end with a comma: %q", l)
			}
			cells := strings.Split(strings.TrimSuffix(l, ","), ",")
			if len(cells) != len(cur.cols) {
				t.Fatalf("row has %d values, header %d columns:\n%s\n%s", len(cells), len(cur.cols), cur.header, l)
			}
			row := make([]int64, len(cells))
			for i, c := range cells {
				v, err := strconv.ParseInt(c, 10, 64)
				if err != nil {
					t.Fatalf("row value %q: %v", c, err)
				}
				row[i] = v
			}
			cur.rows = append(cur.rows, row)
		default:
			k, v, ok := strings.Cut(l, ": ")
			if !ok {
				continue
			}
			if cur != nil {
				cur.stats[k] = v
			} else if !inProfile {
				f.process[k] = v
			}
		}
	}
	if inBlock {
		t.Fatalf("unterminated PROFILEDATA block:\n%s", out)
	}
	return f
}

func fsOut(t *testing.T, d *Device, args string) fsDump {
	t.Helper()
	return parseFS(t, amOut(t, d, "dumpsys gfxinfo "+amPkg+" "+args))
}

// newestCompleted is the largest FrameCompleted of a window's rows.
func newestCompleted(t *testing.T, w fsWindow) int64 {
	t.Helper()
	var m int64
	for _, r := range w.rows {
		m = max(m, w.col(t, r, "FrameCompleted"))
	}
	return m
}

// checkRows asserts what every row must satisfy: on the 60 Hz vsync grid,
// oldest first, stages in pipeline order, none after FrameCompleted, and
// FrameCompleted not after the dump's Uptime.
func checkRows(t *testing.T, f fsDump, w fsWindow) {
	t.Helper()
	pipeline := []string{"IntendedVsync", "Vsync", "HandleInputStart", "AnimationStart",
		"PerformTraversalsStart", "DrawStart", "SyncQueued", "SyncStart", "IssueDrawCommandsStart",
		"SwapBuffers", "GpuCompleted", "FrameCompleted"}
	var prevIV, prevFC int64
	for i, r := range w.rows {
		iv, fc := w.col(t, r, "IntendedVsync"), w.col(t, r, "FrameCompleted")
		if iv%vsyncPeriod != 0 {
			t.Errorf("row %d: IntendedVsync %d is not on the 16666666 ns grid", i, iv)
		}
		if iv <= prevIV || fc <= prevFC {
			t.Errorf("row %d: not after the previous row (IntendedVsync %d after %d, FrameCompleted %d after %d)", i, iv, prevIV, fc, prevFC)
		}
		prevIV, prevFC = iv, fc
		if fc/1_000_000 > f.uptimeMs {
			t.Errorf("row %d: FrameCompleted %d ns is after Uptime %d ms", i, fc, f.uptimeMs)
		}
		for j := 1; j < len(pipeline); j++ {
			if slices.Contains(w.cols, pipeline[j]) && w.col(t, r, pipeline[j-1]) > w.col(t, r, pipeline[j]) {
				t.Errorf("row %d: %s after %s", i, pipeline[j-1], pipeline[j])
			}
		}
		for _, c := range []string{"SwapBuffersCompleted", "CommandSubmissionCompleted"} {
			if slices.Contains(w.cols, c) {
				if v := w.col(t, r, c); v < w.col(t, r, "SwapBuffers") || v > fc {
					t.Errorf("row %d: %s %d outside SwapBuffers..FrameCompleted", i, c, v)
				}
			}
		}
		if flags := w.col(t, r, "Flags"); flags != 0 && flags != 1 {
			t.Errorf("row %d: Flags %d", i, flags)
		}
	}
}

// atUptime turns a device-uptime ns value (Stats since, row timestamps) back
// into the simulated clock's time.
func atUptime(d *Device, ns int64) time.Time {
	return d.started.Add(time.Duration(ns) - bootUptimeOffset)
}

func TestFramestatsRowsAfterStart(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")

	// At the instant of the start nothing has completed yet: the window
	// prints its counters and the column names, no row.
	f := fsOut(t, d, "framestats")
	w := f.window(t, ".HomeActivity")
	if w.total(t) != 0 || len(w.rows) != 0 || w.header != header23 {
		t.Fatalf("window before its first frame: total %d, %d rows, header %q\n%s", w.total(t), len(w.rows), w.header, f.out)
	}
	if f.process["Total frames rendered"] != "0" {
		t.Fatalf("process counted %s frames before any completed", f.process["Total frames rendered"])
	}

	clk.Advance(200 * time.Millisecond)
	f = fsOut(t, d, "framestats")
	w = f.window(t, ".HomeActivity")
	checkRows(t, f, w)
	if len(w.rows) != 3 || w.total(t) != 3 || f.process["Total frames rendered"] != "3" {
		t.Fatalf("after the launch: %d rows, window total %d, process total %s\n%s", len(w.rows), w.total(t), f.process["Total frames rendered"], f.out)
	}
	if w.stats["Janky frames"] != "1 (33.33%)" || w.stats["Number Slow UI thread"] != "1" {
		t.Errorf("window counters: %v", w.stats)
	}
	// The first frame after the window was shown carries Flags=1 and is the
	// slow one (48 ms bucket); the next two are 9 ms frames.
	for i, want := range []struct{ flags, ms int64 }{{1, 48}, {0, 9}, {0, 9}} {
		r := w.rows[i]
		ms := (w.col(t, r, "FrameCompleted") - w.col(t, r, "IntendedVsync")) / 1_000_000
		if w.col(t, r, "Flags") != want.flags || ms != want.ms {
			t.Errorf("row %d: Flags %d, %d ms; want %d, %d ms", i, w.col(t, r, "Flags"), ms, want.flags, want.ms)
		}
	}
	// FrameStartTime and FrameInterval sit swapped under their names, as on
	// real devices (the names array and the enum disagree).
	if r := w.rows[1]; w.col(t, r, "FrameStartTime") != vsyncPeriod || w.col(t, r, "FrameInterval") <= w.col(t, r, "IntendedVsync") {
		t.Errorf("FrameInterval/FrameStartTime columns: %v", r)
	}

	// No new frame: rows stay, and the time since the newest frame grows
	// with the clock (the daemon's "already quiet for" reading).
	tl1, ok := parse.ParseFramestats(f.out)
	since1, ok1 := tl1.SinceLastFrame()
	age1 := f.uptimeMs - newestCompleted(t, w)/1_000_000
	clk.Advance(5 * time.Second)
	f2 := fsOut(t, d, "framestats")
	w2 := f2.window(t, ".HomeActivity")
	if !slices.EqualFunc(w.rows, w2.rows, slices.Equal) {
		t.Fatalf("rows changed without new frames:\n%v\n%v", w.rows, w2.rows)
	}
	if age2 := f2.uptimeMs - newestCompleted(t, w2)/1_000_000; age2-age1 != 5000 {
		t.Errorf("age since the newest frame: %d ms then %d ms, want +5000", age1, age2)
	}
	tl2, ok2 := parse.ParseFramestats(f2.out)
	since2, ok3 := tl2.SinceLastFrame()
	if !ok || !ok1 || !ok2 || !ok3 || tl2.Frames != 3 || tl2.Windows != 1 || since2-since1 != 5*time.Second {
		t.Errorf("parse.ParseFramestats: %+v %v -> %+v %v", tl1, since1, tl2, since2)
	}
}

func TestFramestatsNeverIdleKeepsAddingRows(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.SpinnerActivity")
	clk.Advance(time.Second)
	f := fsOut(t, d, "framestats")
	w := f.window(t, ".SpinnerActivity")
	checkRows(t, f, w)
	if n := w.total(t); n < 55 || n > hwuiRing || len(w.rows) != n {
		t.Fatalf("after 1 s: window total %d, %d rows", n, len(w.rows))
	}
	prevNewest := newestCompleted(t, w)
	for i := 0; i < 3; i++ {
		clk.Advance(time.Second)
		f = fsOut(t, d, "framestats")
		w = f.window(t, ".SpinnerActivity")
		checkRows(t, f, w)
		if len(w.rows) > hwuiRing {
			t.Fatalf("%d rows: the ring holds 120", len(w.rows))
		}
		newest := newestCompleted(t, w)
		// A frame every vsync: the newest completed within one vsync plus its
		// own 7.5 ms before the dump.
		if age := f.uptimeMs*1_000_000 - newest; age < 0 || age > vsyncPeriod+frameAnim.totalNs()+1_000_000 {
			t.Errorf("newest frame %d ns before the dump", age)
		}
		if newest-prevNewest < 900_000_000 {
			t.Errorf("newest FrameCompleted moved %d ns in 1 s", newest-prevNewest)
		}
		prevNewest = newest
		if i >= 1 && w.total(t) <= hwuiRing {
			t.Errorf("window total %d after %d s: more than the ring holds", w.total(t), i+2)
		}
	}
	if len(w.rows) != hwuiRing {
		t.Fatalf("%d rows after 4 s of animation, want the full ring of 120", len(w.rows))
	}
	for i := 1; i < len(w.rows); i++ {
		if d := w.col(t, w.rows[i], "IntendedVsync") - w.col(t, w.rows[i-1], "IntendedVsync"); d != vsyncPeriod {
			t.Fatalf("rows %d..%d are %d ns apart: an animating window draws every vsync", i-1, i, d)
		}
	}
	if f.process["Total frames rendered"] != w.stats["Total frames rendered"] {
		t.Errorf("process total %s, window total %s (one window)", f.process["Total frames rendered"], w.stats["Total frames rendered"])
	}
}

func TestFramestatsHeaderPerAPI(t *testing.T) {
	header17 := "Flags,IntendedVsync,Vsync,OldestInputEvent,NewestInputEvent,HandleInputStart,AnimationStart,PerformTraversalsStart,DrawStart,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,GpuCompleted,"
	header22 := strings.TrimSuffix(header23, "CommandSubmissionCompleted,")
	for _, tc := range []struct {
		api    int
		header string
		cols   int
	}{{29, header17, 17}, {30, header17, 17}, {31, header22, 22}, {32, header22, 22}, {33, header23, 23}, {34, header23, 23}} {
		t.Run("api"+strconv.Itoa(tc.api), func(t *testing.T) {
			d, clk := newAMDevice(t, tc.api)
			amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
			clk.Advance(time.Second)
			f := fsOut(t, d, "framestats")
			w := f.window(t, ".HomeActivity")
			if w.header != tc.header || len(w.cols) != tc.cols {
				t.Fatalf("header (%d columns):\n%s\nwant:\n%s", len(w.cols), w.header, tc.header)
			}
			if len(w.rows) != 3 {
				t.Fatalf("%d rows", len(w.rows))
			}
			checkRows(t, f, w)
			r := w.rows[2]
			if tc.api <= 30 {
				if w.col(t, r, "OldestInputEvent") != 9223372036854775807 || w.col(t, r, "NewestInputEvent") != 0 {
					t.Errorf("no-input markers: %v", r)
				}
			} else if w.col(t, r, "InputEventId") != 0 || w.col(t, r, "FrameTimelineVsyncId") <= w.col(t, w.rows[1], "FrameTimelineVsyncId") {
				t.Errorf("InputEventId / FrameTimelineVsyncId: %v", r)
			}
			_, legacy := w.stats["Janky frames (legacy)"]
			if legacy != (tc.api >= 31) {
				t.Errorf("window block Janky frames (legacy) present=%t on API %d", legacy, tc.api)
			}
		})
	}
}

// The block layout between a window's line and the next one follows HWUI's
// dprintf sequence: ProfileData::dump's lines, 3 empty lines, the
// PROFILEDATA block, 2 empty lines.
func TestFramestatsBlockLayoutTwoWindows(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(time.Second)
	amSh(t, d, "input tap 200 550") // the Open button -> DetailActivity (animates 2 s)
	clk.Advance(500 * time.Millisecond)
	out := amOut(t, d, "dumpsys gfxinfo "+amPkg+" framestats")
	block := func(cls string) string {
		return `\t` + regexp.QuoteMeta(amPkg+"/"+amPkg+cls) + `/android\.view\.ViewRootImpl@[0-9a-f]+ \(visibility=0\)\n` +
			`Window: ` + regexp.QuoteMeta(amPkg+"/"+amPkg+cls) + `\n` +
			`Stats since: \d+ns\nTotal frames rendered: \d+\n(?:[^\n]+\n)*?GPU HISTOGRAM: [^\n]+\n` +
			`\n\n\n---PROFILEDATA---\n` + regexp.QuoteMeta(header23) + `(?:\n(?:-?\d+,){23})*\n---PROFILEDATA---\n\n\n`
	}
	re := regexp.MustCompile(`\nProfile data in ms:\n\n` + block(".HomeActivity") + block(".DetailActivity") + `View hierarchy:\n`)
	if !re.MatchString(out) {
		t.Fatalf("layout does not match %s:\n%s", re, out)
	}
	f := parseFS(t, out)
	home, detail := f.window(t, ".HomeActivity"), f.window(t, ".DetailActivity")
	checkRows(t, f, home)
	checkRows(t, f, detail)
	procTotal, _ := strconv.Atoi(f.process["Total frames rendered"])
	if home.total(t)+detail.total(t) != procTotal || len(home.rows) != 3 {
		t.Fatalf("home %d + detail %d != process %d; home rows %d", home.total(t), detail.total(t), procTotal, len(home.rows))
	}
	if detail.stats["Stats since"] == f.process["Stats since"] {
		t.Errorf("Detail's counters start when its window started, not at the process start (%s)", detail.stats["Stats since"])
	}
	// Back to Home: its window is shown again, a new burst whose first frame
	// is flagged (and not janky: the process and window exist).
	amSh(t, d, "input keyevent 4")
	clk.Advance(500 * time.Millisecond)
	f = fsOut(t, d, "framestats")
	home = f.window(t, ".HomeActivity")
	checkRows(t, f, home)
	if len(home.rows) != 6 || home.col(t, home.rows[3], "Flags") != 1 ||
		home.col(t, home.rows[3], "FrameCompleted")-home.col(t, home.rows[3], "IntendedVsync") != frameLaunch.totalNs() {
		t.Fatalf("home rows after back: %v", home.rows)
	}
	if len(f.windows) != 1 {
		t.Errorf("finished Detail still has a block: %d windows", len(f.windows))
	}
}

// `dumpsys gfxinfo PKG` without framestats is the framestats output minus the
// window blocks: nothing else changes.
func TestGfxinfoPlainHasNoProfiledata(t *testing.T) {
	for _, api := range []int{30, 34} {
		d, clk := newAMDevice(t, api)
		amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
		clk.Advance(time.Second)
		amSh(t, d, "input tap 200 550")
		clk.Advance(700 * time.Millisecond)
		plain := amOut(t, d, "dumpsys gfxinfo "+amPkg)
		fs := amOut(t, d, "dumpsys gfxinfo "+amPkg+" framestats")
		if strings.Contains(plain, "PROFILEDATA") || strings.Contains(plain, "\nWindow: ") {
			t.Fatalf("plain output has framestats:\n%s", plain)
		}
		cut := regexp.MustCompile(`(?s)Window: [^\n]*\n.*?---PROFILEDATA---\n.*?---PROFILEDATA---\n\n\n`).ReplaceAllString(fs, "")
		if cut != plain {
			t.Fatalf("API %d: framestats minus its window blocks differs from the plain dump:\n%s\n---\n%s", api, cut, plain)
		}
		if strings.Count(fs, "---PROFILEDATA---") != 4 {
			t.Fatalf("want 2 blocks (Home, Detail):\n%s", fs)
		}
	}
}

// reset zeroes the counters ("Stats since" moves to the reset) but keeps the rows.
func TestFramestatsResetKeepsRows(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(time.Second)
	before := fsOut(t, d, "framestats").window(t, ".HomeActivity")
	resetAt := d.now()
	amSh(t, d, "dumpsys gfxinfo "+amPkg+" reset")
	clk.Advance(2 * time.Second)
	f := fsOut(t, d, "framestats")
	w := f.window(t, ".HomeActivity")
	for what, m := range map[string]map[string]string{"process": f.process, "window": w.stats} {
		ns, err := strconv.ParseInt(strings.TrimSuffix(m["Stats since"], "ns"), 10, 64)
		if err != nil || !atUptime(d, ns).Equal(resetAt) || m["Total frames rendered"] != "0" {
			t.Errorf("%s after reset: Stats since %s (reset at %s), total %s", what, m["Stats since"], resetAt, m["Total frames rendered"])
		}
	}
	if len(w.rows) != 3 || !slices.EqualFunc(before.rows, w.rows, slices.Equal) {
		t.Fatalf("rows after reset: %v, before %v", w.rows, before.rows)
	}
}

// The counters count a frame once its FrameCompleted has passed: the launch's
// three frames are not there at the instant of `am start`, and are once they
// completed. The start is 0.8 us after a vsync, so the frames are at vsyncs
// +1 (48.5 ms), +4 and +5 (9.5 ms each): done 65.2, 76.2 and 92.8 ms after
// the start. Same counter lines as TestGfxinfoFormat checks.
func TestGfxinfoCountersCountCompletedFrames(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	if n := amFrames(t, d, amPkg); n != 0 {
		t.Fatalf("%d frames at the instant of the start", n)
	}
	clk.Advance(70 * time.Millisecond)
	if n := amFrames(t, d, amPkg); n != 1 {
		t.Fatalf("%d frames 70 ms after the start: only the 48 ms first frame is done", n)
	}
	clk.Advance(30 * time.Millisecond)
	out := amOut(t, d, "dumpsys gfxinfo "+amPkg)
	for _, re := range []string{
		`(?m)^Total frames rendered: 3\nJanky frames: 1 \(33\.33%\)\nJanky frames \(legacy\): 1 \(33\.33%\)\n50th percentile: 9ms\n90th percentile: 48ms\n95th percentile: 48ms\n99th percentile: 48ms\n`,
		`(?m)^Number Missed Vsync: 0\nNumber High input latency: 0\nNumber Slow UI thread: 1\nNumber Slow bitmap uploads: 0\nNumber Slow issue draw commands: 0\nNumber Frame deadline missed: 1\n`,
		`(?m)^HISTOGRAM: 5ms=0 6ms=0 7ms=0 8ms=0 9ms=2 .* 48ms=1 53ms=0 .* 4950ms=0$`,
		`(?m)^GPU HISTOGRAM: 1ms=0 2ms=2 .* 25ms=0 4950ms=0$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("gfxinfo does not match %s:\n%s", re, out)
		}
	}
}
