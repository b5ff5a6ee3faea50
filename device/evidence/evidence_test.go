package evidence_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

// fakeDevice answers shell commands from a table (by prefix) and records
// them; exec-out answers screencap.
type fakeDevice struct {
	mu      sync.Mutex
	cmds    []string
	answers map[string]device.ShellResult
	shot    []byte
	shotErr error
	block   bool // every command waits for ctx's end
}

func (f *fakeDevice) Serial() string                                               { return "emulator-5554" }
func (f *fakeDevice) State(context.Context) (string, error)                        { return "device", nil }
func (f *fakeDevice) Install(context.Context, string, device.InstallOptions) error { return nil }
func (f *fakeDevice) Uninstall(context.Context, string) error                      { return nil }
func (f *fakeDevice) Pull(context.Context, string, io.Writer) (int64, error) {
	return 0, errors.New("no")
}

func (f *fakeDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	f.mu.Lock()
	f.cmds = append(f.cmds, cmd)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return device.ShellResult{}, ctx.Err()
	}
	for p, r := range f.answers {
		if strings.HasPrefix(cmd, p) {
			return r, nil
		}
	}
	return device.ShellResult{ExitCode: 127, Stderr: "not found"}, nil
}

func (f *fakeDevice) ExecOut(ctx context.Context, cmd string, max int64) ([]byte, error) {
	f.mu.Lock()
	f.cmds = append(f.cmds, "exec:"+cmd)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return f.shot, f.shotErr
}

type fakeDriver struct{ src string }

func (d fakeDriver) CreateSession(context.Context, map[string]any) (device.Session, error) {
	return device.Session{}, nil
}
func (d fakeDriver) Probe(context.Context, string) (device.Health, map[string]any, error) {
	return device.Healthy, nil, nil
}
func (d fakeDriver) DeleteSession(context.Context, string) error { return nil }
func (d fakeDriver) PageSource(_ context.Context, id string) (string, error) {
	if id != "sess-1" {
		return "", errors.New("no such session")
	}
	return d.src, nil
}

var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

func request(failed bool) agent.EvidenceRequest {
	created := time.Date(2026, 11, 26, 5, 0, 0, 250e6, time.UTC)
	return agent.EvidenceRequest{
		Run: agent.Run{RunID: "01JBD0QJ8K9M2N3P4Q5R6S7T8V", Serial: "emulator-5554", CreatedAt: created,
			Input: json.RawMessage(`{"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}}`)},
		Node: "LaunchOrAttach", Failed: failed,
		Outputs: map[string]json.RawMessage{"EnsureDevice": json.RawMessage(`{"deviceRuntimeContext":{"driverSessionId":"sess-1","deviceId":"emulator-5554"}}`)},
	}
}

func capturer(t *testing.T, dev *fakeDevice, kinds []string, budget time.Duration) (*evidence.Capturer, agent.BlobStore) {
	t.Helper()
	dir, err := blobs.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &evidence.Capturer{Blobs: dir, DeviceFor: func(string) device.Device { return dev },
		Driver: fakeDriver{src: `<hierarchy><node package="com.example.app"/></hierarchy>`},
		Kinds:  func(agent.RetryPolicy, bool) ([]string, time.Duration) { return kinds, budget }}, dir
}

func TestCaptureKinds(t *testing.T) {
	dev := &fakeDevice{shot: pngBytes, answers: map[string]device.ShellResult{
		"pidof":                      {Stdout: "4321\n"},
		"logcat -d -v threadtime -T": {Stdout: "11-26 05:00:01.000  4321  4321 I App: started\n"},
		"dumpsys dropbox --print --file data_app_anr": {Stdout: "Drop box contents: 0 entries\n(No entries found.)\n"},
	}}
	c, dir := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy, agent.ArtifactLogcat, agent.ArtifactANRTraces}, 5*time.Second)
	arts, lines := c.Capture(context.Background(), request(true))
	if len(lines) != 0 {
		t.Errorf("lines %v", lines)
	}
	// No ANR entry: no anr_traces artifact, and no complaint either.
	if len(arts) != 3 || arts[0].Kind != agent.ArtifactScreenshot || arts[1].Kind != agent.ArtifactUIHierarchy || arts[2].Kind != agent.ArtifactLogcat {
		t.Fatalf("artifacts %+v", arts)
	}
	for _, a := range arts {
		b, err := blobs.ReadAll(context.Background(), dir, a.SHA256)
		if err != nil || int64(len(b)) != a.Bytes {
			t.Errorf("%s: blob %d bytes, %v; row says %d", a.Kind, len(b), err, a.Bytes)
		}
	}
	// The run's window by epoch (no time zone to get wrong), the app's pid,
	// then the crash buffer of the same window.
	var logcats []string
	for _, c := range dev.cmds {
		if strings.HasPrefix(c, "logcat") {
			logcats = append(logcats, c)
		}
	}
	want := []string{"logcat -d -v threadtime -T '1795669200.250' --pid=4321", "logcat -d -v threadtime -b crash -T '1795669200.250'"}
	if strings.Join(logcats, "|") != strings.Join(want, "|") {
		t.Errorf("logcat commands %q, want %q", logcats, want)
	}
	if !slices.Contains(dev.cmds, "exec:screencap -p") {
		t.Errorf("screenshot not through adb exec-out: %q", dev.cmds)
	}
}

func TestCaptureFailuresAreLines(t *testing.T) {
	// Not a PNG (a PTY-mangled one) is refused; the hierarchy still comes.
	dev := &fakeDevice{shot: []byte("\x89PNG\r\r\n\x1a\r\n")}
	c, _ := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy}, 5*time.Second)
	arts, lines := c.Capture(context.Background(), request(false))
	if len(arts) != 1 || arts[0].Kind != agent.ArtifactUIHierarchy || len(lines) != 1 || !strings.Contains(lines[0].Text, "screenshot not captured") {
		t.Fatalf("artifacts %+v lines %+v", arts, lines)
	}
	// A wedged device: the budget (on synctest's clock) ends the capture,
	// each kind says so.
	synctest.Test(t, func(t *testing.T) {
		dev := &fakeDevice{block: true}
		c, _ := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactLogcat}, 20*time.Second)
		start := time.Now()
		arts, lines := c.Capture(context.Background(), request(true))
		if len(arts) != 0 || len(lines) != 2 || time.Since(start) != 20*time.Second || !strings.Contains(lines[1].Text, "budget ran out") {
			t.Fatalf("wedged device: %+v %+v after %v", arts, lines, time.Since(start))
		}
	})
	// Nothing asked: nothing done.
	c, _ = capturer(t, &fakeDevice{}, nil, time.Second)
	if arts, lines := c.Capture(context.Background(), request(false)); arts != nil || lines != nil {
		t.Errorf("no kinds: %v %v", arts, lines)
	}
}

// A device the run could not reach is not asked (each command would wait
// out the adb reconnect grace): one line, no command.
func TestCaptureSkipsAnUnreachableDevice(t *testing.T) {
	dev := &fakeDevice{}
	c, _ := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactLogcat}, 5*time.Second)
	req := request(true)
	req.ErrorID = agent.ErrDeviceNotFound
	arts, lines := c.Capture(context.Background(), req)
	if len(arts) != 0 || len(lines) != 1 || len(dev.cmds) != 0 || !strings.Contains(lines[0].Text, "device_not_found") {
		t.Fatalf("artifacts %v lines %v commands %v", arts, lines, dev.cmds)
	}
}
