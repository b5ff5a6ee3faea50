package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	droid "github.com/screengraph/screengraph-agent/device/android"
)

func i64(v int64) *int64 { return &v }

func idleIn(minQuiet, maxWait int64) WaitIdleInput {
	return WaitIdleInput{RunID: "01JRUN",
		DeviceRuntimeContext:           &DeviceRuntimeContext{DriverSessionID: "s1", DeviceID: "emulator-5554"},
		ApplicationUnderTestDescriptor: &ApplicationUnderTestDescriptor{AndroidPackageID: demoPkg},
		IdleHeuristicsConfiguration:    IdleHeuristicsConfiguration{MinQuietMillis: i64(minQuiet), MaxWaitMillis: i64(maxWait)}}
}

func startActivity(t *testing.T, d device.Device, act string) {
	t.Helper()
	r, err := d.Shell(context.Background(), "am start-activity -W -S -n "+demoPkg+"/"+act)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("start %s: %v %+v", act, err, r)
	}
}

// HomeActivity animates for 600 ms (frames grow) and has sockets busy for
// 1 s: WaitIdle settles after the animation, on the model's real gfxinfo and
// window dumps, in fake time.
func TestWaitIdleSettlesOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModel(t)
		startActivity(t, d, ".HomeActivity")
		start := time.Now()
		out, err := WaitIdle(context.Background(), idleIn(400, 5000), Ports{Device: d, Driver: &fakeDriver{}})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		checkSuccessCommon(t, out.Common, NodeWaitIdle)
		a := out.UIStabilityAssessment
		if a.QuietWindowObservedMillis < 400 || a.QuietWindowObservedMillis > 400+200 {
			t.Errorf("quiet window %d ms", a.QuietWindowObservedMillis)
		}
		// Idle needs the 600 ms animation to end plus 400 ms of quiet.
		if took < time.Second || took > 1400*time.Millisecond {
			t.Errorf("idle after %v", took)
		}
		if a.NetworkInFlightStatus == NetworkUnknown {
			t.Errorf("network status UNKNOWN: uid or /proc/net/tcp not read")
		}
		b, _ := json.Marshal(out)
		if _, err := ValidateOutput(NodeWaitIdle, b, ModeStrict); err != nil {
			t.Errorf("output %s: %v", b, err)
		}
		// Sockets: busy right after a launch, quiet later.
		startActivity(t, d, ".HomeActivity")
		r, _ := d.Shell(context.Background(), "dumpsys package "+demoPkg)
		uid := droid.DumpsysUID(r.Stdout, demoPkg)
		r, _ = d.Shell(context.Background(), "cat /proc/net/tcp /proc/net/tcp6")
		if s := NetworkStatus(r.Stdout, uid); s != NetworkActive {
			t.Errorf("right after launch: %s (uid %d)\n%s", s, uid, r.Stdout)
		}
		time.Sleep(2 * time.Second)
		r, _ = d.Shell(context.Background(), "cat /proc/net/tcp /proc/net/tcp6")
		if s := NetworkStatus(r.Stdout, uid); s != NetworkNone {
			t.Errorf("2 s after launch: %s", s)
		}
	})
}

// SpinnerActivity is never idle: idle_timeout at maxWaitMillis, no later.
func TestWaitIdleSpinnerTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModel(t)
		startActivity(t, d, ".SpinnerActivity")
		start := time.Now()
		out, err := WaitIdle(context.Background(), idleIn(400, 1500), Ports{Device: d, Driver: &fakeDriver{}})
		wantID(t, err, agent.ErrIdleTimeout, false)
		if took := time.Since(start); took != 1500*time.Millisecond {
			t.Errorf("idle_timeout after %v, want exactly maxWaitMillis in fake time", took)
		}
		checkFailureCommon(t, out.Common, agent.ErrIdleTimeout)
		if out.UIStabilityAssessment == nil || out.UIStabilityAssessment.QuietWindowObservedMillis >= 400 {
			t.Errorf("assessment %+v", out.UIStabilityAssessment)
		}
		b, _ := json.Marshal(out)
		if _, err := ValidateOutput(NodeWaitIdle, b, ModeStrict); err != nil {
			t.Errorf("output %s: %v", b, err)
		}
	})
}

