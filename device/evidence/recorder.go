package evidence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// TypeMP4 is the content type of a video artifact.
const TypeMP4 = "video/mp4"

// VideoSettings are a policy's recording settings (policy.Video): the
// short side of the video in pixels, screenrecord's --bit-rate in bits/s,
// its --time-limit per segment, the most one run records, and the most
// bytes its video keeps.
type VideoSettings struct {
	ShortSide int
	BitRate   int
	Segment   time.Duration
	MaxLength time.Duration
	MaxBytes  int64
}

// RecordDir is where recordings are written on the device: the shell
// user's scratch directory, which survives no factory reset and which
// every Android release lets `screenrecord` write.
const RecordDir = "/data/local/tmp"

// recordPrefix starts every recording's file name: the stale-recording
// sweep (pkill -f) and the cleanup (rm) match it and nothing else.
const recordPrefix = RecordDir + "/screengraph-video-"

// Recorder implements agent.Recorder with `screenrecord` on the run's
// device, as Appium's uiautomator2 driver records a session
// (appium-android-driver lib/commands/recordscreen.js): segments of
// --time-limit seconds (at most 180 on most releases), each started when
// the one before ends, until the run ends; then `pkill -INT` (screenrecord
// finishes its MP4 on SIGINT), the segments pulled and joined with ffmpeg
// on the host (only when there are several). Recording starts before the
// FirstNode's attempt (LaunchOrAttach: the app's launch is the first thing
// worth watching) and covers every later node.
type Recorder struct {
	// DeviceFor returns the device of an adb serial.
	DeviceFor func(serial string) device.Device
	// Settings is the policy's video settings and whether either of its
	// evidence lists names video (policy.VideoOf).
	Settings func(pol agent.RetryPolicy) (VideoSettings, bool)
	// FirstNode is the node recording starts at ("LaunchOrAttach").
	FirstNode string
	// Logf reports what could not be recorded; may be nil.
	Logf func(format string, args ...any)
	// Transport is the adb transport id a serial's last command ran on,
	// without a round trip (adb.Client.LastTransportID); nil (or 0) sweeps
	// and reads `wm size` before every run's recording.
	Transport func(serial string) int64

	mu    sync.Mutex
	runs  map[string]*recRun
	known map[string]knownDevice // by serial
}

// knownDevice is what a sweep proved of a device on one adb transport.
type knownDevice struct {
	transport int64
	size      parse.DisplaySize
}

var _ agent.Recorder = (*Recorder)(nil)

// recRun is one run's recording.
type recRun struct {
	serial   string
	dev      device.Device
	set      VideoSettings
	size     string        // --size WxH
	segments []doneSegment // finished segments, in order
	recorded time.Duration
	cur      *segment
	next     int // the next segment's number
	notes    []string
}

// doneSegment is a finished segment: its file, when it was started, and
// whether the recorder stopped it (pause, the run's end) rather than its
// time limit.
type doneSegment struct {
	path    string
	started time.Time
	stopped bool
}

// segment is one running screenrecord.
type segment struct {
	path     string
	started  time.Time
	stopping bool          // guarded by Recorder.mu
	cancel   func()        // closes the adb shell (SIGHUP: screenrecord finishes the file)
	accepted chan struct{} // closed when the device accepted the shell's stream
	done     chan struct{} // closed when the shell command returned
}

func (r *Recorder) logf(runID, format string, args ...any) {
	if r.Logf != nil {
		r.Logf("run %s: video: %s", runID, fmt.Sprintf(format, args...))
	}
}

