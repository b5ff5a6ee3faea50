package emulator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// world is a host with the simulated emulator as the SDK's emulator binary
// (built once into <sdk>/emulator/emulator), a real adb server on its own
// port, a home dir (console token) and an AVD home.
type world struct {
	srv     *simtest.ADBServer
	home    string
	avdHome string
	m       *emulator.Manager
	lines   []string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{srv: simtest.StartADBServer(t), home: t.TempDir(), avdHome: t.TempDir()}
	sdk := simtest.BuildEmulator(t)
	env := append(w.srv.EmulatorEnv(w.home, w.avdHome), "ANDROID_SDK_ROOT="+sdk, "ANDROID_HOME="+sdk, emulator.EnvCommand+"=")
	w.m = emulator.New(emulator.Config{ADBServer: w.srv.Addr(), Env: env, StateDir: t.TempDir()})
	t.Cleanup(func() {
		// Kill whatever a failed test left running.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ins, _ := w.m.Instances(ctx)
		for _, in := range ins {
			w.m.Stop(ctx, in.Serial)
		}
	})
	return w
}

func (w *world) boot(t testing.TB, req device.BootRequest) (device.BootResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req.Progress = func(l string) { w.lines = append(w.lines, l); t.Log(l) }
	if req.Timeout == 0 {
		req.Timeout = 30 * time.Second
	}
	return w.m.Boot(ctx, req)
}

