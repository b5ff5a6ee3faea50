package sim_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// syncBuffer is an io.Writer safe for the process's stdout/stderr copiers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// emuProc is one run of the simulated emulator binary.
type emuProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// emuWorld is what the binary runs against: a HOME, an AVD home, a real adb
// server, the built binary.
type emuWorld struct {
	t       *testing.T
	srv     *simtest.ADBServer
	home    string
	avdHome string
	bin     string
}

func newEmuWorld(t *testing.T) *emuWorld {
	if testing.Short() {
		// The first of these tests builds the stand-in binary: minutes on a
		// loaded 2-core machine (232-345 s measured), most of -short's time.
		t.Skip("slow under -short (builds and runs the simulator as the SDK's emulator binary); make test runs it")
	}
	home := t.TempDir()
	// The adb CLI reads the console token from $HOME too (`adb emu`).
	t.Setenv("HOME", home)
	avdHome := filepath.Join(home, ".android", "avd")
	os.MkdirAll(avdHome, 0o755)
	sdk := simtest.BuildEmulator(t)
	return &emuWorld{t: t, srv: simtest.StartADBServer(t), home: home, avdHome: avdHome, bin: filepath.Join(sdk, "emulator", "emulator")}
}

func (w *emuWorld) start(args ...string) *emuProc {
	w.t.Helper()
	return w.startEnv(w.srv.EmulatorEnv(w.home, w.avdHome), args...)
}

func (w *emuWorld) startEnv(env []string, args ...string) *emuProc {
	w.t.Helper()
	p := &emuProc{t: w.t, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(w.bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	w.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.done
		}
	})
	return p
}

// wait waits for the process to end and returns its error (nil: exit 0).
func (p *emuProc) wait(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("emulator still running after %v; output:\n%s", d, p.out.String())
		return nil
	}
}

func (p *emuProc) waitOutput(s string, d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.out.String(), s) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("no %q in the emulator's output within %v:\n%s", s, d, p.out.String())
}

