package android

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// threadtimeRE is logprint.cpp's threadtime prefix: "MM-DD HH:MM:SS.mmm  PID  TID P TAG     : ".
var threadtimeRE = regexp.MustCompile(`^\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [ \d]{5} [ \d]{5} [VDIWEF] .{8,}?: `)

func crashProfile(after int, activity string) Profile {
	p := amProfile(34)
	p.Faults.AppCrash = &AppCrashFault{Package: amPkg, Activity: activity, Exception: "java.lang.IllegalStateException", Message: "boom", AfterMillis: after}
	return p
}

func newFaultDevice(t *testing.T, p Profile) (*Device, *amClock) {
	t.Helper()
	clk := &amClock{t: time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)}
	d, err := New(p, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return d, clk
}

func TestLogcatLaunchAndForceStopLines(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	amSh(t, d, "logcat -c")
	clk.Advance(time.Second)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(2 * time.Second)
	amSh(t, d, "am force-stop "+amPkg)
	out, errOut, code := amSh(t, d, "logcat -d -v threadtime")
	if code != 0 || errOut != "" {
		t.Fatalf("logcat: %d %q", code, errOut)
	}
	for _, want := range []string{
		"I ActivityTaskManager: START u0 {flg=0x10000000 cmp=" + amPkg + "/.HomeActivity} from uid 2000",
		"I ActivityManager: Start proc 1500:" + amPkg + "/u0a",
		" for next-top-activity {" + amPkg + "/" + amPkg + ".HomeActivity}",
		"I ActivityTaskManager: Displayed " + amPkg + "/.HomeActivity for user 0: +",
		"I ActivityManager: Force stopping " + amPkg + " appid=",
		"I ActivityManager: Killing 1500:" + amPkg + "/u0a",
		"(adj 0): stop " + amPkg + " due to from pid ",
		" 1500  1500 I om.example.shop: Late-enabling -Xcheck:jni", // the last 15 characters of the process name
	} {
		if !strings.Contains(out, want) {
			t.Errorf("logcat lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != "--------- beginning of system" && lines[0] != "--------- beginning of main" {
		t.Errorf("first line %q is no buffer divider", lines[0])
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "---------") {
			continue
		}
		if !threadtimeRE.MatchString(l) {
			t.Errorf("not threadtime: %q", l)
		}
		if !strings.HasPrefix(l, "11-21 08:00:0") {
			t.Errorf("timestamp not from the device clock: %q", l)
		}
	}
	// --pid keeps only the app's own lines; brief and time formats.
	pidOut, _, _ := amSh(t, d, "logcat -d --pid=1500 -v brief")
	if pidOut == "" || strings.Contains(pidOut, "ActivityManager") || !strings.Contains(pidOut, "I/om.example.shop( 1500): Late-enabling -Xcheck:jni") {
		t.Errorf("--pid brief:\n%s", pidOut)
	}
	timeOut, _, _ := amSh(t, d, "logcat -d -b system -v time -t 1")
	if !regexp.MustCompile(`^11-21 08:00:03\.000 I/ActivityManager\(  513\): Killing 1500:`).MatchString(timeOut) || strings.Count(timeOut, "\n") != 1 {
		t.Errorf("-b system -v time -t 1: %q", timeOut)
	}
	if o, _, _ := amSh(t, d, "logcat -d -b crash"); o != "" {
		t.Errorf("crash buffer not empty without a crash: %q", o)
	}
	if _, e, code := amSh(t, d, "logcat -d -b nosuch"); code != 1 || !strings.Contains(e, "unknown buffer") {
		t.Errorf("bad buffer: %d %q", code, e)
	}
	if _, e, code := amSh(t, d, "logcat -d -v nosuch"); code != 1 || !strings.Contains(e, "Invalid parameter") {
		t.Errorf("bad format: %d %q", code, e)
	}
	amSh(t, d, "logcat -c")
	if o, _, _ := amSh(t, d, "logcat -d"); o != "" {
		t.Errorf("after -c: %q", o)
	}
}

// TestLogcatStreamsNewEntries: without -d logcat keeps printing entries as
// the device writes them (-T 1 starts from the last one).
func TestLogcatStreamsNewEntries(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	pr, pw := newPipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- d.Shell(ctx, "logcat -T 1 -b system", nil, pw, pw) }()
	first := pr.waitFor(t, "START u0")
	if strings.Count(first, "\n") != 1 {
		t.Errorf("-T 1 printed %q", first)
	}
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	pr.waitFor(t, "Displayed "+amPkg+"/.HomeActivity")
	cancel()
	if code := <-done; code != 130 {
		t.Errorf("interrupted logcat exit %d", code)
	}
}