var totalFramesRe = regexp.MustCompile(`Total frames rendered: \d+`)

// quietDevice answers like an idle app: constant frames and focus, no sockets.
func quietDevice(t *testing.T, frames func() int64) *scriptDevice {
	gfx := capture(t, "dumpsys-gfxinfo/api31plus-phone-instagram.txt")
	return &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
		switch {
		case strings.HasPrefix(cmd, "dumpsys package"):
			return device.ShellResult{Stdout: ""}, nil
		case strings.HasPrefix(cmd, "pm list packages -U"):
			return device.ShellResult{Stdout: "package:" + demoPkg + " uid:10123\n"}, nil
		}
		g := gfx
		if frames != nil {
			g = totalFramesRe.ReplaceAllString(gfx, fmt.Sprintf("Total frames rendered: %d", frames()))
		}
		out := g + sampleSplit + "\n4321\n" + sampleSplit + "\n  Display: mDisplayId=0\n    mCurrentFocus=Window{1 u0 com.example.app/com.example.app.HomeActivity}\n" +
			sampleSplit + "\n  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
			"   0: 0F02000A:A1B2 4E4AFA8E:01BB 01 00000000:00000000 00:00000000 00000000 10123        0 4242 1 0000000000000000 20 4 30 10 -1\n"
		if strings.HasSuffix(cmd, "; dumpsys package "+demoPkg) {
			// The first sample also reads the clock and the uid; this dumpsys names none.
			out += sampleSplit + "\n1795248000.123456789\n" + sampleSplit + "\n"
		}
		return device.ShellResult{Stdout: out}, nil
	}}
}

func TestWaitIdleHierarchySignal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The hierarchy changes on the first 5 samples, then holds.
		drv := &fakeDriver{source: func(_ string, n int) (string, error) {
			return fmt.Sprintf("<hierarchy><node text=%q/></hierarchy>", fmt.Sprint(min(n, 5))), nil
		}}
		in := idleIn(600, 5000)
		in.IdleHeuristicsConfiguration.SamplingIntervalMillis = i64(100)
		start := time.Now()
		out, err := WaitIdle(context.Background(), in, Ports{Device: quietDevice(t, nil), Driver: drv})
		if err != nil {
			t.Fatal(err)
		}
		// Sample 5 (t=500 ms) is the first of the stable run; idle 600 ms later.
		if took := time.Since(start); took != 1100*time.Millisecond {
			t.Errorf("idle after %v", took)
		}
		if out.UIStabilityAssessment.QuietWindowObservedMillis != 600 || out.UIStabilityAssessment.NetworkInFlightStatus != NetworkNone {
			t.Errorf("assessment %+v", out.UIStabilityAssessment)
		}
	})
}