// NodeStarting implements agent.Recorder. On a device this daemon already
// swept on the same adb transport (Transport), the start is one stream:
// the segment's screenrecord, returned from as soon as the device accepted
// it (device.WithStarted), not when the encoder runs; else one shell
// first sweeps and reads the display size (prepare).
func (r *Recorder) NodeStarting(ctx context.Context, req agent.RecordRequest) {
	set, on := r.Settings(req.Policy)
	if !on {
		return
	}
	if _, reached := req.Outputs[r.FirstNode]; req.Node != r.FirstNode && !reached {
		return
	}
	runID := req.Run.RunID
	r.mu.Lock()
	rr := r.runs[runID]
	if rr != nil && (rr.cur != nil || rr.recorded >= rr.set.MaxLength) {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	if rr == nil {
		if rr = r.begin(ctx, req, set); rr == nil {
			return
		}
	}
	r.mu.Lock()
	r.startLocked(runID, rr)
	seg := rr.cur
	r.mu.Unlock()
	if seg != nil {
		// The node waits for the device to have started the recording's
		// shell (one round trip), not for the encoder: everything the node
		// then sends reaches the device after screenrecord started, so the
		// recording's first frame is the screen before the node acted.
		select {
		case <-seg.accepted:
		case <-seg.done:
		case <-ctx.Done():
		}
	}
}

// begin makes the run's recording, nil when it cannot record: no device,
// a screen that may still be another tenant's, or no display size.
func (r *Recorder) begin(ctx context.Context, req agent.RecordRequest, set VideoSettings) *recRun {
	tg := targetOf(agent.EvidenceRequest{Run: req.Run, Outputs: req.Outputs, Window: req.Window})
	if tg.serial == "" || tg.dirty {
		return nil
	}
	rr := &recRun{serial: tg.serial, dev: r.DeviceFor(tg.serial), set: set}
	ds, err := r.prepare(ctx, rr)
	if err != nil {
		r.logf(req.Run.RunID, "not recorded: %v", err)
		return nil
	}
	rr.size = videoSize(ds, set.ShortSide)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]*recRun{}
	}
	r.runs[req.Run.RunID] = rr
	return rr
}

// transportOf is the adb transport the device's last command ran on (0
// when unknown or not wired).
func (r *Recorder) transportOf(serial string) int64 {
	if r.Transport == nil {
		return 0
	}
	return r.Transport(serial)
}