type syncBuf struct {
	ch  chan struct{}
	buf *lockedBuf
}

type lockedBuf struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newPipe() (*syncBuf, *syncBuf) {
	b := &syncBuf{ch: make(chan struct{}, 1024), buf: &lockedBuf{mu: make(chan struct{}, 1)}}
	return b, b
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.buf.mu <- struct{}{}
	s.buf.buf.Write(p)
	<-s.buf.mu
	select {
	case s.ch <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.buf.mu <- struct{}{}
	defer func() { <-s.buf.mu }()
	return s.buf.buf.String()
}

func (s *syncBuf) waitFor(t *testing.T, sub string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if out := s.String(); strings.Contains(out, sub) {
			return out
		}
		select {
		case <-s.ch:
		case <-timeout:
			t.Fatalf("no %q in %q", sub, s.String())
		}
	}
}

func TestScreencapPNGAndRaw(t *testing.T) {
	p := amProfile(34)
	p.DisplayWidth, p.DisplayHeight, p.Density = 720, 1280, 320
	d, _ := newFaultDevice(t, p)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	out, e, code := amSh(t, d, "screencap -p")
	if code != 0 || e != "" {
		t.Fatalf("screencap -p: %d %q", code, e)
	}
	img, err := png.Decode(strings.NewReader(out))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 720 || b.Dy() != 1280 {
		t.Fatalf("png %v, want 720x1280 (wm size)", b)
	}
	// The "Open" button is filled and its text drawn in the text colour.
	r, g, b, _ := img.At(110, 510).RGBA()
	if r>>8 != 0xe8 || g>>8 != 0xea || b>>8 != 0xed {
		t.Errorf("clickable fill at (110,510) = %x %x %x", r>>8, g>>8, b>>8)
	}
	dark := 0
	for y := 500; y < 600; y++ {
		for x := 100; x < 300; x++ {
			if r, _, _, _ := img.At(x, y).RGBA(); r>>8 == 0x20 {
				dark++
			}
		}
	}
	if dark < 50 {
		t.Errorf("button text not drawn (%d text pixels)", dark)
	}
	raw, _, _ := amSh(t, d, "screencap")
	if len(raw) != 16+720*1280*4 {
		t.Fatalf("raw length %d", len(raw))
	}
	hdr := []byte(raw[:16])
	if w, h, f, cs := binary.LittleEndian.Uint32(hdr), binary.LittleEndian.Uint32(hdr[4:]), binary.LittleEndian.Uint32(hdr[8:]), binary.LittleEndian.Uint32(hdr[12:]); w != 720 || h != 1280 || f != 1 || cs != 1 {
		t.Errorf("raw header %d %d %d %d", w, h, f, cs)
	}
	px := 16 + (510*720+110)*4
	if got := []byte(raw[px : px+4]); !bytes.Equal(got, []byte{0xe8, 0xea, 0xed, 0xff}) {
		t.Errorf("raw pixel %x", got)
	}
	if _, _, code := amSh(t, d, "screencap -p /sdcard/s.png"); code != 0 {
		t.Fatal("screencap to file failed")
	}
	f, err := d.ReadFile("/sdcard/s.png")
	if err != nil || !bytes.HasPrefix(f, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("file: %v %q", err, f[:8])
	}
	if _, e, code := amSh(t, d, "screencap -x"); code != 1 || !strings.HasPrefix(e, "usage: screencap") {
		t.Errorf("bad option: %d %q", code, e)
	}
	// API 27 and earlier: no colour-space word.
	old := amProfile(27)
	old.DisplayWidth, old.DisplayHeight = 10, 20
	d27, _ := newFaultDevice(t, old)
	if raw, _, _ := amSh(t, d27, "screencap"); len(raw) != 12+10*20*4 {
		t.Errorf("API 27 raw length %d", len(raw))
	}
}