func TestWaitIdleErrors(t *testing.T) {
	t.Run("session gone: waits on frames and focus only", func(t *testing.T) {
		calls := 0
		drv := &fakeDriver{source: func(string, int) (string, error) {
			calls++
			return "", &agent.Error{ID: agent.ErrInvalidRequest, Code: CodeSessionGone, Retryable: false}
		}}
		var logs []string
		out, err := WaitIdle(context.Background(), idleIn(400, 5000), Ports{Device: quietDevice(t, nil), Driver: drv,
			Progress: func(l string) { logs = append(logs, l) }})
		if err != nil || out.UIStabilityAssessment == nil {
			t.Fatalf("a dead session should leave frames and focus to decide: %v", err)
		}
		if calls != 1 {
			t.Errorf("page source asked %d times after the session was gone, want 1", calls)
		}
		if !strings.Contains(strings.Join(logs, "\n"), "UI hierarchy unavailable") {
			t.Errorf("no log line says the hierarchy signal was dropped: %q", logs)
		}
	})
	t.Run("retryable page source errors count as change", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			drv := &fakeDriver{source: func(string, int) (string, error) {
				return "", agent.Errorf(agent.ErrTimeout, "page source slow")
			}}
			start := time.Now()
			_, err := WaitIdle(context.Background(), idleIn(400, 1000), Ports{Device: quietDevice(t, nil), Driver: drv})
			wantID(t, err, agent.ErrIdleTimeout, false)
			if took := time.Since(start); took != time.Second {
				t.Errorf("after %v", took)
			}
		})
	})
	t.Run("growing frames keep it busy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := int64(0)
			dev := quietDevice(t, func() int64 { return n })
			inner := dev.shell
			dev.shell = func(cmd string) (device.ShellResult, error) {
				if strings.HasPrefix(cmd, "dumpsys gfxinfo") {
					n += 10
				}
				return inner(cmd)
			}
			_, err := WaitIdle(context.Background(), idleIn(400, 1000), Ports{Device: dev, Driver: &fakeDriver{}})
			wantID(t, err, agent.ErrIdleTimeout, false)
		})
	})
	t.Run("device offline", func(t *testing.T) {
		dev := &scriptDevice{serial: "s", shell: func(string) (device.ShellResult, error) {
			return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceUnauthorized}
		}}
		_, err := WaitIdle(context.Background(), idleIn(400, 1000), Ports{Device: dev, Driver: &fakeDriver{}})
		wantID(t, err, agent.ErrDeviceUnauthorized, false)
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := WaitIdle(ctx, idleIn(400, 1000), Ports{Device: quietDevice(t, nil), Driver: &fakeDriver{}})
		if e := agent.Classify(err); e.ID != agent.ErrInterrupted {
			t.Errorf("got %v", err)
		}
	})
}

func TestNetworkStatus(t *testing.T) {
	hdr := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	row := func(tx, rx string, uid int) string {
		return fmt.Sprintf("   0: 0F02000A:A1B2 4E4AFA8E:01BB 01 %s:%s 00:00000000 00000000 %5d        0 4242 1 0000000000000000 20 4 30 10 -1\n", tx, rx, uid)
	}
	for _, c := range []struct {
		tables string
		uid    int
		want   NetworkInFlightStatus
	}{
		{hdr + row("00000000", "00000000", 10123), 10123, NetworkNone},
		{hdr + row("000001A0", "00000000", 10123), 10123, NetworkActive},
		{hdr + row("00000000", "00000010", 10123), 10123, NetworkActive},
		{hdr + row("000001A0", "00000000", 10999), 10123, NetworkNone}, // another app's socket
		{hdr, 10123, NetworkNone},
		{hdr + row("000001A0", "00000000", 10123), -1, NetworkUnknown},
		{"cat: /proc/net/tcp: Permission denied\n", 10123, NetworkUnknown},
	} {
		if got := NetworkStatus(c.tables, c.uid); got != c.want {
			t.Errorf("NetworkStatus(%q, %d) = %s, want %s", c.tables, c.uid, got, c.want)
		}
	}
}