// prepare returns the device's display size. The first run on an adb
// transport also stops and deletes every recording of ours on the device
// (a daemon that crashed mid-run left its recording running; the run holds
// the device's lease, so no other is ours to keep), in the same shell as
// `wm size`: SIGKILL, so nothing is written after the rm (the encoder
// writes into the file it opened, which rm unlinks). Later runs on the same
// transport (EnsureDevice's check just ran on it) know both: every
// recording of this daemon was stopped and deleted at its run's end, or
// the device was forgotten here (forget).
func (r *Recorder) prepare(ctx context.Context, rr *recRun) (parse.DisplaySize, error) {
	if tid := r.transportOf(rr.serial); tid != 0 {
		r.mu.Lock()
		k, ok := r.known[rr.serial]
		r.mu.Unlock()
		if ok && k.transport == tid {
			return k.size, nil
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := rr.dev.Shell(sctx, "pkill -KILL -f "+ourRecordings("")+"; rm -f "+recordPrefix+"*; wm size")
	if err != nil {
		return parse.DisplaySize{}, fmt.Errorf("sweep and `wm size`: %w", err)
	}
	ds, ok := parse.ParseWmSize(res.Stdout)
	if !ok {
		return parse.DisplaySize{}, fmt.Errorf("`wm size` gave no display size (exit %d: %.80q)", res.ExitCode, res.Stdout+res.Stderr)
	}
	if res.TransportID != 0 {
		r.mu.Lock()
		if r.known == nil {
			r.known = map[string]knownDevice{}
		}
		r.known[rr.serial] = knownDevice{transport: res.TransportID, size: ds}
		r.mu.Unlock()
	}
	return ds, nil
}

// forget drops what is known of serial: a recording that could not be
// stopped or deleted there is swept by the next run.
func (r *Recorder) forget(serial string) {
	r.mu.Lock()
	delete(r.known, serial)
	r.mu.Unlock()
}

// ourRecordings is the pkill -f pattern (toybox: an extended regular
// expression over the process's command line) of our screenrecord
// processes whose file name starts with recordPrefix+rest. Anchored at
// "screenrecord ", so it never matches the sh running the command line
// that holds it (its own command line is `sh -c …`), which pkill would
// kill with the rest of the line unrun.
func ourRecordings(rest string) string {
	return shellWord("^screenrecord .* " + regexp.QuoteMeta(recordPrefix+rest))
}

// videoSize is screenrecord's --size for a display: scaled so its short
// side is shortSide (a smaller display keeps its size), aspect kept, both
// sides even (the AVC encoder's requirement).
func videoSize(ds parse.DisplaySize, shortSide int) string {
	w, h := ds.Effective()
	short := min(w, h)
	if short > shortSide {
		w, h = (w*shortSide+short/2)/short, (h*shortSide+short/2)/short
	}
	return fmt.Sprintf("%dx%d", w&^1, h&^1)
}

// startLocked starts the run's next segment (r.mu held).
func (r *Recorder) startLocked(runID string, rr *recRun) {
	limit := min(rr.set.Segment, rr.set.MaxLength-rr.recorded)
	secs := int((limit + time.Second - 1) / time.Second)
	if secs < 1 {
		return
	}
	seg := &segment{path: fmt.Sprintf("%s%s-%03d.mp4", recordPrefix, runID, rr.next), started: time.Now(),
		accepted: make(chan struct{}), done: make(chan struct{})}
	rr.next++
	rr.cur = seg
	// The recording outlives the node that started it: its own context,
	// ended by stop (or the daemon's exit, which closes the adb connection).
	sctx, cancel := context.WithCancel(context.Background())
	seg.cancel = cancel
	var once sync.Once
	accepted := func() { once.Do(func() { close(seg.accepted) }) }
	sctx = device.WithStarted(sctx, accepted)
	cmd := fmt.Sprintf("screenrecord --time-limit %d --size %s --bit-rate %d %s", secs, rr.size, rr.set.BitRate, seg.path)
	go func() {
		res, err := rr.dev.Shell(sctx, cmd)
		accepted()
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		defer close(seg.done)
		if rr.cur == seg {
			rr.cur = nil
		}
		if (err != nil || res.ExitCode != 0) && !seg.stopping {
			msg := strings.TrimSpace(res.Stderr + " " + res.Stdout)
			if err != nil {
				msg = err.Error()
			}
			rr.notes = append(rr.notes, fmt.Sprintf("segment %s: screenrecord exit %d: %s", seg.path, res.ExitCode, msg))
			r.logf(runID, "%s", rr.notes[len(rr.notes)-1])
			return // a recorder that fails does not restart in a loop
		}
		rr.segments = append(rr.segments, doneSegment{path: seg.path, started: seg.started, stopped: seg.stopping})
		rr.recorded += time.Since(seg.started)
		if !seg.stopping && rr.recorded < rr.set.MaxLength {
			r.startLocked(runID, rr) // the time limit ended it: the next segment
		} else if !seg.stopping {
			rr.notes = append(rr.notes, fmt.Sprintf("recording stopped at evidence.video.maxLength %s", rr.set.MaxLength))
		}
	}()
}

// stop ends the run's running segment, if any: SIGINT (the file is
// finished), then, if it has not ended in 10 s, the adb shell closed.
func (r *Recorder) stop(ctx context.Context, rr *recRun) {
	r.mu.Lock()
	seg := rr.cur
	if seg != nil {
		seg.stopping = true
	}
	r.mu.Unlock()
	if seg == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := rr.dev.Shell(sctx, "pkill -INT -f "+ourRecordings(strings.TrimPrefix(seg.path, recordPrefix))); err != nil {
		r.forget(rr.serial)
	}
	select {
	case <-seg.done:
		return
	case <-sctx.Done():
	}
	r.forget(rr.serial)
	seg.cancel()
	select {
	case <-seg.done:
	case <-time.After(5 * time.Second):
	}
}

func (r *Recorder) take(runID string) *recRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.runs[runID]
	delete(r.runs, runID)
	return rr
}

// Pause implements agent.Recorder: the running segment ends, what was
// recorded is kept for the run's video.
func (r *Recorder) Pause(ctx context.Context, runID string) {
	r.mu.Lock()
	rr := r.runs[runID]
	r.mu.Unlock()
	if rr != nil {
		r.stop(ctx, rr)
	}
}

// Drop implements agent.Recorder: the recording is SIGKILLed and the run's
// files removed from the device in one shell (nothing is written after the
// rm: the encoder writes into the file it opened, which rm unlinks). When
// that shell fails, the adb shell of the recording is closed (SIGHUP) and
// the device is swept again before its next recording.
func (r *Recorder) Drop(ctx context.Context, runID string) {
	rr := r.take(runID)
	if rr == nil {
		return
	}
	r.mu.Lock()
	seg := rr.cur
	if seg != nil {
		seg.stopping = true
	}
	r.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	run := runID + "-"
	res, err := rr.dev.Shell(sctx, "pkill -KILL -f "+ourRecordings(run)+"; rm -f "+recordPrefix+run+"*")
	if err != nil || res.ExitCode != 0 {
		r.forget(rr.serial)
		r.logf(runID, "dropping the recording: exit %d %v", res.ExitCode, err)
		if seg != nil {
			seg.cancel()
		}
	}
}

func (r *Recorder) remove(ctx context.Context, rr *recRun) {
	r.mu.Lock()
	var paths []string
	for _, sg := range rr.segments {
		paths = append(paths, sg.path)
	}
	r.mu.Unlock()
	if len(paths) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if res, err := rr.dev.Shell(sctx, "rm -f "+strings.Join(paths, " ")); err != nil || res.ExitCode != 0 {
		r.forget(rr.serial)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// Video stops the run's recording and returns its MP4 (the segments
// joined) and lines about what was left out; nil data when nothing was
// recorded. The run's recording is forgotten and its files removed from
// the device.
func (r *Recorder) Video(ctx context.Context, runID string) ([]byte, []string, error) {
	rr := r.take(runID)
	if rr == nil {
		return nil, nil, nil
	}
	r.stop(ctx, rr)
	defer r.remove(context.WithoutCancel(ctx), rr)
	r.mu.Lock()
	segs, notes := append([]doneSegment(nil), rr.segments...), slicesClone(rr.notes)
	r.mu.Unlock()
	if len(segs) == 0 {
		return nil, notes, nil
	}
	var parts [][]byte
	var spans []time.Duration
	var total int64
	for i, sg := range segs {
		p := sg.path
		var buf bytes.Buffer
		lw := &capWriter{w: &buf, left: rr.set.MaxBytes - total}
		if _, err := rr.dev.Pull(ctx, p, lw); err != nil {
			if lw.over {
				notes = append(notes, fmt.Sprintf("video cut after %d of %d segments: evidence.video.maxBytes %d reached", i, len(segs), rr.set.MaxBytes))
				break
			}
			return nil, notes, fmt.Errorf("pull %s: %w", p, err)
		}
		total += int64(buf.Len())
		parts = append(parts, buf.Bytes())
		// A segment its time limit ended spans until the next one started:
		// the restart's gap (the encoder finishing one file and starting the
		// next, about a second on a loaded host) shows as the last frame
		// held, so the video's clock stays the run's. A stopped segment
		// (a pause) spans only itself: a paused run records nothing.
		var span time.Duration
		if i+1 < len(segs) && !sg.stopped {
			span = segs[i+1].started.Sub(sg.started)
		}
		spans = append(spans, span)
	}
	if len(parts) == 0 {
		return nil, notes, nil
	}
	if len(parts) == 1 {
		return parts[0], notes, nil
	}
	joined, err := JoinMP4(ctx, parts, spans)
	if err != nil {
		notes = append(notes, fmt.Sprintf("kept the first of %d segments: %v", len(parts), err))
		return parts[0], notes, nil
	}
	if int64(len(joined)) > rr.set.MaxBytes {
		notes = append(notes, fmt.Sprintf("kept the first of %d segments: joined they are %d bytes, more than evidence.video.maxBytes", len(parts), len(joined)))
		return parts[0], notes, nil
	}
	return joined, notes, nil
}

// capWriter refuses writes past left bytes.
type capWriter struct {
	w    *bytes.Buffer
	left int64
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errors.New("evidence.video.maxBytes reached")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// JoinMP4 joins MP4 segments of one encoding into one MP4 without
// re-encoding, with ffmpeg's concat demuxer (`-f concat -c copy`), the
// index moved to the front (+faststart) so a player starts at once. A
// part's span, when not 0, is its `duration` directive: the next part
// starts that long after it (its last frame held over the gap). It needs
// ffmpeg on the daemon's host, as Appium does for more than one segment.
func JoinMP4(ctx context.Context, parts [][]byte, spans []time.Duration) ([]byte, error) {
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil, fmt.Errorf("joining segments needs ffmpeg on the daemon's host: %w", err)
	}
	dir, err := os.MkdirTemp("", "screengraph-video-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var list strings.Builder
	for i, b := range parts {
		name := filepath.Join(dir, fmt.Sprintf("part%03d.mp4", i))
		if err := os.WriteFile(name, b, 0o600); err != nil {
			return nil, err
		}
		fmt.Fprintf(&list, "file '%s'\n", name)
		if i < len(spans) && spans[i] > 0 {
			fmt.Fprintf(&list, "duration %.3f\n", spans[i].Seconds())
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "list.txt"), []byte(list.String()), 0o600); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "joined.mp4")
	cmd := exec.CommandContext(ctx, ffmpeg, "-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "concat", "-safe", "0", "-i", filepath.Join(dir, "list.txt"), "-c", "copy", "-movflags", "+faststart", "-y", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ffmpeg concat: %w: %s", err, bytes.TrimSpace(msg))
	}
	return os.ReadFile(out)
}
