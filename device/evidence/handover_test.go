package evidence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

// leaseBook is a lease history: LeasePage over a fixed list (the other
// Leases methods are not used by the handover).
type leaseBook struct {
	agent.Leases
	leases []agent.Lease
	err    error
}

func (b leaseBook) LeasePage(_ context.Context, _ agent.Scope, q agent.LeaseQuery) ([]agent.Lease, error) {
	if b.err != nil {
		return nil, b.err
	}
	var out []agent.Lease
	for i := len(b.leases) - 1; i >= 0 && len(out) < q.Limit; i-- {
		l := b.leases[i]
		if (q.Device == "" || l.Device == q.Device) && (q.RunID == "" || l.RunID == q.RunID) && (q.Before == 0 || l.FencingToken < q.Before) {
			out = append(out, l)
		}
	}
	return out, nil
}

type runBook map[string]agent.Run

func (b runBook) GetRun(_ context.Context, _ agent.Scope, id string) (agent.Run, error) {
	if r, ok := b[id]; ok {
		return r, nil
	}
	return agent.Run{}, agent.ErrNotFound
}

func pkgRun(id, tenant, pkg string) agent.Run {
	in, _ := json.Marshal(map[string]any{
		"provisionApp":   map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": pkg}},
		"launchOrAttach": map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": pkg}},
	})
	return agent.Run{RunID: id, TenantID: tenant, Input: in}
}

// TestHandoverResetsOnTenantChange: the previous lease of the device was
// another tenant's run: its app is force-stopped, HOME pressed, and the
// clock read, in one shell command; the window starts just after that
// clock. The same tenant's previous run, or no previous lease: only the
// clock. A previous run no longer stored: HOME without a package. A failed
// reset leaves the window dirty and says why without naming the previous run.
func TestHandoverResetsOnTenantChange(t *testing.T) {
	const key = "host1/emulator-5554"
	runs := runBook{"B1": pkgRun("B1", "beta", "com.beta.app"), "A1": pkgRun("A1", "acme", "com.acme.app"), "A2": pkgRun("A2", "acme", "com.acme.app")}
	clock := device.ShellResult{Stdout: "1795856400.123456789\n"}
	for _, tc := range []struct {
		name     string
		leases   []agent.Lease
		storeErr error
		run      string
		answer   device.ShellResult
		wantCmd  string
		reason   string
		wantTime time.Time
	}{
		{"tenant change", []agent.Lease{{Device: key, RunID: "B1", FencingToken: 1}, {Device: key, RunID: "A1", FencingToken: 2}}, nil, "A1", clock,
			"am force-stop 'com.beta.app'; input keyevent 3; date +%s.%N", agent.ResetTenantChange, time.Unix(1795856400, 124e6)},
		{"same tenant", []agent.Lease{{Device: key, RunID: "A1", FencingToken: 1}, {Device: key, RunID: "A2", FencingToken: 2}}, nil, "A2", clock,
			"date +%s.%N", "", time.Unix(1795856400, 124e6)},
		{"first lease", []agent.Lease{{Device: "host1/emulator-5556", RunID: "B1", FencingToken: 1}, {Device: key, RunID: "A1", FencingToken: 2}}, nil, "A1", clock,
			"date +%s.%N", "", time.Unix(1795856400, 124e6)},
		{"previous run pruned", []agent.Lease{{Device: key, RunID: "GONE", FencingToken: 1}, {Device: key, RunID: "A1", FencingToken: 2}}, nil, "A1", clock,
			"input keyevent 3; date +%s.%N", agent.ResetPreviousUnknown, time.Unix(1795856400, 124e6)},
		{"lease history unreadable", nil, errors.New("database is locked"), "A1", clock,
			"input keyevent 3; date +%s.%N", agent.ResetPreviousUnknown, time.Unix(1795856400, 124e6)},
		{"reset fails", []agent.Lease{{Device: key, RunID: "B1", FencingToken: 1}, {Device: key, RunID: "A1", FencingToken: 2}}, nil, "A1",
			device.ShellResult{ExitCode: 1, Stdout: "date: bad\n"},
			"am force-stop 'com.beta.app'; input keyevent 3; date +%s.%N", agent.ResetTenantChange, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := &fakeDevice{answers: map[string]device.ShellResult{"": tc.answer}}
			h := &evidence.Handover{Leases: leaseBook{leases: tc.leases, err: tc.storeErr}, Runs: runs, DeviceFor: func(string) device.Device { return dev }}
			res := h.Handover(context.Background(), agent.HandoverRequest{Run: runs[tc.run], Fence: agent.Fence{Serial: "emulator-5554", Token: 2}})
			if len(dev.cmds) != 1 || dev.cmds[0] != tc.wantCmd {
				t.Errorf("commands %q, want one: %q", dev.cmds, tc.wantCmd)
			}
			if !res.Window.Since.Equal(tc.wantTime) {
				t.Errorf("window since %v, want %v", res.Window.Since, tc.wantTime)
			}
			switch {
			case tc.reason == "":
				if res.Reset != nil || res.Window.Dirty {
					t.Errorf("no reset due, got %+v dirty=%v", res.Reset, res.Window.Dirty)
				}
			case tc.wantTime.IsZero():
				if res.Reset == nil || res.Reset.Outcome != agent.OutcomeFailure || res.Reset.ErrorID == nil || !res.Window.Dirty {
					t.Fatalf("failed reset: %+v dirty=%v", res.Reset, res.Window.Dirty)
				}
			default:
				if res.Reset == nil || res.Reset.Reason != tc.reason || res.Reset.Outcome != agent.OutcomeSuccess || !res.Reset.WentHome ||
					res.Reset.DeviceTime != agent.FormatTS(tc.wantTime) || res.Window.Dirty {
					t.Errorf("reset %+v dirty=%v", res.Reset, res.Window.Dirty)
				}
			}
			if res.Reset != nil {
				b, _ := json.Marshal(res.Reset)
				if strings.Contains(string(b), "beta") || strings.Contains(string(b), "B1") {
					t.Errorf("the reset event names the previous run: %s", b)
				}
			}
		})
	}
}

