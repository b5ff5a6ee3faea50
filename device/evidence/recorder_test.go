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
	var o, e bytes.Buffer
	code := s.d.Shell(ctx, cmd, nil, &o, &e)
	return device.ShellResult{Stdout: o.String(), Stderr: e.String(), ExitCode: code}, nil
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
	data, notes, err := rec.Video(context.Background(), "01RUN")
	want := time.Since(start).Seconds()
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
		if code != 0 {
			t.Errorf("the stale recording ended with %d, want 0 (SIGINT)", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stale recording is still running")
	}
	if n := dev.Recordings(); n != 1 {
		t.Fatalf("%d recordings running, want the run's own", n)
	}
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