// The PNG of a screen is encoded once: the same screen again gives the same
// bytes, and a changed screen a new encoding of what it now shows.
func TestScreencapPNGFollowsTheScreen(t *testing.T) {
	p := amProfile(34)
	p.DisplayWidth, p.DisplayHeight, p.Density = 360, 640, 160
	d, _ := newFaultDevice(t, p)
	decoded := func(b []byte) image.Image {
		t.Helper()
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		return img
	}
	samePixels := func(a image.Image, b *image.Paletted) bool {
		for y := b.Rect.Min.Y; y < b.Rect.Max.Y; y++ {
			for x := b.Rect.Min.X; x < b.Rect.Max.X; x++ {
				r1, g1, b1, a1 := a.At(x, y).RGBA()
				r2, g2, b2, a2 := b.At(x, y).RGBA()
				if r1 != r2 || g1 != g2 || b1 != b2 || a1 != a2 {
					return false
				}
			}
		}
		return true
	}
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	first, err := d.ScreenshotPNG()
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.ScreenshotPNG()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, again) || !samePixels(decoded(again), d.Screenshot()) {
		t.Fatal("the same screen gave a different PNG")
	}
	amSh(t, d, "input keyevent KEYCODE_SLEEP") // the display off: a black screen
	off, err := d.ScreenshotPNG()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(off, first) {
		t.Fatal("the PNG did not follow the screen turning off")
	}
	if img := d.Screenshot(); !samePixels(decoded(off), img) {
		t.Fatal("the PNG after the change is not the screen")
	}
}

