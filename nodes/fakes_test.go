package nodes

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// scriptDevice is a device.Device whose answers are scripted per test.
type scriptDevice struct {
	serial string
	mu     sync.Mutex
	state  func() (string, error)
	shell  func(cmd string) (device.ShellResult, error)
	calls  []string
}

func (d *scriptDevice) Serial() string { return d.serial }
func (d *scriptDevice) State(context.Context) (string, error) {
	if d.state == nil {
		return "device", nil
	}
	return d.state()
}
func (d *scriptDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	d.mu.Lock()
	d.calls = append(d.calls, cmd)
	d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return device.ShellResult{}, err
	}
	if d.state != nil {
		// As the adb server: a shell reaches a device in state "device" only.
		st, err := d.state()
		switch {
		case err != nil:
			return device.ShellResult{}, err
		case st == "unauthorized":
			return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceUnauthorized, Msg: "device unauthorized."}
		case st != "device":
			return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceOffline, Retryable: true, Msg: "device offline"}
		}
	}
	return d.shell(cmd)
}
func (d *scriptDevice) Install(context.Context, string, device.InstallOptions) error { return nil }
func (d *scriptDevice) Uninstall(context.Context, string) error                      { return nil }
func (d *scriptDevice) Pull(context.Context, string, io.Writer) (int64, error)       { return 0, nil }
func (d *scriptDevice) count(prefix string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// modelDevice runs shell commands on the simulator's in-process Android device
// model (no adb transport), so dumpsys/am/pm answer in their real formats.
type modelDevice struct {
	*android.Device
	serial string
	mu     sync.Mutex
	calls  []string
}

func (d *modelDevice) count(prefix string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (d *modelDevice) Serial() string                        { return d.serial }
func (d *modelDevice) State(context.Context) (string, error) { return "device", nil }
func (d *modelDevice) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	d.mu.Lock()
	d.calls = append(d.calls, cmd)
	d.mu.Unlock()
	var o, e bytes.Buffer
	code := d.Device.Shell(ctx, cmd, strings.NewReader(""), &o, &e)
	return device.ShellResult{Stdout: o.String(), Stderr: e.String(), ExitCode: code}, nil
}
func (d *modelDevice) Install(context.Context, string, device.InstallOptions) error { return nil }
func (d *modelDevice) Uninstall(context.Context, string) error                      { return nil }
func (d *modelDevice) Pull(_ context.Context, remote string, w io.Writer) (int64, error) {
	b, err := d.Device.ReadFile(remote)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(b)
	return int64(n), err
}

func newModel(t *testing.T) *modelDevice { return newModelWith(t, nil) }

// newModelWith is newModel with the default profile changed by edit first.
func newModelWith(t *testing.T, edit func(*android.Profile)) *modelDevice {
	t.Helper()
	b, err := fixtures.Profile("default")
	if err != nil {
		t.Fatal(err)
	}
	p, err := android.ParseProfile("default", b)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&p)
	}
	d, err := android.New(p, android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &modelDevice{Device: d, serial: "emulator-5554"}
}

// fakeDriver is a scripted device.Driver.
type fakeDriver struct {
	mu        sync.Mutex
	live      map[string]map[string]any // session id -> capabilities
	health    map[string]device.Health
	probeErr  error
	createErr error
	created   []map[string]any
	deleted   []string
	next      int
	source    func(id string, n int) (string, error)
	sourceN   int
}

func (f *fakeDriver) CreateSession(_ context.Context, caps map[string]any) (device.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, caps)
	if f.createErr != nil {
		return device.Session{}, f.createErr
	}
	f.next++
	id := "session-" + string(rune('a'+f.next-1))
	if f.live == nil {
		f.live = map[string]map[string]any{}
	}
	echo := map[string]any{"platformName": "Android", "automationName": "UiAutomator2", "udid": caps["appium:udid"]}
	f.live[id] = echo
	return device.Session{ID: id, Capabilities: echo}, nil
}

func (f *fakeDriver) Probe(_ context.Context, id string) (device.Health, map[string]any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.probeErr != nil {
		return device.Unhealthy, nil, f.probeErr
	}
	caps, ok := f.live[id]
	if !ok {
		return device.Unhealthy, map[string]any{"reason": "invalid session id"}, nil
	}
	h := device.Healthy
	if f.health[id] != "" {
		h = f.health[id]
	}
	return h, map[string]any{"capabilities": caps}, nil
}

func (f *fakeDriver) DeleteSession(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, id)
	delete(f.live, id)
	return nil
}

func (f *fakeDriver) PageSource(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	n := f.sourceN
	f.sourceN++
	f.mu.Unlock()
	if f.source == nil {
		return `<hierarchy rotation="0"/>`, nil
	}
	return f.source(id, n)
}

func capture(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "captures", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantID(t *testing.T, err error, id agent.ErrorID, retryable bool) *agent.Error {
	t.Helper()
	e := agent.Classify(err)
	if e == nil {
		t.Fatalf("want %s, got success", id)
	}
	if e.ID != id || e.Retryable != retryable {
		t.Fatalf("want %s (retryable %v), got %s (retryable %v): %v", id, retryable, e.ID, e.Retryable, e)
	}
	return e
}

func checkFailureCommon(t *testing.T, c Common, id agent.ErrorID) {
	t.Helper()
	if c.NodeExecutionOutcomeStatus != OutcomeFailure || c.ErrorID == nil || *c.ErrorID != id ||
		c.Retryable == nil || c.HumanReadableFailureSummary == nil || *c.HumanReadableFailureSummary == "" {
		t.Errorf("common block of a %s failure: %+v", id, c)
	}
}

func checkSuccessCommon(t *testing.T, c Common, node string) {
	t.Helper()
	if c.NodeName != node || c.NodeExecutionOutcomeStatus != OutcomeSuccess || c.ErrorID != nil || c.Retryable != nil ||
		c.HumanReadableFailureSummary != nil {
		t.Errorf("common block of a success: %+v", c)
	}
}

// resolveFunc adapts a closure to device.Resolver (Ports.Resolve).
type resolveFunc func(ctx context.Context, name string) (device.Device, error)

func (f resolveFunc) Resolve(ctx context.Context, name string) (device.Device, error) {
	return f(ctx, name)
}
