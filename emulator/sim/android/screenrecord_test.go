package android

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe is what ffprobe reads of an MP4's first video stream.
type probe struct {
	Codec, Profile string
	W, H           int
	Seconds        float64
	Frames         int
}

// ffprobe decodes every frame of data (-count_frames), so a file a player
// could not read fails here.
func ffprobe(t *testing.T, data []byte) (probe, error) {
	t.Helper()
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Fatalf("ffprobe (Debian's ffmpeg, tools/setup.sh) is required: %v", err)
	}
	f := filepath.Join(t.TempDir(), "v.mp4")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,profile,width,height,nb_read_frames:format=duration", "-of", "json", f).CombinedOutput()
	if err != nil {
		return probe{}, &exec.ExitError{Stderr: out}
	}
	var doc struct {
		Streams []struct {
			CodecName    string `json:"codec_name"`
			Profile      string `json:"profile"`
			Width        int    `json:"width"`
			Height       int    `json:"height"`
			NbReadFrames string `json:"nb_read_frames"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Streams) != 1 {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	s := doc.Streams[0]
	p := probe{Codec: s.CodecName, Profile: s.Profile, W: s.Width, H: s.Height}
	p.Seconds, _ = strconv.ParseFloat(doc.Format.Duration, 64)
	p.Frames, _ = strconv.Atoi(s.NbReadFrames)
	return p, nil
}

func TestScreenrecordOptions(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	for _, tc := range []struct {
		cmd, stderr string
		code        int
	}{
		{"screenrecord", "Must specify output file (see --help).\n", 2},
		{"screenrecord --time-limit 181 /sdcard/a.mp4", "Time limit 181s outside acceptable range [1,180]\n", 2},
		{"screenrecord --bit-rate 50000 /sdcard/a.mp4", "Bit rate 50000bps outside acceptable range [100000,200000000]\n", 2},
		{"screenrecord --bit-rate x /sdcard/a.mp4", "Invalid bit rate 'x'\n", 2},
		{"screenrecord --size 720 /sdcard/a.mp4", "Invalid size '720', must be width x height\n", 2},
		{"screenrecord --size 721x1280 /sdcard/a.mp4", "ERROR: unable to configure video encoder\n", 1},
	} {
		if _, e, code := amSh(t, d, tc.cmd); code != tc.code || e != tc.stderr {
			t.Errorf("%s: exit %d %q, want %d %q", tc.cmd, code, e, tc.code, tc.stderr)
		}
	}
	out, _, code := amSh(t, d, "screenrecord --help")
	if code != 0 || !strings.Contains(out, "--time-limit TIME") || !strings.Contains(out, "Default 20Mbps") {
		t.Errorf("--help: %d %q", code, out)
	}
	if _, e, code := amSh(t, d, "kill -2 99999"); code != 1 || e != "kill: pid 99999: No such process\n" {
		t.Errorf("kill of no process: %d %q", code, e)
	}
	if _, _, code := amSh(t, d, "pkill -INT screenrecord"); code != 1 {
		t.Errorf("pkill with nothing to signal: exit %d, want 1", code)
	}
}

// TestScreenrecordTimeLimit records until --time-limit: an H.264 MP4 of the
// requested size whose duration is the time limit, the verbose lines of
// screenrecord.cpp, exit 0, and no process left. The screen stays still, so
// the file holds the first frame and the last (held to the end), as a
// device's encoder gets frames only when the display changes.
func TestScreenrecordTimeLimit(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	out, e, code := amSh(t, d, "screenrecord --verbose --time-limit 2 --size 360x640 --bit-rate 4M /sdcard/a.mp4")
	if code != 0 || e != "" {
		t.Fatalf("screenrecord: exit %d %q %q", code, out, e)
	}
	for _, want := range []string{"Configuring recorder for 360x640 video/avc at 4.00Mbps\n", "Time limit reached\n", "Encoder stopping; recorded 2 frames in "} {
		if !strings.Contains(out, want) {
			t.Errorf("verbose output %q lacks %q", out, want)
		}
	}
	// The seconds are the recording's wall time, as screenrecord.cpp prints
	// them: the 2 s limit, or more when the encoder lagged on a loaded
	// machine (CI saw 4), never less.
	m := regexp.MustCompile(`recorded 2 frames in (\d+) seconds\n`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("verbose output %q: no stop line", out)
	} else if secs, _ := strconv.Atoi(m[1]); secs < 2 {
		t.Errorf("verbose output %q: recorded in %d s, under the 2 s limit", out, secs)
	}
	b, err := d.ReadFile("/sdcard/a.mp4")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ffprobe(t, b)
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	if p.Codec != "h264" || p.W != 360 || p.H != 640 || p.Seconds < 1.8 || p.Seconds > 2.3 || p.Frames != 2 {
		t.Fatalf("probe %+v, want h264 360x640 of about 2 s", p)
	}
	if n := d.Recordings(); n != 0 {
		t.Fatalf("%d recordings left", n)
	}
}

// startRecording runs screenrecord in the background (as `adb shell`
// would) and waits until ps lists it.
func startRecording(t *testing.T, ctx context.Context, d *Device, file string) <-chan int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		var o, e bytes.Buffer
		done <- d.Shell(ctx, "screenrecord --size 360x640 "+file, nil, &o, &e)
	}()
	deadline := time.After(30 * time.Second)
	for {
		if ps, _, _ := amSh(t, d, "ps -A"); strings.Contains(ps, " screenrecord") {
			return done
		}
		select {
		case code := <-done:
			t.Fatalf("screenrecord ended at once: %d", code)
		case <-deadline:
			t.Fatal("screenrecord never listed by ps")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// packetTimes is the presentation time (s) of each video packet of data,
// in file order.
func packetTimes(t *testing.T, data []byte) []float64 {
	t.Helper()
	f := filepath.Join(t.TempDir(), "v.mp4")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time", "-of", "csv=p=0", f).Output()
	if err != nil {
		t.Fatalf("ffprobe packets: %v", err)
	}
	var ts []float64
	for _, l := range strings.Fields(string(out)) {
		v, err := strconv.ParseFloat(strings.TrimSuffix(l, ","), 64)
		if err != nil {
			t.Fatalf("ffprobe packet line %q: %v", l, err)
		}
		ts = append(ts, v)
	}
	return ts
}

// keptFrames is how many frames the device's one running recording kept
// so far (-1 when none runs).
func keptFrames(d *Device) int {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	for _, r := range d.rec.run {
		return len(r.kept.kept())
	}
	return -1
}

// TestScreenrecordFrameWhenTheScreenChanges: a recording holds a frame
// where the screen changed, at the time it changed (to the screen's
// comparison step, 1/RecordFPS s), not a frame every 1/RecordFPS s; its
// duration is still the recording's time (the last frame held to the end).
// While it runs it draws no pixels (it keeps the screen's drawing calls).
func TestScreenrecordFrameWhenTheScreenChanges(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	amSh(t, d, "am start -n "+amPkg+"/.HomeActivity")
	before := time.Now()
	done := startRecording(t, context.Background(), d, "/sdcard/change.mp4")
	if _, e, code := amSh(t, d, "input keyevent KEYCODE_HOME"); code != 0 {
		t.Fatalf("keyevent: %d %q", code, e)
	}
	deadline := time.Now().Add(30 * time.Second)
	for keptFrames(d) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the changed screen was never kept (%d frames)", keptFrames(d))
		}
		time.Sleep(10 * time.Millisecond)
	}
	seen := time.Since(before).Seconds()
	// The recording compared and kept the screens as their drawings: no
	// pixels drawn, no PNG encoded while it ran.
	d.png.mu.Lock()
	drawn := d.png.scratch != nil || len(d.png.screens) > 0
	d.png.mu.Unlock()
	if drawn {
		t.Error("the recording drew the screen's pixels while it ran")
	}
	if _, e, code := amSh(t, d, "pkill -INT screenrecord"); code != 0 {
		t.Fatalf("pkill: %d %q", code, e)
	}
	if code := <-done; code != 0 {
		t.Fatalf("screenrecord after SIGINT: exit %d", code)
	}
	stopped := time.Since(before).Seconds()
	b, err := d.ReadFile("/sdcard/change.mp4")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ffprobe(t, b)
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	ts := packetTimes(t, b)
	// The first screen at 0, the changed one at a comparison after the
	// keyevent and before the test saw it kept, the last held to the end.
	if p.Frames != 3 || len(ts) != 3 || ts[0] != 0 || ts[1] < 1.0/RecordFPS-0.01 || ts[1] > seen+0.01 || ts[2] <= ts[1] {
		t.Fatalf("frames %d at %v s (kept by %.3f s), want 3: 0, the change, the end", p.Frames, ts, seen)
	}
	if p.Seconds < ts[1] || p.Seconds > stopped+0.01 {
		t.Fatalf("duration %.3f s, want from the change (%.3f s) to the stop (at most %.3f s)", p.Seconds, ts[1], stopped)
	}
}

// ffmpegChildren is how many ffmpeg processes this process runs now.
func ffmpegChildren(t *testing.T) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n, me := 0, strconv.Itoa(os.Getpid())
	for _, e := range dirs {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(ffmpeg") {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == me {
			n++
		}
	}
	return n
}

// TestScreenrecordEncodesOnceFinished: no encoder runs while a recording
// does (a device's is its own hardware, not the host's); the file's size
// after the stop (ls -l, sync STAT) is the finished MP4's, whose bytes
// every read returns alike, encoded once.
func TestScreenrecordEncodesOnceFinished(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	f := "/data/local/tmp/read.mp4"
	done := startRecording(t, context.Background(), d, f)
	if n := ffmpegChildren(t); n != 0 {
		t.Errorf("%d ffmpeg processes while recording, want none", n)
	}
	if _, e, code := amSh(t, d, "pkill -INT screenrecord"); code != 0 {
		t.Fatalf("pkill: %d %q", code, e)
	}
	if code := <-done; code != 0 {
		t.Fatalf("screenrecord: exit %d", code)
	}
	ls, e, code := amSh(t, d, "ls -l "+f)
	if code != 0 {
		t.Fatalf("ls -l: %d %q", code, e)
	}
	fi, err := d.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := d.ReadFile(f)
	if fi.Size == 0 || int64(len(b)) != fi.Size || !bytes.Equal(b, again) || !strings.Contains(ls, " "+strconv.FormatInt(fi.Size, 10)+" ") {
		t.Fatalf("size %d, read %d bytes (again %d), ls -l %q: want one finished file", fi.Size, len(b), len(again), ls)
	}
	if p, err := ffprobe(t, b); err != nil || p.Codec != "h264" {
		t.Fatalf("file: %+v %v", p, err)
	}
}

// TestScreenrecordKilledAndRemovedNeverEncodes: recordings SIGKILLed and
// their files removed, as the daemon drops a passed run's (`pkill -KILL -f
// …; rm -f …-<run>-*`: a glob, which lists the directory, and rm, which
// stats each file), run no encoder at all: in one shell, and with the
// recordings already ended when the rm runs.
func TestScreenrecordKilledAndRemovedNeverEncodes(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	deadline := time.Now().Add(30 * time.Second)
	for ffmpegChildren(t) > 0 { // an earlier test's encoding
		if time.Now().After(deadline) {
			t.Fatal("ffmpeg still running from an earlier test")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := childCPU()
	const dir = "/data/local/tmp/"
	done := startRecording(t, context.Background(), d, dir+"drop-1-000.mp4")
	if _, e, code := amSh(t, d, "pkill -KILL -f '^screenrecord .* "+dir+"drop-1-'; rm -f "+dir+"drop-1-*"); code != 0 {
		t.Fatalf("pkill; rm: %d %q", code, e)
	}
	if code := <-done; code != 137 {
		t.Fatalf("screenrecord after SIGKILL: exit %d, want 137", code)
	}
	for _, f := range []string{"drop-2-000.mp4", "drop-2-001.mp4"} {
		done := startRecording(t, context.Background(), d, dir+f)
		if _, e, code := amSh(t, d, "pkill -KILL -f '^screenrecord .* "+dir+f+"'"); code != 0 {
			t.Fatalf("pkill: %d %q", code, e)
		}
		if code := <-done; code != 137 {
			t.Fatalf("screenrecord after SIGKILL: exit %d, want 137", code)
		}
	}
	if _, e, code := amSh(t, d, "rm -f "+dir+"drop-2-*; rm "+dir+"nothing-here 2>/dev/null; cd "+dir); code != 0 {
		t.Fatalf("rm: %d %q", code, e)
	}
	if left, _, _ := amSh(t, d, "ls "+dir); strings.Contains(left, "drop-") {
		t.Fatalf("recordings left: %q", left)
	}
	if n, cpu := ffmpegChildren(t), childCPU()-before; n != 0 || cpu != 0 {
		t.Fatalf("%d ffmpeg running, %v of children's CPU: want no encoder", n, cpu)
	}
}

// TestScreenrecordSignals: SIGINT (pkill -INT, as drivers stop it) and the
// shell going away (SIGHUP) finish a playable file; SIGKILL leaves one no
// player reads. Nothing is left running after any of them.
func TestScreenrecordSignals(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	done := startRecording(t, context.Background(), d, "/sdcard/int.mp4")
	if _, e, code := amSh(t, d, "pkill -INT screenrecord"); code != 0 {
		t.Fatalf("pkill: %d %q", code, e)
	}
	if code := <-done; code != 0 {
		t.Fatalf("screenrecord after SIGINT: exit %d", code)
	}
	b, _ := d.ReadFile("/sdcard/int.mp4")
	if p, err := ffprobe(t, b); err != nil || p.Codec != "h264" {
		t.Fatalf("SIGINT file: %+v %v", p, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = startRecording(t, ctx, d, "/sdcard/hup.mp4")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("screenrecord after SIGHUP: exit %d", code)
	}
	b, _ = d.ReadFile("/sdcard/hup.mp4")
	if p, err := ffprobe(t, b); err != nil || p.Codec != "h264" {
		t.Fatalf("SIGHUP file: %+v %v", p, err)
	}

	done = startRecording(t, context.Background(), d, "/sdcard/kill.mp4")
	ps, _, _ := amSh(t, d, "pidof screenrecord")
	if _, e, code := amSh(t, d, "kill -9 "+strings.TrimSpace(ps)); code != 0 {
		t.Fatalf("kill -9 %s: %d %q", ps, code, e)
	}
	if code := <-done; code != 137 {
		t.Fatalf("screenrecord after SIGKILL: exit %d, want 137", code)
	}
	b, _ = d.ReadFile("/sdcard/kill.mp4")
	if _, err := ffprobe(t, b); err == nil {
		t.Fatal("a SIGKILLed recording decoded; it has no index on a device")
	}
	if ps, _, _ := amSh(t, d, "ps -A"); strings.Contains(ps, "screenrecord") {
		t.Fatalf("a screenrecord is left:\n%s", ps)
	}
}

// BenchmarkScreenrecord records 10 s of the default profile's display
// (1080x2400) at the daemon's default settings (--size 720x1600
// --bit-rate 4M), a still screen and one that changes every 200 ms (each
// comparison of the screen), reads the file (the encoding: the simulator's
// ffmpeg children, from getrusage) and reports ffmpeg's CPU per recorded
// second and the file's size per minute. A recording removed unread costs
// no encoding.
func BenchmarkScreenrecord(b *testing.B) {
	for _, moving := range []bool{false, true} {
		name := "still"
		if moving {
			name = "changing"
		}
		b.Run(name, func(b *testing.B) {
			d, err := New(amProfile(34), Options{})
			if err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			var bytes int
			for i := 0; i < b.N; i++ {
				stop := make(chan struct{})
				if moving {
					// A new screen every 200 ms (the recording's frame interval):
					// home and the app's activity in turn.
					go func() {
						tick := time.NewTicker(200 * time.Millisecond)
						defer tick.Stop()
						for j := 0; ; j++ {
							select {
							case <-stop:
								return
							case <-tick.C:
							}
							if j%2 == 0 {
								amShB(d, "am start -n "+amPkg+"/.HomeActivity")
							} else {
								amShB(d, "input keyevent KEYCODE_HOME")
							}
						}
					}()
				}
				before := childCPU()
				_, e, code := amShB(d, "screenrecord --time-limit 10 --size 720x1600 --bit-rate 4M /sdcard/b.mp4")
				close(stop)
				if code != 0 {
					b.Fatalf("screenrecord: %d %s", code, e)
				}
				f, _ := d.ReadFile("/sdcard/b.mp4")
				cpu += childCPU() - before
				bytes += len(f)
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N)/10, "ffmpeg-cpu-ms/recorded-s")
			b.ReportMetric(float64(bytes)/float64(b.N)*6/1e6, "MB/min")
		})
	}
}

func amShB(d *Device, cmd string) (string, string, int) {
	var o, e strings.Builder
	code := d.Shell(context.Background(), cmd, nil, &o, &e)
	return o.String(), e.String(), code
}

// childCPU is the user+system CPU of the reaped children of this process.
func childCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestPkillMatchesItsOwnShell: toybox pkill leaves itself out but not the
// sh running its line, whose command line (`sh -c LINE`) holds the
// pattern: an unanchored -f pattern kills that sh and the rest of the line
// never runs, as on a device; a pattern anchored at the process's name
// signals the recording only. The pattern is a regular expression.
func TestPkillMatchesItsOwnShell(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	done := startRecording(t, context.Background(), d, "/data/local/tmp/sg-video-1.mp4")
	out, _, code := amSh(t, d, "pkill -KILL -f /data/local/tmp/sg-video-; echo after")
	if code != 137 || strings.Contains(out, "after") {
		t.Errorf("unanchored pattern: exit %d, stdout %q; want 137 and the rest of the line unrun", code, out)
	}
	if c := <-done; c != 137 {
		t.Errorf("the recording ended with %d, want 137", c)
	}
	done = startRecording(t, context.Background(), d, "/data/local/tmp/sg-video-2.mp4")
	out, _, code = amSh(t, d, `pkill -INT -f '^screenrecord .* /data/local/tmp/sg-video-'; echo after`)
	if code != 0 || out != "after\n" {
		t.Errorf("anchored pattern: exit %d, stdout %q; want 0 and \"after\"", code, out)
	}
	if c := <-done; c != 0 {
		t.Errorf("the recording ended with %d, want 0 (SIGINT)", c)
	}
	if _, _, code := amSh(t, d, `pkill -f 'sg-video-[0-9'`); code != 1 {
		t.Errorf("bad expression: exit %d, want 1", code)
	}
}

// TestScreenrecordFileRemovedWhileRecording: the output file exists from
// the start (MediaMuxer opens it); removed while recording, it stays gone
// whether the recording then finishes (SIGINT) or is killed: the encoder
// wrote into the unlinked file.
func TestScreenrecordFileRemovedWhileRecording(t *testing.T) {
	d, _ := newAMDevice(t, 34)
	for _, sig := range []string{"-INT", "-KILL"} {
		f := "/data/local/tmp/gone" + sig + ".mp4"
		done := startRecording(t, context.Background(), d, f)
		if _, err := d.ReadFile(f); err != nil {
			t.Fatalf("%s: no file while recording: %v", sig, err)
		}
		if _, e, code := amSh(t, d, "rm -f "+f+"; pkill "+sig+" -f '^screenrecord .* "+f+"'"); code != 0 {
			t.Fatalf("%s: rm; pkill: %d %q", sig, code, e)
		}
		<-done
		if _, err := d.ReadFile(f); err == nil {
			t.Errorf("%s: the removed file came back when the recording ended", sig)
		}
	}
}