// timelineDevice is quietDevice with a framestats block: the app's newest
// frame completed at lastFrame() on a device clock that runs with the test's
// (fake) clock; lastFrame is read once per sample.
func timelineDevice(t *testing.T, lastFrame func(now time.Time) time.Time) *scriptDevice {
	dev := quietDevice(t, nil)
	inner := dev.shell
	boot := time.Now().Add(-24 * time.Hour)
	dev.shell = func(cmd string) (device.ShellResult, error) {
		r, err := inner(cmd)
		if err != nil || !strings.HasPrefix(cmd, "dumpsys gfxinfo") {
			return r, err
		}
		now := time.Now()
		fc := lastFrame(now).Sub(boot).Nanoseconds()
		// API 31+ header (search index id 62456845039); IntendedVsync (col 2)
		// 9 ms before FrameCompleted (col 16).
		hdr := "Flags,FrameTimelineVsyncId,IntendedVsync,Vsync,InputEventId,HandleInputStart,AnimationStart,PerformTraversalsStart,DrawStart,FrameDeadline,FrameInterval,FrameStartTime,SyncQueued,SyncStart,IssueDrawCommandsStart,SwapBuffers,FrameCompleted,DequeueBufferDuration,QueueBufferDuration,GpuCompleted,SwapBuffersCompleted,DisplayPresentTime,CommandSubmissionCompleted,"
		cols := make([]string, 23)
		for i := range cols {
			cols[i] = "0"
		}
		cols[2], cols[16] = fmt.Sprint(fc-9_000_000), fmt.Sprint(fc)
		gfx, rest, _ := strings.Cut(r.Stdout, sampleSplit)
		up := now.Sub(boot).Milliseconds()
		gfx = strings.Replace(gfx, "Uptime: 314436624 Realtime: 1105003132", fmt.Sprintf("Uptime: %d Realtime: %d", up, up), 1) +
			"\n---PROFILEDATA---\n" + hdr + "\n" + strings.Join(cols, ",") + ",\n---PROFILEDATA---\n\n"
		return device.ShellResult{Stdout: gfx + sampleSplit + rest}, nil
	}
	return dev
}

func TestWaitIdleCountsBackToTheLastFrame(t *testing.T) {
	t.Run("settled before: two samples ConfirmGap apart", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			settled := time.Now().Add(-2 * time.Second)
			var logs []string
			start := time.Now()
			out, err := WaitIdle(context.Background(), idleIn(500, 5000), Ports{
				Device:   timelineDevice(t, func(time.Time) time.Time { return settled }),
				Driver:   &fakeDriver{},
				Progress: func(l string) { logs = append(logs, l) }})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took != ConfirmGap {
				t.Errorf("idle after %v, want one ConfirmGap (%v)", took, ConfirmGap)
			}
			if q := out.UIStabilityAssessment.QuietWindowObservedMillis; q != (2*time.Second + ConfirmGap).Milliseconds() {
				t.Errorf("quiet window %d ms, want the time since the last frame", q)
			}
			if !strings.Contains(strings.Join(logs, "\n"), "back to the app's last frame") {
				t.Errorf("logs do not say the window was counted back: %q", logs)
			}
		})
	})
	t.Run("recent frame: waits the rest of the window only", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			settled := time.Now().Add(-300 * time.Millisecond)
			start := time.Now()
			out, err := WaitIdle(context.Background(), idleIn(500, 5000), Ports{
				Device: timelineDevice(t, func(time.Time) time.Time { return settled }), Driver: &fakeDriver{}})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took != 200*time.Millisecond {
				t.Errorf("idle after %v, want the 200 ms left of the window", took)
			}
			if q := out.UIStabilityAssessment.QuietWindowObservedMillis; q != 500 {
				t.Errorf("quiet window %d ms", q)
			}
		})
	})
	t.Run("never before the previous different sample", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The frame timeline claims quiet for an hour, but the hierarchy
			// changed on the first 3 samples (100 ms apart): the window starts
			// at the sample before the last change at the earliest.
			drv := &fakeDriver{source: func(_ string, n int) (string, error) {
				return fmt.Sprintf("<hierarchy><node text=%q/></hierarchy>", fmt.Sprint(min(n, 3))), nil
			}}
			in := idleIn(400, 5000)
			in.IdleHeuristicsConfiguration.SamplingIntervalMillis = i64(100)
			settled := time.Now().Add(-time.Hour)
			start := time.Now()
			out, err := WaitIdle(context.Background(), in, Ports{
				Device: timelineDevice(t, func(time.Time) time.Time { return settled }), Driver: drv})
			if err != nil {
				t.Fatal(err)
			}
			// The first sample's timeline promises a complete window, so the
			// second comes ConfirmGap later; samples at 0, 17, 117, 217 all
			// differ, the run starts at 217 and may count back to 117 only:
			// idle at 517.
			if took := time.Since(start); took != 400*time.Millisecond+117*time.Millisecond {
				t.Errorf("idle after %v", took)
			}
			if q := out.UIStabilityAssessment.QuietWindowObservedMillis; q != 400 {
				t.Errorf("quiet window %d ms", q)
			}
		})
	})
	t.Run("new frames keep it busy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// An animation: the newest frame is always one vsync old.
			_, err := WaitIdle(context.Background(), idleIn(400, 1000), Ports{
				Device: timelineDevice(t, func(now time.Time) time.Time { return now.Add(-16 * time.Millisecond) }), Driver: &fakeDriver{}})
			wantID(t, err, agent.ErrIdleTimeout, false)
		})
	})
}