// TestScreenshotPNGDrawsIntoOneImage: comparing an unchanged screen (a
// recording does it 5 times a second) draws into the image kept for it,
// not into a new 2.6 MB one each time (1080x2400, one byte a pixel).
func TestScreenshotPNGDrawsIntoOneImage(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	first, err := d.ScreenshotPNG()
	if err != nil {
		t.Fatal(err)
	}
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		if b, err := d.ScreenshotPNG(); err != nil || !bytes.Equal(b, first) {
			t.Fatalf("the same screen gave another PNG (%v)", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 64<<10 {
		t.Fatalf("%d bytes allocated per comparison of an unchanged 1080x2400 screen, want under 64 KiB", per)
	}
}

// TestScreenshotPNGKeepsRecentScreens: a screen shown a moment ago (the
// app's, after the launcher's) is recognised by its drawing: neither drawn
// nor encoded again, its kept PNG returned; and that PNG is the screen.
func TestScreenshotPNGKeepsRecentScreens(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	shot := func() []byte {
		t.Helper()
		b, err := d.ScreenshotPNG()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	app := shot()
	amSh(t, d, "input keyevent KEYCODE_HOME")
	if home := shot(); bytes.Equal(home, app) {
		t.Fatal("the launcher gave the app's PNG")
	}
	// Poison the image a new screen is drawn into: a screen recognised is
	// not drawn, so it stays poisoned.
	d.png.mu.Lock()
	for i := range d.png.scratch.Pix {
		d.png.scratch.Pix[i] = 0xff
	}
	d.png.mu.Unlock()
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	again := shot()
	if &again[0] != &app[0] {
		t.Error("the app's screen was encoded again")
	}
	d.png.mu.Lock()
	drawn := d.png.scratch.Pix[0] != 0xff
	d.png.mu.Unlock()
	if drawn {
		t.Error("the app's screen was drawn again")
	}
	img, err := png.Decode(bytes.NewReader(again))
	if err != nil {
		t.Fatal(err)
	}
	want := d.Screenshot()
	for y := 0; y < want.Rect.Dy(); y += 7 {
		for x := 0; x < want.Rect.Dx(); x += 7 {
			r1, g1, b1, _ := img.At(x, y).RGBA()
			r2, g2, b2, _ := want.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				t.Fatalf("the kept PNG differs from the screen at %d,%d", x, y)
			}
		}
	}
}

// TestScreenshotPNGEightBitIndices: the screen's PNG has 8-bit palette
// indices (IHDR bit depth 8, colour type 3), which image/png writes a row
// at a time; with the 9-colour palette itself it wrote 4-bit ones, a pixel
// at a time.
func TestScreenshotPNGEightBitIndices(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	b, err := d.ScreenshotPNG()
	if err != nil {
		t.Fatal(err)
	}
	// Signature (8), IHDR length and type (8), width, height (8), then bit
	// depth and colour type.
	if len(b) < 26 || string(b[12:16]) != "IHDR" || b[24] != 8 || b[25] != 3 {
		t.Fatalf("PNG header %x: want IHDR bit depth 8, colour type 3 (palette)", b[:min(len(b), 26)])
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want := d.Screenshot()
	for y := 0; y < want.Rect.Dy(); y += 5 {
		for x := 0; x < want.Rect.Dx(); x += 5 {
			r1, g1, b1, _ := img.At(x, y).RGBA()
			r2, g2, b2, _ := want.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				t.Fatalf("the PNG differs from the screen at %d,%d", x, y)
			}
		}
	}
}

// BenchmarkScreenshotPNGEncode encodes the default profile's 1080x2400
// app screen as PNG both ways, side by side: with the 9-colour palette
// itself (4-bit indices) and as encodeScreenPNG does (8-bit indices), and
// reports the PNG's size.
func BenchmarkScreenshotPNGEncode(b *testing.B) {
	d, err := New(amProfile(34), Options{})
	if err != nil {
		b.Fatal(err)
	}
	amShB(d, "am start -n "+amPkg+"/.HomeActivity")
	img := d.Screenshot()
	for _, tc := range []struct {
		name string
		enc  func() ([]byte, error)
	}{
		{"4-bit", func() ([]byte, error) {
			var buf bytes.Buffer
			err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
			return buf.Bytes(), err
		}},
		{"8-bit", func() ([]byte, error) { return encodeScreenPNG(img) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var n int
			before := processCPU()
			for range b.N {
				out, err := tc.enc()
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.ReportMetric(float64((processCPU()-before).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(n), "png-bytes")
		})
	}
}

// processCPU is this process's user+system CPU time (getrusage).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestAppCrashFirstSilentThenKeepsStopping(t *testing.T) {
	d, clk := newFaultDevice(t, crashProfile(1500, ""))
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	clk.Advance(1499 * time.Millisecond)
	if o, _, _ := amSh(t, d, "pidof "+amPkg); strings.TrimSpace(o) != "1500" {
		t.Fatalf("process gone before afterMillis: %q", o)
	}
	clk.Advance(time.Millisecond)
	if o, _, code := amSh(t, d, "pidof "+amPkg); code == 0 {
		t.Fatalf("process alive after the crash: %q", o)
	}
	crash, _, _ := amSh(t, d, "logcat -d -b crash")
	for _, want := range []string{
		"1500  1500 E AndroidRuntime: FATAL EXCEPTION: main\n",
		"1500  1500 E AndroidRuntime: Process: " + amPkg + ", PID: 1500\n",
		"1500  1500 E AndroidRuntime: java.lang.IllegalStateException: boom\n",
		"1500  1500 E AndroidRuntime: \tat " + amPkg + ".HomeActivity$1.run(HomeActivity.java:42)\n",
	} {
		if !strings.Contains(crash, want) {
			t.Errorf("crash buffer lacks %q:\n%s", want, crash)
		}
	}
	if main, _, _ := amSh(t, d, "logcat -d -b main,system"); strings.Contains(main, "FATAL") ||
		!strings.Contains(main, "W ActivityTaskManager:   Force finishing activity "+amPkg+"/.HomeActivity") ||
		!strings.Contains(main, "I Process : Sending signal. PID: 1500 SIG: 9") ||
		!strings.Contains(main, "I ActivityManager: Process "+amPkg+" (pid 1500) has died: fg  TOP") ||
		strings.Contains(main, "Showing crash dialog") {
		t.Errorf("main/system around a first crash:\n%s", main)
	}
	if w, _, _ := amSh(t, d, "dumpsys window windows"); strings.Contains(w, "Application Error") {
		t.Error("a first crash showed a dialog (show_first_crash_dialog is 0)")
	}
	drop, _, _ := amSh(t, d, "dumpsys dropbox --print data_app_crash")
	for _, want := range []string{"Drop box contents: 1 entries\n", "Searching for: data_app_crash\n", "\n========================================\n2026-11-21 08:00:01 data_app_crash (text, ",
		"\nProcess: " + amPkg + "\nPID: 1500\n", "Package: " + amPkg + " v3 (1.2)\n", "\n\njava.lang.IllegalStateException: boom\n\tat "} {
		if !strings.Contains(drop, want) {
			t.Errorf("dropbox lacks %q:\n%s", want, drop)
		}
	}
	// The user opens the app again within 60 s: "keeps stopping".
	clk.Advance(10 * time.Second)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	clk.Advance(1500 * time.Millisecond)
	w, _, _ := amSh(t, d, "dumpsys window displays")
	if !regexp.MustCompile(`mCurrentFocus=Window\{[0-9a-f]+ u0 Application Error: ` + regexp.QuoteMeta(amPkg) + `\}`).MatchString(w) {
		t.Errorf("no focused crash dialog:\n%s", w)
	}
	pid, _, code := amSh(t, d, "pidof "+amPkg)
	if code != 0 {
		t.Fatal("the process died while its crash dialog shows")
	}
	pkg, _, root := d.Foreground()
	if pkg != "android" || root == nil {
		t.Fatalf("foreground %q", pkg)
	}
	title := findByID(root, "android:id/alertTitle")
	closeBtn := findByID(root, "android:id/aerr_close")
	if title == nil || title.Text != amPkg+" keeps stopping" || closeBtn == nil || closeBtn.Text != "Close app" || findByID(root, "android:id/aerr_app_info") == nil {
		t.Fatalf("dialog hierarchy %+v", root)
	}
	if sys, _, _ := amSh(t, d, "logcat -d -b system"); !strings.Contains(sys, "I ActivityManager: Showing crash dialog for package "+amPkg+" u0") {
		t.Errorf("no Showing crash dialog line:\n%s", sys)
	}
	if err := d.Click(closeBtn); err != nil {
		t.Fatal(err)
	}
	if _, _, code := amSh(t, d, "pidof "+amPkg); code == 0 {
		t.Error("Close app left the process alive")
	}
	if sys, _, _ := amSh(t, d, "logcat -d -b system -t 3"); !strings.Contains(sys, "Killing "+strings.TrimSpace(pid)+":"+amPkg+"/u0a") || !strings.Contains(sys, "(adj 900): crash") {
		t.Errorf("no kill line:\n%s", sys)
	}
	if w, _, _ := amSh(t, d, "dumpsys window windows"); strings.Contains(w, "Application Error") {
		t.Error("dialog still listed after Close app")
	}
}

func TestAppCrashTooManyTimesAndFirstCrashDialogSetting(t *testing.T) {
	d, clk := newFaultDevice(t, crashProfile(0, ""))
	amSh(t, d, "settings put global show_first_crash_dialog 1")
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	if w, _, _ := amSh(t, d, "dumpsys window displays"); !strings.Contains(w, "u0 Application Error: "+amPkg+"}") {
		t.Fatalf("show_first_crash_dialog=1 showed no dialog:\n%s", w)
	}
	_, _, root := d.Foreground()
	if tt := findByID(root, "android:id/alertTitle"); tt == nil || tt.Text != amPkg+" has stopped" {
		t.Fatalf("title %+v", tt)
	}
	// Back cancels the crash dialog (force quit).
	amSh(t, d, "input keyevent 4")
	if _, _, code := amSh(t, d, "pidof "+amPkg); code == 0 {
		t.Fatal("back left the crashed process")
	}
	clk.Advance(time.Second)
	// A background start (not from the foreground user) keeps the crash count:
	// model it by crashing the same process again within 60 s without a restart.
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	d.mu.Lock()
	d.faults.crashTimes[amPkg] = clk.Now().Add(-time.Second) // as if not reset
	d.faults.pending = append(d.faults.pending, pendingFault{at: clk.Now(), kind: faultCrash, pkg: amPkg, pid: d.am.procs[amPkg].pid, cls: amPkg + ".HomeActivity"})
	d.mu.Unlock()
	d.advance()
	sys, _, _ := amSh(t, d, "logcat -d -b system")
	if !strings.Contains(sys, "W ActivityManager: Process "+amPkg+" has crashed too many times: killing!") {
		t.Errorf("no crashed-too-many-times line:\n%s", sys)
	}
}

func TestAppNotRespondingDialogWaitAndClose(t *testing.T) {
	p := amProfile(34)
	p.Faults.AppNotResponding = &AppANRFault{Package: amPkg, AfterMillis: 1000}
	d, clk := newFaultDevice(t, p)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	clk.Advance(5999 * time.Millisecond)
	if w, _, _ := amSh(t, d, "dumpsys window displays"); strings.Contains(w, "Not Responding") {
		t.Fatal("ANR before the input timeout")
	}
	clk.Advance(time.Millisecond)
	w, _, _ := amSh(t, d, "dumpsys window windows")
	if !regexp.MustCompile(`Window #\d+ Window\{[0-9a-f]+ u0 Application Not Responding: `+regexp.QuoteMeta(amPkg)+`\}:`).MatchString(w) ||
		!strings.Contains(w, "package=android appop=NONE") {
		t.Fatalf("no ANR window:\n%s", w)
	}
	sys, _, _ := amSh(t, d, "logcat -d -b system")
	for _, want := range []string{"E ActivityManager: ANR in " + amPkg + " (" + amPkg + "/.HomeActivity)\n", "E ActivityManager: PID: 1500\n", "E ActivityManager: Reason: Input dispatching timed out ("} {
		if !strings.Contains(sys, want) {
			t.Errorf("system lacks %q:\n%s", want, sys)
		}
	}
	drop, _, _ := amSh(t, d, "dumpsys dropbox --print data_app_anr")
	if !strings.Contains(drop, " data_app_anr (text, ") || !strings.Contains(drop, "Subject: Input dispatching timed out") || !strings.Contains(drop, "----- pid 1500 at ") {
		t.Errorf("dropbox anr:\n%s", drop)
	}
	d.mu.Lock()
	names := d.fs.children("/data/anr")
	d.mu.Unlock()
	if len(names) != 1 || !regexp.MustCompile(`^anr_2026-11-21-08-00-06-000$`).MatchString(names[0]) {
		t.Errorf("/data/anr: %v", names)
	}
	if o, e, _ := amSh(t, d, "cat /data/anr/"+names[0]); o != "" || !strings.Contains(e, "Permission denied") {
		t.Errorf("shell reads the ANR trace: %q %q", o, e)
	}
	_, _, root := d.Foreground()
	if tt := findByID(root, "android:id/alertTitle"); tt == nil || tt.Text != amPkg+" isn't responding" {
		t.Fatalf("title %+v", tt)
	}
	// Not cancelable: back does nothing; Wait dismisses, the app lives on.
	amSh(t, d, "input keyevent KEYCODE_BACK")
	if pkg, _, _ := d.Foreground(); pkg != "android" {
		t.Fatal("back dismissed the ANR dialog")
	}
	wait := findByID(root, "android:id/aerr_wait")
	cx, cy := (wait.Bounds[0]+wait.Bounds[2])/2, (wait.Bounds[1]+wait.Bounds[3])/2
	amSh(t, d, "input tap "+itoa(cx)+" "+itoa(cy))
	if pkg, _, _ := d.Foreground(); pkg != amPkg {
		t.Fatalf("after Wait the foreground is %q", pkg)
	}
	if _, _, code := amSh(t, d, "pidof "+amPkg); code != 0 {
		t.Fatal("Wait killed the app")
	}
}

func TestSystemUIANRDialogOverHealthyApp(t *testing.T) {
	p := amProfile(34)
	p.Faults.SystemUINotResponding = &SystemUIANRFault{AfterMillis: 2000}
	d, clk := newFaultDevice(t, p)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	clk.Advance(2 * time.Second)
	w, _, _ := amSh(t, d, "dumpsys window displays")
	if !strings.Contains(w, "u0 Application Not Responding: com.android.systemui}") || !strings.Contains(w, "mFocusedApp=ActivityRecord{") || !strings.Contains(w, amPkg+"/.HomeActivity") {
		t.Fatalf("no SystemUI ANR over the app:\n%s", w)
	}
	_, _, root := d.Foreground()
	if tt := findByID(root, "android:id/alertTitle"); tt == nil || tt.Text != "System UI isn't responding" {
		t.Fatalf("title %+v", tt)
	}
	oldPid, _, _ := amSh(t, d, "pidof com.android.systemui")
	closeBtn := findByID(root, "android:id/aerr_close")
	if err := d.Click(closeBtn); err != nil {
		t.Fatal(err)
	}
	if pkg, _, _ := d.Foreground(); pkg != amPkg {
		t.Fatalf("after Close app the foreground is %q", pkg)
	}
	newPid, _, _ := amSh(t, d, "pidof com.android.systemui")
	if strings.TrimSpace(newPid) == "" || newPid == oldPid {
		t.Errorf("SystemUI not restarted: %q -> %q", oldPid, newPid)
	}
	if _, _, code := amSh(t, d, "pidof "+amPkg); code != 0 {
		t.Error("closing SystemUI killed the app")
	}
	// On demand (what a test of the node work uses).
	d.ShowSystemUIANR()
	if pkg, _, _ := d.Foreground(); pkg != "android" {
		t.Fatal("ShowSystemUIANR showed nothing")
	}
	drop, _, _ := amSh(t, d, "dumpsys dropbox system_app_anr")
	if !strings.Contains(drop, "Drop box contents: 2 entries") || strings.Count(drop, " system_app_anr (text, ") != 2 {
		t.Errorf("dropbox:\n%s", drop)
	}
}

func TestFaultProfileValidation(t *testing.T) {
	for _, f := range []Faults{
		{AppCrash: &AppCrashFault{Package: "nodots"}},
		{AppCrash: &AppCrashFault{Package: amPkg, Exception: "not a class"}},
		{AppCrash: &AppCrashFault{Package: amPkg, Message: "two\nlines"}},
		{AppCrash: &AppCrashFault{Package: amPkg, AfterMillis: -1}},
		{AppNotResponding: &AppANRFault{Package: amPkg, AfterMillis: maxFaultDelayMillis + 1}},
		{SystemUINotResponding: &SystemUIANRFault{AfterMillis: -5}},
	} {
		p := amProfile(34)
		p.Faults = f
		if _, err := New(p, Options{}); err == nil {
			t.Errorf("accepted %+v", f)
		}
	}
}

func findByID(e *Element, id string) *Element {
	if e == nil {
		return nil
	}
	if e.ResourceID == id {
		return e
	}
	for _, c := range e.Children {
		if f := findByID(c, id); f != nil {
			return f
		}
	}
	return nil
}

// BenchmarkScreencap measures one 1080x2400 screen as PNG and raw.
func BenchmarkScreencap(b *testing.B) {
	d, err := New(amProfile(34), Options{})
	if err != nil {
		b.Fatal(err)
	}
	var o bytes.Buffer
	d.Shell(context.Background(), "am start -n "+amPkg+"/.HomeActivity", nil, &o, &o)
	b.Run("png", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.ScreenshotPNG(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			_ = screencapRaw(d.Screenshot(), 34)
		}
	})
}

// TestBackgroundANRKillsSilently: an app that stops responding while not in
// front gets no dialog; AM kills it ("bg anr") after logging the ANR.
func TestBackgroundANRKillsSilently(t *testing.T) {
	p := amProfile(34)
	p.Faults.AppNotResponding = &AppANRFault{Package: amPkg, AfterMillis: 100}
	d, clk := newFaultDevice(t, p)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	amSh(t, d, "input keyevent KEYCODE_HOME")
	clk.Advance(6 * time.Second)
	if w, _, _ := amSh(t, d, "dumpsys window windows"); strings.Contains(w, "Not Responding") {
		t.Fatal("a background ANR showed a dialog")
	}
	sys, _, _ := amSh(t, d, "logcat -d -b system")
	if !strings.Contains(sys, "E ActivityManager: ANR in "+amPkg+" (") || !strings.Contains(sys, "(adj 0): bg anr") {
		t.Errorf("system log:\n%s", sys)
	}
	if _, _, code := amSh(t, d, "pidof "+amPkg); code == 0 {
		t.Error("background ANR left the process alive")
	}
}

// TestLogcatTimeFilters: -t 'MM-DD hh:mm:ss.mmm' and epoch seconds print the
// entries from that time on and exit; a bad time is an error.
func TestLogcatTimeFilters(t *testing.T) {
	d, clk := newAMDevice(t, 34)
	clk.Advance(time.Minute)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	since := clk.Now().Format("01-02 15:04:05.000")
	out, _, code := amSh(t, d, "logcat -t '"+since+"' -b system")
	if code != 0 || !strings.Contains(out, "START u0 {flg=0x10000000 cmp="+amPkg) || strings.Contains(out, "System now ready") {
		t.Errorf("-t %s: %d\n%s", since, code, out)
	}
	epoch := fmt.Sprintf("%d.000", clk.Now().Unix())
	if o, _, _ := amSh(t, d, "logcat -t "+epoch+" -b system"); o != out {
		t.Errorf("-t %s:\n%s\nwant\n%s", epoch, o, out)
	}
	if _, e, code := amSh(t, d, "logcat -t yesterday"); code != 1 || !strings.Contains(e, "not in time format") {
		t.Errorf("bad time: %d %q", code, e)
	}
}

// TestSystemUIANRDismissedByKeys: the first key focuses the first button
// (Close app), DPAD_DOWN moves to Wait, ENTER presses it.
func TestSystemUIANRDismissedByKeys(t *testing.T) {
	d, _ := newFaultDevice(t, amProfile(34))
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	d.ShowSystemUIANR()
	pid, _, _ := amSh(t, d, "pidof com.android.systemui")
	amSh(t, d, "input keyevent KEYCODE_ENTER") // leaves touch mode: focus on Close app
	amSh(t, d, "input keyevent 20")            // DPAD_DOWN: Wait
	if pkg, _, _ := d.Foreground(); pkg != "android" {
		t.Fatal("focus keys dismissed the dialog")
	}
	amSh(t, d, "input keyevent 66")
	if pkg, _, _ := d.Foreground(); pkg != amPkg {
		t.Fatalf("ENTER on Wait: foreground %q", pkg)
	}
	if now, _, _ := amSh(t, d, "pidof com.android.systemui"); now != pid {
		t.Errorf("Wait restarted SystemUI: %q -> %q", pid, now)
	}
}

// faults.appCrash.times 1: the first launch crashes, the next one does not
// (a crash that does not repeat); `date` reads the device clock as toybox does.
func TestAppCrashTimesAndDate(t *testing.T) {
	p := crashProfile(0, "")
	p.Faults.AppCrash.Times = 1
	d, clk := newFaultDevice(t, p)
	if o, _, code := amSh(t, d, "date +%s.%N"); code != 0 || o != "1795248000.000000000\n" {
		t.Errorf("date +%%s.%%N: %q exit %d", o, code)
	}
	if o, _, _ := amSh(t, d, "date"); o != "Sat Nov 21 08:00:00 GMT 2026\n" {
		t.Errorf("date: %q", o)
	}
	if _, e, code := amSh(t, d, "date 112108002026"); code != 1 || e != "date: Not root\n" {
		t.Errorf("setting the clock: %q exit %d", e, code)
	}
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(time.Millisecond)
	if _, _, code := amSh(t, d, "pidof "+amPkg); code == 0 {
		t.Fatal("first launch did not crash")
	}
	clk.Advance(2 * time.Minute)
	amSh(t, d, "am start -W -n "+amPkg+"/.HomeActivity")
	clk.Advance(5 * time.Second)
	if _, _, code := amSh(t, d, "pidof "+amPkg); code != 0 {
		t.Fatal("second launch crashed too (times 1)")
	}
	if crash, _, _ := amSh(t, d, "logcat -d -b crash"); strings.Count(crash, "FATAL EXCEPTION") != 1 {
		t.Errorf("crash buffer:\n%s", crash)
	}
	bad := crashProfile(0, "")
	bad.Faults.AppCrash.Times = -1
	if _, err := New(bad, Options{}); err == nil || !strings.Contains(err.Error(), "faults.appCrash.times -1") {
		t.Errorf("times -1: %v", err)
	}
}

// TestHomeClosesErrorDialogs: KEYCODE_HOME sends ACTION_CLOSE_SYSTEM_DIALOGS
// before the launcher comes up; the app's ANR dialog closes on it with Close
// app (API 33+: its app is killed), and SystemUI's ANR dialog too. Below API
// 33 the ANR dialog is only dismissed (the app lives). `dumpsys dropbox
// --print --file` prints each entry's file unindented, with its millis.
func TestHomeClosesErrorDialogs(t *testing.T) {
	for _, api := range []int{34, 30} {
		p := amProfile(api)
		p.Faults.AppNotResponding = &AppANRFault{Package: amPkg, AfterMillis: 100}
		d, clk := newFaultDevice(t, p)
		amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
		clk.Advance(6 * time.Second)
		d.ShowSystemUIANR()
		if w, _, _ := amSh(t, d, "dumpsys window windows"); strings.Count(w, "Application Not Responding: ") < 2 {
			t.Fatalf("API %d: no ANR dialogs:\n%s", api, w)
		}
		amSh(t, d, "input keyevent 3")
		w, _, _ := amSh(t, d, "dumpsys window windows")
		if strings.Contains(w, "Application Not Responding") || !strings.Contains(w, homePackage) {
			t.Errorf("API %d: after HOME:\n%s", api, w)
		}
		_, _, code := amSh(t, d, "pidof "+amPkg)
		if alive := code == 0; alive != (api < 33) {
			t.Errorf("API %d: app alive after HOME = %v", api, alive)
		}
		drop, _, _ := amSh(t, d, "dumpsys dropbox --print --file data_app_anr")
		if !regexp.MustCompile(`\n\d{4}-\d\d-\d\d \d\d:\d\d:\d\d data_app_anr \(text, \d+ bytes\)\n/data/system/dropbox/data_app_anr@\d{13}\.txt\nProcess: ` + regexp.QuoteMeta(amPkg) + `\n`).MatchString(drop) {
			t.Errorf("API %d: dropbox --print --file:\n%s", api, drop)
		}
		if list, _, _ := amSh(t, d, "dumpsys dropbox --file data_app_anr"); !regexp.MustCompile(`\n    /data/system/dropbox/data_app_anr@\d{13}\.txt\n`).MatchString(list) {
			t.Errorf("API %d: dropbox --file:\n%s", api, list)
		}
	}
}