// TestLifecycleColdQuickKill: -list-avds, config.ini, a cold boot (no snapshot
// yet) saving default_boot on kill, the console (avd name, snapshot list),
// `kill` removing the device from `adb devices`, then a quick boot.
func TestLifecycleColdQuickKill(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Pixel_7", Profile: "quickboot", Config: map[string]string{"hw.lcd.density": "420"}})
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Other"})
	names, err := w.m.ListAVDs(ctx)
	if err != nil || !slices.Equal(names, []string{"Other", "Pixel_7"}) {
		t.Fatalf("ListAVDs = %q, %v", names, err)
	}
	if ok, _ := w.m.HasAVD(ctx, "Pixel_7"); !ok {
		t.Fatal("HasAVD(Pixel_7) = false")
	}
	if cfg, err := w.m.ReadAVDConfig("Pixel_7"); err != nil || cfg["hw.lcd.density"] != "420" || cfg["AvdId"] != "Pixel_7" {
		t.Fatalf("config.ini: %v %v", cfg, err)
	}
	if run, _ := w.m.Running(ctx, "Pixel_7"); len(run) != 0 {
		t.Fatalf("running before boot: %q", run)
	}

	cold, err := w.boot(t, device.BootRequest{AVD: "Pixel_7", SaveSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if cold.Mode != device.BootCold || cold.ColdBootReason == "" || cold.Took < 3500*time.Millisecond {
		t.Errorf("first boot %+v: want a ~4 s cold boot with a reason", cold)
	}
	if run, _ := w.m.Running(ctx, "Pixel_7"); !slices.Equal(run, []string{cold.Serial}) {
		t.Errorf("Running(Pixel_7) = %q, want [%s]", run, cold.Serial)
	}
	if run, _ := w.m.Running(ctx, "Other"); len(run) != 0 {
		t.Errorf("Running(Other) = %q", run)
	}
	c, err := w.m.Console(ctx, cold.Serial)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.AVDName(ctx); err != nil || n != "Pixel_7" {
		t.Errorf("avd name %q %v", n, err)
	}
	if _, err := c.SnapshotList(ctx); err != nil {
		t.Errorf("avd snapshot list: %v", err)
	}
	c.Close()

	if err := w.m.Stop(ctx, cold.Serial); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := w.srv.Run(t, "devices"); strings.Contains(out, cold.Serial) {
		t.Errorf("%s still in adb devices after kill:\n%s", cold.Serial, out)
	}
	if err := w.m.Stop(ctx, cold.Serial); agent.Classify(err).ID != agent.ErrDeviceNotFound {
		t.Errorf("stop of a stopped emulator: %v", err)
	}

	quick, err := w.boot(t, device.BootRequest{AVD: "Pixel_7"})
	if err != nil {
		t.Fatal(err)
	}
	if quick.Mode != device.BootQuick || quick.ColdBootReason != "" || quick.Took >= cold.Took/2 {
		t.Errorf("second boot %+v, first %v: want a quick boot", quick, cold.Took)
	}
	// The lag is measured (the log's "Boot completed" line is read) and lies
	// inside the boot; how small it is, BenchmarkBoot reports
	// (probe-overhead-ms): a bound here would be a timing test on a shared
	// machine.
	for _, r := range []device.BootResult{cold, quick} {
		if r.ReadyLag <= 0 || r.ReadyLag >= r.Took {
			t.Errorf("%s boot: ready lag %v: want in (0, %v)", r.Mode, r.ReadyLag, r.Took)
		}
	}
	t.Logf("cold %v, quick %v, ready lag cold %v quick %v", cold.Took, quick.Took, cold.ReadyLag, quick.ReadyLag)
}

// TestLifecycleSnapshotFailsColdBoot: the quick boot's snapshot does not load;
// the emulator cold boots and the reason is reported.
func TestLifecycleSnapshotFailsColdBoot(t *testing.T) {
	w := newWorld(t)
	dir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Fails", Profile: "snapshot-fails"})
	os.MkdirAll(filepath.Join(dir, "snapshots", "default_boot"), 0o755)
	r, err := w.boot(t, device.BootRequest{AVD: "Fails"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != device.BootCold || !strings.Contains(r.ColdBootReason, "snapshot failed to load") {
		t.Errorf("boot %+v: want COLD with the snapshot failure as reason", r)
	}
	if !slices.ContainsFunc(w.lines, func(l string) bool { return strings.Contains(l, "quick boot failed, cold boot") }) {
		t.Errorf("the fallback was not reported: %q", w.lines)
	}
}

// TestLifecycleReadOnlyInstances: two -read-only boots of one AVD are two
// emulators; a writable boot beside them is refused by the AVD lock... only
// when one holds it, so here both read-only instances run side by side.
func TestLifecycleReadOnlyInstances(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Shared", Profile: "quickboot"})
	a, err := w.boot(t, device.BootRequest{AVD: "Shared", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.boot(t, device.BootRequest{AVD: "Shared", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Serial == b.Serial {
		t.Fatalf("both on %s", a.Serial)
	}
	run, _ := w.m.Running(ctx, "Shared")
	if len(run) != 2 || !slices.Contains(run, a.Serial) || !slices.Contains(run, b.Serial) {
		t.Errorf("Running(Shared) = %q, want %s and %s", run, a.Serial, b.Serial)
	}
}

// TestLifecycleCrashBeforeReady: an emulator process that dies while booting
// is process_error EMULATOR_CRASHED with its last output, not a boot_timeout.
func TestLifecycleCrashBeforeReady(t *testing.T) {
	w := newWorld(t)
	dir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Crashy", Profile: "crash-early.yaml"})
	os.WriteFile(filepath.Join(dir, "crash-early.yaml"), []byte("name: crash-early\nbootDuration: 5s\nfaults:\n  crashAfter: 700ms\n"), 0o644)
	start := time.Now()
	_, err := w.boot(t, device.BootRequest{AVD: "Crashy"})
	e := agent.Classify(err)
	if e == nil || e.ID != agent.ErrProcess || e.Code != emulator.CodeEmulatorCrashed || !strings.Contains(e.Msg, "signal killed") {
		t.Fatalf("crash while booting: %v", err)
	}
	// Reported when the process dies (700 ms in), not at the 30 s boot
	// timeout the wait would otherwise reach.
	if took := time.Since(start); took >= 15*time.Second {
		t.Errorf("crash reported after %v", took)
	}
	if _, err := w.boot(t, device.BootRequest{AVD: "NoSuchAVD"}); agent.Classify(err).Code != emulator.CodeAVDUnknown {
		t.Errorf("unknown AVD: %v", err)
	}
}

// TestLifecycleBootTimeoutKills: a boot that does not finish in time is
// boot_timeout and the emulator is killed (it leaves adb devices).
func TestLifecycleBootTimeoutKills(t *testing.T) {
	w := newWorld(t)
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Slow", Profile: "never-boots"})
	_, err := w.boot(t, device.BootRequest{AVD: "Slow", Timeout: 2 * time.Second})
	if e := agent.Classify(err); e == nil || e.ID != agent.ErrBootTimeout || e.Retryable {
		t.Fatalf("never booting: %v", err)
	}
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ins, _ := w.m.Instances(ctx); len(ins) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("the emulator that timed out is still listed")
}

// TestLifecycleReapIdle: an emulator this host booted is killed once idle
// longer than the policy allows, and kept while used.
func TestLifecycleReapIdle(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Warm", Profile: "quickboot"})
	now := time.Now()
	clock := func() time.Time { return now }
	env := append(w.srv.EmulatorEnv(w.home, w.avdHome), "ANDROID_SDK_ROOT="+simtest.BuildEmulator(t), emulator.EnvCommand+"=")
	w.m = emulator.New(emulator.Config{ADBServer: w.srv.Addr(), Env: env, StateDir: t.TempDir(), Now: clock})
	r, err := w.boot(t, device.BootRequest{AVD: "Warm", ColdBoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != device.BootCold || r.ColdBootReason != "cold boot requested" {
		t.Errorf("ColdBoot: %+v", r)
	}
	now = now.Add(9 * time.Minute)
	w.m.Touch(ctx, r.Serial)
	now = now.Add(9 * time.Minute)
	if killed, err := w.m.Reap(ctx, 10*time.Minute); err != nil || len(killed) != 0 {
		t.Fatalf("reap after 9 idle minutes: %q %v", killed, err)
	}
	now = now.Add(2 * time.Minute)
	if killed, err := w.m.Reap(ctx, 10*time.Minute); err != nil || !slices.Equal(killed, []string{r.Serial}) {
		t.Fatalf("reap after 11 idle minutes: %q %v", killed, err)
	}
	if ins, _ := w.m.Instances(ctx); len(ins) != 0 {
		t.Errorf("still running: %+v", ins)
	}
}

// BenchmarkBoot reports, as the simulator models them (quickboot profile:
// cold 4 s, quick 400 ms), the time to boot-ready of a cold and a quick boot
// and the boot wait's overhead: the time from sys.boot_completed=1 (the
// emulator's "Boot completed in N ms", counted from its start) to the
// readiness probe seeing the device ready.
func BenchmarkBoot(b *testing.B) {
	w := newWorld(b)
	ctx := context.Background()
	simtest.CreateAVD(b, w.avdHome, simtest.AVD{Name: "Bench", Profile: "quickboot"})
	r, err := w.boot(b, device.BootRequest{AVD: "Bench", SaveSnapshot: true})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.m.Stop(ctx, r.Serial); err != nil { // saves default_boot
		b.Fatal(err)
	}
	// The simulator stops the boot animation a tenth of the boot after
	// sys.boot_completed=1 (emulator/sim/android bootAnimLag), and readiness
	// waits for it (parse.ParseBootStatus): the probe's own overhead is the
	// ready lag minus that.
	animLag := map[bool]time.Duration{true: 400 * time.Millisecond, false: 40 * time.Millisecond}
	var cold, quick, lag, overhead time.Duration
	var lags []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, c := range []bool{true, false} {
			r, err := w.boot(b, device.BootRequest{AVD: "Bench", ColdBoot: c})
			if err != nil {
				b.Fatal(err)
			}
			if c {
				cold += r.Took
			} else {
				quick += r.Took
			}
			lag += r.ReadyLag
			overhead += r.ReadyLag - animLag[c]
			lags = append(lags, r.ReadyLag-animLag[c])
			if err := w.m.Stop(ctx, r.Serial); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "cold-ms")
	b.ReportMetric(float64(quick.Milliseconds())/float64(b.N), "quick-ms")
	b.ReportMetric(float64(lag.Microseconds())/1000/float64(2*b.N), "ready-lag-ms")
	b.ReportMetric(float64(overhead.Microseconds())/1000/float64(2*b.N), "probe-overhead-ms")
	b.ReportMetric(float64(slices.Max(lags).Microseconds())/1000, "max-probe-overhead-ms")
}

// TestLifecycleConcurrentWritableBoots: two writable boots of one AVD at the
// same time (two runs naming a stopped AVD): the one that finds the AVD's
// lock held is started again with -read-only, so both get an emulator.
func TestLifecycleConcurrentWritableBoots(t *testing.T) {
	w := newWorld(t)
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Busy", Profile: "quickboot"})
	type result struct {
		r   device.BootResult
		err error
	}
	ch := make(chan result, 2)
	for range 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := w.m.Boot(ctx, device.BootRequest{AVD: "Busy", Timeout: 30 * time.Second})
			ch <- result{r, err}
		}()
	}
	a, b := <-ch, <-ch
	if a.err != nil || b.err != nil {
		t.Fatalf("boots: %v / %v", a.err, b.err)
	}
	if a.r.Serial == b.r.Serial || a.r.ReadOnly == b.r.ReadOnly {
		t.Errorf("boots %+v and %+v: want two emulators, one of them -read-only", a.r, b.r)
	}
	if run, _ := w.m.Running(context.Background(), "Busy"); len(run) != 2 {
		t.Errorf("Running(Busy) = %q", run)
	}
}