func TestWaitIdleCountQuietFromLastFrameOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		settled := time.Now().Add(-2 * time.Second)
		in := idleIn(500, 5000)
		off := false
		in.IdleHeuristicsConfiguration.CountQuietFromLastFrame = &off
		start := time.Now()
		out, err := WaitIdle(context.Background(), in, Ports{
			Device: timelineDevice(t, func(time.Time) time.Time { return settled }), Driver: &fakeDriver{}})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 500*time.Millisecond || out.UIStabilityAssessment.QuietWindowObservedMillis != 500 {
			t.Errorf("idle after %v, quiet %d ms: want a fresh 500 ms window", took, out.UIStabilityAssessment.QuietWindowObservedMillis)
		}
	})
}

// On the model: a screen that settled before WaitIdle began (the launch's
// animation ended seconds ago) is idle after two samples, its quiet window
// counted back to the last frame of the model's framestats.
func TestWaitIdleSettledScreenOnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newModel(t)
		startActivity(t, d, ".HomeActivity")
		time.Sleep(3 * time.Second) // the 600 ms animation ended 2.4 s ago
		start := time.Now()
		out, err := WaitIdle(context.Background(), idleIn(500, 5000), Ports{Device: d, Driver: &fakeDriver{}})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != ConfirmGap {
			t.Errorf("idle after %v, want one ConfirmGap", took)
		}
		if q := out.UIStabilityAssessment.QuietWindowObservedMillis; q < 2300 || q > 2500 {
			t.Errorf("quiet window %d ms, want about the 2.4 s since the animation's last frame", q)
		}
	})
}

