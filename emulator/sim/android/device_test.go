package android

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the module root, found from this file's location.
func repoRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// fakeClock is a settable clock for boot phases.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *fakeClock                   { return &fakeClock{t: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)} }
func newTestDevice(t testing.TB, p Profile) (*Device, *fakeClock) {
	t.Helper()
	clk := newClock()
	d, err := New(p, Options{Now: clk.Now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d, clk
}

// sh runs a command line and returns stdout, stderr and the status.
func sh(t testing.TB, d *Device, cmdline string) (string, string, int) {
	t.Helper()
	var o, e bytes.Buffer
	st := d.Shell(context.Background(), cmdline, nil, &o, &e)
	return o.String(), e.String(), st
}

func TestLoadProfileFixtures(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "fixtures", "profiles")
	want := map[string]struct {
		api    int
		boot   time.Duration
		never  bool
		device string
	}{
		"default.yaml":     {34, 0, false, "emu64xa"},
		"api29.yaml":       {29, 0, false, "emu64x"},
		"api30.yaml":       {30, 0, false, "emu64x"},
		"api33.yaml":       {33, 0, false, "emu64x"},
		"slow-boot.yaml":   {34, 20 * time.Second, false, "emu64xa"},
		"never-boots.yaml": {34, 5 * time.Second, true, "emu64xa"},
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			p, err := LoadProfile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if p.APILevel != w.api || p.BootDuration != w.boot || p.Faults.BootNeverCompletes != w.never {
				t.Fatalf("got api=%d boot=%v never=%v", p.APILevel, p.BootDuration, p.Faults.BootNeverCompletes)
			}
			d, _ := newTestDevice(t, p)
			if got := d.Prop("ro.product.device"); got != w.device {
				t.Errorf("ro.product.device = %q, want %q", got, w.device)
			}
			a, ok := d.appModel("com.example.app")
			if !ok || a.LauncherActivity != "com.example.app.HomeActivity" || len(a.Activities) != 3 {
				t.Fatalf("demo app model: %+v %v", a, ok)
			}
			if !a.Activities[2].Busy.NeverIdle || a.Activities[0].Root.Children[0].Children[0].Children[1].Children[1].OnClick != "com.example.app.DetailsActivity" {
				t.Errorf("demo app: spinner must never idle and the button must open DetailsActivity")
			}
			if a.Activities[0].Busy.AnimateFor != 600*time.Millisecond {
				t.Errorf("animateFor = %v (durations are read from strings)", a.Activities[0].Busy.AnimateFor)
			}
		})
	}
}

func TestLoadProfileRejectsUnknownField(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, f, "apiLevl: 33\n")
	if _, err := LoadProfile(f); err == nil || !strings.Contains(err.Error(), "apiLevl") {
		t.Fatalf("want an error naming the unknown field, got %v", err)
	}
	writeFile(t, f, `{"apiLevel": 30, "bootDuration": "2s"}`)
	p, err := LoadProfile(f)
	if err != nil || p.APILevel != 30 || p.BootDuration != 2*time.Second {
		t.Fatalf("JSON profile: %+v %v", p, err)
	}
}

func TestNewDefaultsAndValidation(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	if d.APILevel() != 34 || d.Prop("ro.build.version.release") != "14" || d.Prop("ro.product.model") != "sdk_gphone64_x86_64" {
		t.Fatalf("defaults: api=%d release=%q model=%q", d.APILevel(), d.Prop("ro.build.version.release"), d.Prop("ro.product.model"))
	}
	if got, want := d.Banner(), "device::ro.product.name=sdk_gphone64_x86_64;ro.product.model=sdk_gphone64_x86_64;ro.product.device=emu64xa;features=shell_v2,cmd,stat_v2"; got != want {
		t.Errorf("Banner = %q, want %q", got, want)
	}
	bad := []Profile{
		{APILevel: 12},
		{DisplayWidth: -1},
		{Overrides: []Override{{Pattern: "("}}},
		{Preinstalled: []Package{{ID: "a"}, {ID: "a"}}},
		{Apps: []App{{Package: "p", LauncherActivity: "p.Missing"}}},
		{Apps: []App{{Package: "p", Activities: []Activity{{Name: "p.A", Root: &Element{OnClick: "p.B"}}}}}},
	}
	for i, p := range bad {
		if _, err := New(p, Options{}); err == nil {
			t.Errorf("profile %d: New accepted %+v", i, p)
		}
	}
}