// freeConsolePort is an even port whose pair (port+1) is free.
func freeConsolePort(t *testing.T) int {
	for i := 0; i < 200; i++ {
		p := simtest.FreePort(t) &^ 1
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		a.Close()
		if err == nil {
			b.Close()
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// bootedAfter polls `getprop sys.boot_completed` (as CI runners do) and
// returns how long after since it first read 1.
func (w *emuWorld) bootedAfter(serial string, since time.Time, timeout time.Duration) time.Duration {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, _, code := w.srv.Run(w.t, "-s", serial, "shell", "getprop", "sys.boot_completed")
		if code == 0 && strings.TrimSpace(out) == "1" {
			return time.Since(since)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.t.Fatalf("%s did not boot within %v", serial, timeout)
	return 0
}

// TestEmulatorBinaryColdQuickKill runs the simulator as the SDK's emulator
// binary: -list-avds, a cold boot (no snapshot yet), the console through
// `adb emu`, the lock refusing a second writable instance, `adb emu kill`
// saving default_boot and dropping the device, then a quick boot from it.
func TestEmulatorBinaryColdQuickKill(t *testing.T) {
	w := newEmuWorld(t)
	avdDir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Pixel_API_34", APILevel: 33, Profile: "quickboot"})
	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Another_AVD"})

	list := w.start("-list-avds")
	if err := list.wait(10 * time.Second); err != nil || list.out.String() != "Another_AVD\nPixel_API_34\n" {
		t.Fatalf("-list-avds: %v %q", err, list.out.String())
	}

	port := freeConsolePort(t)
	serial := "emulator-" + strconv.Itoa(port)
	flags := []string{"-avd", "Pixel_API_34", "-port", strconv.Itoa(port), "-no-window", "-no-audio", "-no-boot-anim",
		"-gpu", "swiftshader_indirect", "-accel", "auto", "-camera-back", "none", "-no-snapshot-save"}
	start := time.Now()
	p := w.start(flags[:len(flags)-1]...)
	w.srv.WaitState(t, serial, "device", 20*time.Second)
	cold := w.bootedAfter(serial, start, 20*time.Second)
	if cold < 3500*time.Millisecond {
		t.Errorf("cold boot took %v, the profile says 4s", cold)
	}
	if strings.Contains(p.out.String(), "Successfully loaded snapshot") {
		t.Errorf("cold boot logged a snapshot load:\n%s", p.out.String())
	}
	if out, _, _ := w.srv.Run(t, "-s", serial, "shell", "getprop", "ro.build.version.sdk"); strings.TrimSpace(out) != "33" {
		t.Errorf("API level %q, want 33 from config.ini's image.sysdir.1", out)
	}

	// An app update the user installs stays across restarts (user data).
	if out, errOut, code := w.srv.Run(t, "-s", serial, "install", "-r", filepath.Join("..", "..", "fixtures", "apks", "demo-v2.apk")); code != 0 {
		t.Fatalf("adb install demo-v2: %s %s", out, errOut)
	}

	// A second writable instance of the same AVD refuses to start.
	second := w.start("-avd", "Pixel_API_34", "-port", strconv.Itoa(freeConsolePort(t)))
	var ee *exec.ExitError
	if err := second.wait(10 * time.Second); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("second instance: %v, want exit 1", err)
	}
	if want := "ERROR   | Running multiple emulators with the same AVD \nERROR   | is an experimental feature.\nERROR   | Please use -read-only flag to enable this feature.\n"; !strings.Contains(second.out.String(), want) {
		t.Errorf("second instance output:\n%s", second.out.String())
	}

	if out, _, code := w.srv.Run(t, "-s", serial, "emu", "avd", "name"); code != 0 || strings.TrimSpace(strings.Split(out, "\n")[0]) != "Pixel_API_34" {
		t.Errorf("adb emu avd name: %q exit %d", out, code)
	}
	if out, _, code := w.srv.Run(t, "-s", serial, "emu", "kill"); code != 0 || !strings.Contains(out, "OK: killing emulator, bye bye") {
		t.Errorf("adb emu kill: %q exit %d", out, code)
	}
	if err := p.wait(10 * time.Second); err != nil {
		t.Errorf("after kill: %v\n%s", err, p.out.String())
	}
	w.srv.WaitState(t, serial, "", 10*time.Second)
	if _, err := os.Stat(filepath.Join(avdDir, "snapshots", sim.DefaultBootSnapshot)); err != nil {
		t.Fatalf("no default_boot saved on exit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(avdDir, "hardware-qemu.ini.lock")); !os.IsNotExist(err) {
		t.Errorf("lock left after a clean exit: %v", err)
	}

	// Quick boot from default_boot; -no-snapshot-save keeps it as it is.
	start = time.Now()
	q := w.start(flags...)
	w.srv.WaitState(t, serial, "device", 20*time.Second)
	quick := w.bootedAfter(serial, start, 20*time.Second)
	q.waitOutput("Successfully loaded snapshot 'default_boot'", time.Second)
	if out, _, _ := w.srv.Run(t, "-s", serial, "shell", "dumpsys", "package", "com.example.app"); !strings.Contains(out, "versionCode=2 ") {
		t.Errorf("the update installed before the restart is gone:\n%s", out)
	}
	q.waitOutput("Boot completed in 400 ms", time.Second)
	for _, f := range []string{"quickboot-loaded.txt", "boot-completed.txt"} {
		b, _ := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "emulator", f))
		want := strings.Fields(logLines(string(b), "INFO")[0])
		found := false
		for _, l := range logLines(q.out.String(), "INFO") {
			if g := strings.Fields(l); len(g) == len(want) && strings.Join(g[:len(g)-2], " ") == strings.Join(want[:len(want)-2], " ") {
				found = true
			}
		}
		if !found {
			t.Errorf("no line of the form %q in:\n%s", want, q.out.String())
		}
	}
	if quick >= cold/2 {
		t.Errorf("quick boot %v not faster than cold boot %v", quick, cold)
	}
	q.cmd.Process.Signal(syscall.SIGTERM)
	if err := q.wait(10 * time.Second); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	q.waitOutput("WARNING | Discarding the changed state (command-line flag).", time.Second)
}

// TestEmulatorBinarySnapshotFailsReadOnlyCrash: a snapshot that fails to load
// (logged, cold boot), two -read-only instances of one AVD side by side, and
// the crash fault (the device leaves adb; the stale lock does not block the
// next start).
func TestEmulatorBinarySnapshotFailsReadOnlyCrash(t *testing.T) {
	w := newEmuWorld(t)
	dir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Fails", Profile: "snapshot-fails"})
	os.MkdirAll(filepath.Join(dir, "snapshots", sim.DefaultBootSnapshot), 0o755)
	port := freeConsolePort(t)
	p := w.start("-avd", "Fails", "-port", strconv.Itoa(port), "-no-window")
	p.waitOutput("WARNING | Cold boot: snapshot failed to load", 10*time.Second)
	w.srv.WaitState(t, "emulator-"+strconv.Itoa(port), "device", 20*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "snapshots", sim.DefaultBootSnapshot)); !os.IsNotExist(err) {
		t.Errorf("the snapshot that failed to load is still there: %v", err)
	}
	w.srv.Run(t, "-s", "emulator-"+strconv.Itoa(port), "emu", "kill")
	p.wait(10 * time.Second)

	simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Shared"})
	a, b := freeConsolePort(t), 0
	for b == 0 || b == a {
		b = freeConsolePort(t)
	}
	pa := w.start("-avd", "Shared", "-port", strconv.Itoa(a), "-read-only", "-no-window")
	pb := w.start("-avd", "Shared", "-port", strconv.Itoa(b), "-read-only", "-no-window")
	w.srv.WaitState(t, "emulator-"+strconv.Itoa(a), "device", 20*time.Second)
	w.srv.WaitState(t, "emulator-"+strconv.Itoa(b), "device", 20*time.Second)
	if out, _, _ := w.srv.Run(t, "-s", "emulator-"+strconv.Itoa(b), "emu", "avd", "snapshot", "save", "x"); !strings.Contains(out, `KO: Snapshot save is disabled because "-read-only" was specified`) {
		t.Errorf("snapshot save under -read-only: %q", out)
	}
	w.srv.Run(t, "-s", "emulator-"+strconv.Itoa(a), "emu", "kill")
	w.srv.Run(t, "-s", "emulator-"+strconv.Itoa(b), "emu", "kill")
	pa.wait(10 * time.Second)
	pb.wait(10 * time.Second)
	if _, err := os.Stat(filepath.Join(w.avdHome, "Shared.avd", "snapshots")); !os.IsNotExist(err) {
		t.Errorf("-read-only instances saved a snapshot: %v", err)
	}

	cdir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Crashy", Profile: "crash.yaml"})
	os.WriteFile(filepath.Join(cdir, "crash.yaml"), []byte("name: crash-1500ms\nfaults:\n  crashAfter: 1500ms\n"), 0o644)
	port = freeConsolePort(t)
	serial := "emulator-" + strconv.Itoa(port)
	c := w.start("-avd", "Crashy", "-port", strconv.Itoa(port), "-no-window")
	w.srv.WaitState(t, serial, "device", 20*time.Second)
	err := c.wait(10 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("crash fault: %v, want killed by SIGKILL", err)
	}
	w.srv.WaitState(t, serial, "", 10*time.Second)
	if _, err := os.Stat(filepath.Join(cdir, "hardware-qemu.ini.lock")); err != nil {
		t.Errorf("a crashed emulator leaves its lock behind: %v", err)
	}
	again := w.start("-avd", "Crashy", "-port", strconv.Itoa(port), "-no-window")
	w.srv.WaitState(t, serial, "device", 20*time.Second)
	again.cmd.Process.Signal(syscall.SIGTERM)
	again.wait(10 * time.Second)
}

// TestParseEmulatorArgs: the real flags, @NAME, unknown real flags skipped
// with their values, -qemu ending the emulator's options.
func TestParseEmulatorArgs(t *testing.T) {
	o, err := sim.ParseEmulatorArgs([]string{"@Pixel", "-port", "5556", "-no-window", "-noaudio", "-no-boot-anim",
		"-read-only", "-no-snapshot-save", "-no-snapshot-load", "-no-snapshot", "-wipe-data", "-gpu", "swiftshader_indirect",
		"-accel", "off", "-memory", "2048", "-netdelay", "none", "-verbose", "-qemu", "-m", "2048"})
	if err != nil {
		t.Fatal(err)
	}
	want := sim.EmulatorOptions{AVD: "Pixel", Port: 5556, NoWindow: true, NoAudio: true, NoBootAnim: true, ReadOnly: true,
		NoSnapshotSave: true, NoSnapshotLoad: true, NoSnapshot: true, WipeData: true, GPU: "swiftshader_indirect", Accel: "off",
		Ignored: []string{"-memory", "2048", "-netdelay", "none", "-verbose", "-qemu", "-m", "2048"}}
	if strings.Join(o.Ignored, " ") != strings.Join(want.Ignored, " ") {
		t.Errorf("ignored %q", o.Ignored)
	}
	o.Ignored, want.Ignored = nil, nil
	if !reflect.DeepEqual(o, want) {
		t.Errorf("got %+v\nwant %+v", o, want)
	}
	if _, err := sim.ParseEmulatorArgs([]string{"-port", "5555"}); err == nil {
		t.Error("odd console port accepted")
	}
}

// logLines are the lines of emulator output at level, with the level column
// normalized ("ERROR   | x" and "ERROR        | x" -> "ERROR | x": emulator
// versions pad it differently).
func logLines(out, level string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		lv, msg, ok := strings.Cut(l, "|")
		if ok && strings.TrimSpace(lv) == level {
			got = append(got, level+" |"+msg)
		}
	}
	return got
}