// The app's uid comes with the first sample's shell (`dumpsys package PKG`
// appended), not from a shell of its own, and the first sample's network
// status already uses it; `pm list packages -U` only when that part names
// no uid.
func TestWaitIdleReadsUIDWithFirstSample(t *testing.T) {
	const pkg = "com.example.foodies" // appId=10197 in the capture
	dump := capture(t, "dumpsys-package/api34-emulator-adb-installed.txt")
	gfx := capture(t, "dumpsys-gfxinfo/api31plus-phone-instagram.txt")
	hdr := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	samples := 0
	dev := &scriptDevice{serial: "s", shell: func(cmd string) (device.ShellResult, error) {
		if !strings.HasPrefix(cmd, "dumpsys gfxinfo "+pkg+" framestats; ") {
			t.Errorf("unexpected shell %q", cmd)
			return device.ShellResult{ExitCode: 127}, nil
		}
		tx := "00000000"
		if samples == 0 {
			tx = "000001A0" // bytes in flight at the first sample only
		}
		samples++
		out := gfx + sampleSplit + "\n4321\n" + sampleSplit + "\n  Display: mDisplayId=0\n    mCurrentFocus=Window{1 u0 " + pkg + "/.Main}\n" + sampleSplit + "\n" + hdr +
			"   0: 0F02000A:A1B2 4E4AFA8E:01BB 01 " + tx + ":00000000 00:00000000 00000000 10197        0 4242 1 0000000000000000 20 4 30 10 -1\n"
		if strings.HasSuffix(cmd, "; echo "+sampleSplit+"; dumpsys package "+pkg) {
			out += sampleSplit + "\n1795248000.123456789\n" + sampleSplit + "\n" + dump
		}
		return device.ShellResult{Stdout: out}, nil
	}}
	s, err := takeSample(context.Background(), Ports{Device: dev}, "", pkg, -1, true)
	if err != nil || s.changedByError || s.uid != 10197 || s.net != NetworkActive || s.sig.frames < 0 || s.sig.focus == "" ||
		s.epochMillis != 1795248000123 || s.pids == nil || len(*s.pids) != 1 || (*s.pids)[0] != 4321 {
		t.Errorf("first sample: %+v %+v %v", s, s.sig, err)
	}
	if len(dev.calls) != 1 {
		t.Errorf("first sample: shells %q, want 1", dev.calls)
	}

	synctest.Test(t, func(t *testing.T) {
		dev.calls, samples = nil, 0
		in := idleIn(400, 5000)
		in.ApplicationUnderTestDescriptor.AndroidPackageID = pkg
		var logs []string
		out, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: &fakeDriver{},
			Progress: func(l string) { logs = append(logs, l) }})
		if err != nil || out.UIStabilityAssessment.NetworkInFlightStatus != NetworkNone {
			t.Fatalf("%+v %v", out.UIStabilityAssessment, err)
		}
		if len(dev.calls) != samples || dev.count("dumpsys package") != 0 || dev.count("pm list") != 0 {
			t.Errorf("%d samples, shells %q", samples, dev.calls)
		}
		for i, c := range dev.calls {
			if got := strings.HasSuffix(c, "; dumpsys package "+pkg); got != (i == 0) {
				t.Errorf("sample %d reads the uid: %v", i+1, got)
			}
		}
		if !strings.Contains(strings.Join(logs, "\n"), `package "`+pkg+`" uid 10197`) {
			t.Errorf("logs %q", logs)
		}
	})

	// The dumpsys part names no uid: pm list packages -U, once.
	q := quietDevice(t, nil)
	s, err = takeSample(context.Background(), Ports{Device: q}, "", demoPkg, -1, true)
	if err != nil || s.changedByError || s.uid != 10123 || s.net != NetworkNone || q.count("pm list packages -U "+demoPkg) != 1 || len(q.calls) != 2 {
		t.Errorf("fallback: %+v %v shells %q", s, err, q.calls)
	}
	// The shell fails (retryable): a change, and the uid from pm list.
	inner := q.shell
	q.calls = nil
	q.shell = func(cmd string) (device.ShellResult, error) {
		if strings.HasPrefix(cmd, "dumpsys gfxinfo") {
			return device.ShellResult{}, &agent.Error{ID: agent.ErrDeviceOffline, Retryable: true}
		}
		return inner(cmd)
	}
	s, err = takeSample(context.Background(), Ports{Device: q}, "", demoPkg, -1, true)
	if err != nil || !s.changedByError || s.uid != 10123 || len(q.calls) != 2 {
		t.Errorf("failed shell: %+v %v shells %q", s, err, q.calls)
	}
	// Later samples keep the uid they are given and ask for none.
	q.shell, q.calls = inner, nil
	s, err = takeSample(context.Background(), Ports{Device: q}, "", demoPkg, 10123, false)
	if err != nil || s.uid != 10123 || s.net != NetworkNone || len(q.calls) != 1 || strings.Contains(q.calls[0], "dumpsys package") {
		t.Errorf("later sample: %+v %v shells %q", s, err, q.calls)
	}
}