func TestBootPhases(t *testing.T) {
	d, clk := newTestDevice(t, Profile{BootDuration: 10 * time.Second})
	check := func(stage, boot, dev, anim string, booted bool) {
		t.Helper()
		out, _, _ := sh(t, d, "getprop dev.bootcomplete; getprop sys.boot_completed; getprop init.svc.bootanim")
		if want := dev + "\n" + boot + "\n" + anim + "\n"; out != want {
			t.Errorf("%s: getprop = %q, want %q", stage, out, want)
		}
		if d.Booted() != booted {
			t.Errorf("%s: Booted() = %v", stage, d.Booted())
		}
	}
	check("start", "", "", "running", false)
	if out, _, _ := sh(t, d, "service check package"); out != "Service package: not found\n" {
		t.Errorf("package service before system_server: %q", out)
	}
	if _, e, st := sh(t, d, "pm list packages"); st != 20 || e != "cmd: Can't find service: package\n" {
		t.Errorf("pm during early boot: %d %q", st, e)
	}
	clk.Advance(5 * time.Second)
	if out, _, _ := sh(t, d, "service check package"); out != "Service package: found\n" {
		t.Errorf("package service half-way: %q", out)
	}
	check("half-way", "", "", "running", false)
	clk.Advance(5 * time.Second)
	check("boot end", "1", "1", "running", true)
	clk.Advance(time.Second)
	check("after", "1", "1", "stopped", true)

	never, clk2 := newTestDevice(t, Profile{BootDuration: time.Second, Faults: Faults{BootNeverCompletes: true}})
	clk2.Advance(time.Hour)
	if never.Booted() || never.Prop("sys.boot_completed") != "" || never.Prop("init.svc.bootanim") != "running" {
		t.Errorf("BootNeverCompletes: booted=%v", never.Booted())
	}
}

// TestOnBootCompletedBeforeAnswer: the boot-completed hook (the emulator's
// "Boot completed in N ms" log line) has run by the time any query answers
// sys.boot_completed=1, once, and not before; BootCompletedIn counts down to
// the same moment.
func TestOnBootCompletedBeforeAnswer(t *testing.T) {
	clk := newClock()
	calls := 0
	d, err := New(Profile{BootDuration: 4 * time.Second}, Options{Now: clk.Now, OnBootCompleted: func() { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if in, ok := d.BootCompletedIn(); !ok || in != 4*time.Second {
		t.Errorf("BootCompletedIn at start = %v %v, want 4s true", in, ok)
	}
	clk.Advance(3999 * time.Millisecond)
	if out, _, _ := sh(t, d, "getprop sys.boot_completed"); strings.TrimSpace(out) != "" || calls != 0 {
		t.Fatalf("1 ms before the boot ends: getprop %q, hook called %d times", out, calls)
	}
	if in, _ := d.BootCompletedIn(); in != time.Millisecond {
		t.Errorf("BootCompletedIn 1 ms before = %v", in)
	}
	clk.Advance(time.Millisecond)
	for _, q := range []string{"getprop sys.boot_completed", "getprop dev.bootcomplete", "getprop"} {
		out, _, _ := sh(t, d, q)
		if !strings.Contains(out, "1") || calls != 1 {
			t.Fatalf("%s after the boot: %q, hook called %d times, want once before the answer", q, out, calls)
		}
	}
	if in, ok := d.BootCompletedIn(); !ok || in != 0 {
		t.Errorf("BootCompletedIn after = %v %v", in, ok)
	}
	never, err := New(Profile{Faults: Faults{BootNeverCompletes: true}}, Options{Now: clk.Now, OnBootCompleted: func() { t.Error("hook called on a boot that never completes") }})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, ok := never.BootCompletedIn(); ok || never.Booted() {
		t.Error("a boot that never completes says it will")
	}
}