// TestCaptureLeaseWindow: with the lease's window, logcat reads from its
// start and ANR traces keep only entries stamped inside it (by the entry
// file's millis; one without is left out, as is an older one of the same
// package, another tenant's). An unknown clock captures no log, a dirty
// screen no screenshot or hierarchy.
func TestCaptureLeaseWindow(t *testing.T) {
	since := time.Date(2026, 11, 28, 9, 0, 0, 124e6, time.UTC)
	entry := func(millis int64, pid int, file bool) string {
		s := "========================================\n" + time.UnixMilli(millis).UTC().Format("2006-01-02 15:04:05") + " data_app_anr (text, 100 bytes)\n"
		if file {
			s += "/data/system/dropbox/data_app_anr@" + jsonInt(millis) + ".txt\n"
		}
		return s + "Process: com.example.app\nPID: " + jsonInt(int64(pid)) + "\nSubject: Input dispatching timed out\n\n----- pid " + jsonInt(int64(pid)) + " -----\n\n"
	}
	drop := "Drop box contents: 3 entries\n\n" + entry(since.UnixMilli()-1, 1111, true) + entry(since.UnixMilli()+5, 2222, true) + entry(since.UnixMilli()+9, 3333, false)
	dev := &fakeDevice{shot: pngBytes, answers: map[string]device.ShellResult{
		"pidof":           {ExitCode: 1},
		"logcat":          {Stdout: "11-28 09:00:00.200  4321  4321 I App: started\n"},
		"dumpsys dropbox": {Stdout: drop},
	}}
	c, dir := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactLogcat, agent.ArtifactANRTraces}, 5*time.Second)
	req := request(true)
	req.Window = &agent.EvidenceWindow{Since: since}
	arts, lines := c.Capture(context.Background(), req)
	if len(arts) != 3 || len(lines) != 0 {
		t.Fatalf("artifacts %+v lines %+v", arts, lines)
	}
	b, _ := readBlob(dir, arts[2].SHA256)
	if !strings.Contains(b, "PID: 2222") || strings.Contains(b, "1111") || strings.Contains(b, "3333") {
		t.Errorf("ANR traces outside the window or without a time:\n%s", b)
	}
	if !containsPrefix(dev.cmds, "logcat -d -v threadtime -T '1795856400.124'") {
		t.Errorf("logcat not from the window's start: %q", dev.cmds)
	}

	dev = &fakeDevice{shot: pngBytes, answers: dev.answers}
	c, _ = capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy, agent.ArtifactLogcat, agent.ArtifactANRTraces}, 5*time.Second)
	req.Window = &agent.EvidenceWindow{Dirty: true}
	arts, lines = c.Capture(context.Background(), req)
	if len(arts) != 0 || len(lines) != 4 || len(dev.cmds) != 0 {
		t.Fatalf("dirty, unknown clock: artifacts %+v lines %+v commands %q", arts, lines, dev.cmds)
	}
	if !strings.Contains(lines[0].Text, "another tenant") || !strings.Contains(lines[2].Text, "clock") {
		t.Errorf("lines %+v", lines)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func containsPrefix(cmds []string, p string) bool {
	for _, c := range cmds {
		if strings.HasPrefix(c, p) {
			return true
		}
	}
	return false
}

func readBlob(b agent.BlobStore, sum string) (string, error) {
	data, err := blobs.ReadAll(context.Background(), b, sum)
	return string(data), err
}

type memKV map[string][]byte

func (m memKV) GetKV(_ context.Context, k string) ([]byte, error) {
	v, ok := m[k]
	if !ok {
		return nil, agent.ErrNotFound
	}
	return v, nil
}
func (m memKV) PutKV(_ context.Context, k string, v []byte) error { m[k] = v; return nil }

// TestHandoverRemembersAFailedReset: a due reset that failed (the device
// absent at the lease's start) stays due: the next run, even of the same
// tenant as the run that failed to reset it, resets it and stops the
// previous tenant's app; once done, it is not due any more.
func TestHandoverRemembersAFailedReset(t *testing.T) {
	const key = "host1/emulator-5554"
	runs := runBook{"B1": pkgRun("B1", "beta", "com.beta.app"), "A1": pkgRun("A1", "acme", "com.acme.app"),
		"A2": pkgRun("A2", "acme", "com.acme.app"), "A3": pkgRun("A3", "acme", "com.acme.app")}
	book := leaseBook{leases: []agent.Lease{{Device: key, RunID: "B1", FencingToken: 1}, {Device: key, RunID: "A1", FencingToken: 2},
		{Device: key, RunID: "A2", FencingToken: 3}, {Device: key, RunID: "A3", FencingToken: 4}}}
	kv := memKV{}
	absent := &fakeDevice{answers: map[string]device.ShellResult{}}
	absent.answers[""] = device.ShellResult{ExitCode: 1, Stderr: "error: device 'emulator-5554' not found"}
	h := &evidence.Handover{Leases: book, Runs: runs, KV: kv, DeviceFor: func(string) device.Device { return absent }}
	res := h.Handover(context.Background(), agent.HandoverRequest{Run: runs["A1"], Fence: agent.Fence{Serial: "emulator-5554", Token: 2}})
	if res.Reset == nil || res.Reset.Outcome != agent.OutcomeFailure || !res.Window.Dirty {
		t.Fatalf("A1 on an absent device: %+v dirty=%v", res.Reset, res.Window.Dirty)
	}
	dev := &fakeDevice{answers: map[string]device.ShellResult{"": {Stdout: "1795856400.123456789\n"}}}
	h.DeviceFor = func(string) device.Device { return dev }
	res = h.Handover(context.Background(), agent.HandoverRequest{Run: runs["A2"], Fence: agent.Fence{Serial: "emulator-5554", Token: 3}})
	if res.Reset == nil || res.Reset.Reason != agent.ResetPreviousFailed || res.Reset.Outcome != agent.OutcomeSuccess || res.Window.Dirty ||
		len(dev.cmds) != 1 || dev.cmds[0] != "am force-stop 'com.beta.app'; input keyevent 3; date +%s.%N" {
		t.Fatalf("A2 after A1's failed reset: %+v dirty=%v commands %q", res.Reset, res.Window.Dirty, dev.cmds)
	}
	res = h.Handover(context.Background(), agent.HandoverRequest{Run: runs["A3"], Fence: agent.Fence{Serial: "emulator-5554", Token: 4}})
	if res.Reset != nil || len(dev.cmds) != 2 || dev.cmds[1] != "date +%s.%N" {
		t.Fatalf("A3 after A2's reset: %+v commands %q", res.Reset, dev.cmds)
	}
}