// TestEmulatorBinaryErrorTexts compares the simulator's errors with real
// emulator output (fixtures/captures/emulator, cited in SOURCES.md).
func TestEmulatorBinaryErrorTexts(t *testing.T) {
	w := newEmuWorld(t)
	b, _ := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "emulator", "no-avd-v32.txt"))
	p := w.start()
	p.wait(10 * time.Second)
	if got, want := logLines(p.out.String(), "ERROR"), logLines(string(b), "ERROR"); !reflect.DeepEqual(got, want) {
		t.Errorf("no AVD:\n got %q\nwant %q", got, want)
	}
	b, _ = os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "emulator", "unknown-avd.txt"))
	var env []string
	for _, kv := range w.srv.EmulatorEnv(w.home, w.avdHome) {
		if !strings.HasPrefix(kv, "ANDROID_AVD_HOME=") && !strings.HasPrefix(kv, "ANDROID_SDK_HOME=") {
			env = append(env, kv)
		}
	}
	p = w.startEnv(env, "-avd", "ci", "-no-window")
	p.wait(10 * time.Second)
	if got, want := logLines(p.out.String(), "ERROR"), logLines(string(b), "ERROR"); len(got) < 2 || !reflect.DeepEqual(got[:2], want) {
		t.Errorf("unknown AVD:\n got %q\nwant %q", got, want)
	}
	b, _ = os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "emulator", "multiple-instances-v32.txt"))
	dir := simtest.CreateAVD(t, w.avdHome, simtest.AVD{Name: "Busy"})
	// A live process holds the lock: this test's own pid.
	os.WriteFile(filepath.Join(dir, "hardware-qemu.ini.lock"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	p = w.start("-avd", "Busy", "-port", strconv.Itoa(freeConsolePort(t)))
	p.wait(10 * time.Second)
	if !strings.HasSuffix(p.out.String(), string(b)) {
		t.Errorf("second instance:\n got %q\nwant suffix %q", p.out.String(), b)
	}
}

// TestRealEmulatorFlagsMatchCapture: the simulator's table of the emulator's
// options is the header's (fixtures/captures/emulator/cmdline-options.txt),
// and every one of them parses, its value consumed.
func TestRealEmulatorFlagsMatchCapture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "captures", "emulator", "cmdline-options.txt"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		n++
		known, takesValue := sim.RealEmulatorFlag(f[0])
		if !known || takesValue != (len(f) > 1) {
			t.Errorf("%s: known %v, takes a value %v; the header says %q", f[0], known, takesValue, line)
		}
		args := []string{f[0]}
		if len(f) > 1 {
			args = append(args, "5556")
			if f[0] == "-ports" {
				args[1] = "5556,5557"
			}
		}
		args = append(args, "-no-window")
		o, err := sim.ParseEmulatorArgs(args)
		if err != nil || !o.NoWindow || len(o.Unknown) != 0 {
			t.Errorf("%q: %+v %v", args, o, err)
		}
	}
	if n < 120 {
		t.Errorf("read %d options from the capture", n)
	}
	if known, _ := sim.RealEmulatorFlag("-no_snapshot_save"); !known {
		t.Error("underscores are dashes to the emulator")
	}
	if known, _ := sim.RealEmulatorFlag("-frobnicate"); known {
		t.Error("-frobnicate is not an emulator option")
	}
}
