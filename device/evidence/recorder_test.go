package evidence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// simDevice is device.Device over a simulated device's shell and files,
// without adb in between (the daemon's tests go through the real adb).
type simDevice struct{ d *android.Device }

func (s simDevice) Serial() string                                               { return "emulator-5554" }
func (s simDevice) State(context.Context) (string, error)                        { return "device", nil }
func (s simDevice) Install(context.Context, string, device.InstallOptions) error { return nil }
func (s simDevice) Uninstall(context.Context, string) error                      { return nil }
func (s simDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	if fn := device.StartedHook(ctx); fn != nil {
		fn() // adbd's OKAY: the shell is started before its output is read
	}
	var o, e bytes.Buffer
	code := s.d.Shell(ctx, cmd, nil, &o, &e)
	return device.ShellResult{Stdout: o.String(), Stderr: e.String(), ExitCode: code, TransportID: 1}, nil
}
func (s simDevice) Pull(_ context.Context, remote string, w io.Writer) (int64, error) {
	b, err := s.d.ReadFile(remote)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

func duration(t *testing.T, data []byte) float64 {
	t.Helper()
	f := filepath.Join(t.TempDir(), "v.mp4")
	os.WriteFile(f, data, 0o600)
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	s, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	return s
}

// TestRecorderSegmentsJoined: with 2 s segments, the recorder restarts
// screenrecord as each ends and joins the parts into one MP4 as long as
// the recording (within 10%), and leaves no process or file behind.
func TestRecorderSegmentsJoined(t *testing.T) {
	dev, err := android.New(simtest.Profile(t, "default"), android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &evidence.Recorder{DeviceFor: func(string) device.Device { return simDevice{dev} }, FirstNode: "LaunchOrAttach",
		Settings: func(agent.RetryPolicy) (evidence.VideoSettings, bool) {
			return evidence.VideoSettings{ShortSide: 360, BitRate: 1000000, Segment: 2 * time.Second, MaxLength: time.Minute, MaxBytes: 1 << 20}, true
		}}
	out, _ := json.Marshal(map[string]any{"deviceRuntimeContext": map[string]any{"deviceId": "emulator-5554"}})
	req := agent.RecordRequest{Run: agent.Run{RunID: "01RUN"}, Node: "LaunchOrAttach", Outputs: map[string]json.RawMessage{"EnsureDevice": out}}
	start := time.Now()
	rec.NodeStarting(context.Background(), req)
	deadline := time.After(30 * time.Second)
	for {
		if _, err := dev.ReadFile("/data/local/tmp/screengraph-video-01RUN-002.mp4"); err == nil {
			break
		}
		select {
		case <-deadline:
			t.Fatal("no third segment")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Recorded until Video stops it, first thing: the pull and the join
	// after (seconds on a loaded host) are no part of the recording.
	want := time.Since(start).Seconds()
	data, notes, err := rec.Video(context.Background(), "01RUN")
	if err != nil || len(notes) != 0 {
		t.Fatalf("Video: %v %v", err, notes)
	}
	got := duration(t, data)
	t.Logf("%d bytes, %.2f s for %.2f s recorded", len(data), got, want)
	if got < 0.9*want || got > 1.1*want {
		t.Errorf("joined video %.2f s, recorded %.2f s", got, want)
	}
	if n := dev.Recordings(); n != 0 {
		t.Errorf("%d screenrecord left", n)
	}
	ls := simDevice{dev}
	if r, _ := ls.Shell(context.Background(), "ls /data/local/tmp"); strings.Contains(r.Stdout, "screengraph-video") {
		t.Errorf("files left: %s", r.Stdout)
	}
}

// TestRecorderStopsStaleRecording: a recording a crashed daemon left on the
// device (its file under our prefix) is stopped, and its file removed,
// before the run's recording starts; at the end nothing is left.
func TestRecorderStopsStaleRecording(t *testing.T) {
	dev, err := android.New(simtest.Profile(t, "default"), android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stale := make(chan int, 1)
	go func() {
		var o, e bytes.Buffer
		stale <- dev.Shell(context.Background(), "screenrecord --size 360x800 /data/local/tmp/screengraph-video-01OLD-000.mp4", nil, &o, &e)
	}()
	for dev.Recordings() == 0 {
		select {
		case code := <-stale:
			t.Fatalf("the stale recording ended at once: %d", code)
		case <-time.After(20 * time.Millisecond):
		}
	}
	rec := &evidence.Recorder{DeviceFor: func(string) device.Device { return simDevice{dev} }, FirstNode: "LaunchOrAttach",
		Settings: func(agent.RetryPolicy) (evidence.VideoSettings, bool) {
			return evidence.VideoSettings{ShortSide: 360, BitRate: 1000000, Segment: 180 * time.Second, MaxLength: time.Minute, MaxBytes: 1 << 20}, true
		}}
	out, _ := json.Marshal(map[string]any{"deviceRuntimeContext": map[string]any{"deviceId": "emulator-5554"}})
	rec.NodeStarting(context.Background(), agent.RecordRequest{Run: agent.Run{RunID: "01NEW"}, Node: "LaunchOrAttach",
		Outputs: map[string]json.RawMessage{"EnsureDevice": out}})
	select {
	case code := <-stale:
		if code != 137 {
			t.Errorf("the stale recording ended with %d, want 137 (SIGKILL: its file is deleted anyway)", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stale recording is still running")
	}
	// NodeStarting returned once the device took the command, not when
	// the encoder runs: the run's own recording shows up after.
	waitRecordings(t, dev, 1)
	if _, err := dev.ReadFile("/data/local/tmp/screengraph-video-01OLD-000.mp4"); err == nil {
		t.Error("the stale recording's file was kept")
	}
	rec.Drop(context.Background(), "01NEW")
	if n := dev.Recordings(); n != 0 {
		t.Errorf("%d recordings left after Drop", n)
	}
	if r, _ := (simDevice{dev}).Shell(context.Background(), "ls /data/local/tmp"); strings.Contains(r.Stdout, "screengraph-video") {
		t.Errorf("files left: %s", r.Stdout)
	}
}

// waitRecordings waits (at most 30 s) until the device runs n recordings.
func waitRecordings(t *testing.T, dev *android.Device, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for dev.Recordings() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d recordings running, want %d", dev.Recordings(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingDevice logs the commands sent to a simulated device and fails
// those starting with failPrefix (a device gone mid-command).
type countingDevice struct {
	simDevice
	mu         sync.Mutex
	cmds       []string
	failPrefix string
}

func (c *countingDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	c.mu.Lock()
	c.cmds = append(c.cmds, cmd)
	fail := c.failPrefix != "" && strings.HasPrefix(cmd, c.failPrefix)
	c.mu.Unlock()
	if fail {
		return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceOffline, Msg: "gone"}
	}
	return c.simDevice.Shell(ctx, cmd)
}

func (c *countingDevice) failing(prefix string) {
	c.mu.Lock()
	c.failPrefix = prefix
	c.mu.Unlock()
}

func (c *countingDevice) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.cmds
	c.cmds = nil
	return out
}

// TestRecorderWarmStart (issue 26 part 2): the first recording on an adb
// transport sweeps and reads `wm size` in one shell; later runs on the
// same transport start screenrecord only, and drop it (SIGKILL and rm) in
// one shell. A new transport (reconnect, reboot) or a drop that failed
// sweeps again. NodeStarting returns once the device took the command.
func TestRecorderWarmStart(t *testing.T) {
	dev, err := android.New(simtest.Profile(t, "default"), android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cd := &countingDevice{simDevice: simDevice{dev}}
	var tid atomic.Int64
	tid.Store(1)
	rec := &evidence.Recorder{DeviceFor: func(string) device.Device { return cd }, FirstNode: "LaunchOrAttach",
		Transport: func(string) int64 { return tid.Load() },
		Settings: func(agent.RetryPolicy) (evidence.VideoSettings, bool) {
			return evidence.VideoSettings{ShortSide: 360, BitRate: 1000000, Segment: 180 * time.Second, MaxLength: time.Minute, MaxBytes: 1 << 20}, true
		}}
	out, _ := json.Marshal(map[string]any{"deviceRuntimeContext": map[string]any{"deviceId": "emulator-5554"}})
	run := func(id string, wantSweep bool) {
		t.Helper()
		rec.NodeStarting(context.Background(), agent.RecordRequest{Run: agent.Run{RunID: id}, Node: "LaunchOrAttach",
			Outputs: map[string]json.RawMessage{"EnsureDevice": out}})
		cmds := cd.take()
		want := 1
		if wantSweep {
			want = 2
			if len(cmds) != 2 || !strings.Contains(cmds[0], "wm size") || !strings.HasPrefix(cmds[0], "pkill -KILL -f ") {
				t.Fatalf("%s: start sent %q, want the sweep and `wm size` in one shell, then screenrecord", id, cmds)
			}
		}
		if len(cmds) != want || !strings.HasPrefix(cmds[want-1], "screenrecord ") {
			t.Fatalf("%s: start sent %q, want %d commands ending with screenrecord", id, cmds, want)
		}
		waitRecordings(t, dev, 1)
		rec.Drop(context.Background(), id)
		if cmds := cd.take(); len(cmds) != 1 {
			t.Errorf("%s: Drop sent %q, want one shell", id, cmds)
		}
		waitRecordings(t, dev, 0)
		if r, _ := (simDevice{dev}).Shell(context.Background(), "ls /data/local/tmp"); strings.Contains(r.Stdout, "screengraph-video") {
			t.Errorf("%s: files left: %s", id, r.Stdout)
		}
	}
	run("01RUNA", true)
	run("01RUNB", false)
	tid.Store(2) // the device reconnected
	run("01RUNC", true)
	// A drop that fails: the recording's shell is closed (SIGHUP ends it),
	// and the next run sweeps.
	rec.NodeStarting(context.Background(), agent.RecordRequest{Run: agent.Run{RunID: "01RUND"}, Node: "LaunchOrAttach",
		Outputs: map[string]json.RawMessage{"EnsureDevice": out}})
	waitRecordings(t, dev, 1)
	cd.failing("pkill -KILL")
	rec.Drop(context.Background(), "01RUND")
	cd.failing("")
	waitRecordings(t, dev, 0)
	cd.take()
	run("01RUNE", true)
}
