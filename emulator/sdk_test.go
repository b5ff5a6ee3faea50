package emulator

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestParseListAVDs(t *testing.T) {
	out := "INFO    | Storing crashdata in: /tmp/android-me/emu-crash-34.1.19.db\nPixel_7_API_34\nci\n\nsmall_phone\n"
	if got := ParseListAVDs(out); !reflect.DeepEqual(got, []string{"Pixel_7_API_34", "ci", "small_phone"}) {
		t.Errorf("got %q", got)
	}
}

func TestParseCommand(t *testing.T) {
	if c, _ := ParseCommand(" /tmp/sg emulator  sim "); !reflect.DeepEqual(c, []string{"/tmp/sg", "emulator", "sim"}) {
		t.Errorf("blank-split: %q", c)
	}
	if c, _ := ParseCommand(`["/a b/sg","emulator","sim"]`); !reflect.DeepEqual(c, []string{"/a b/sg", "emulator", "sim"}) {
		t.Errorf("JSON: %q", c)
	}
	if _, err := ParseCommand(`["x"`); err == nil {
		t.Error("bad JSON accepted")
	}
}

func TestAVDHomeOrderAndConfig(t *testing.T) {
	base := []string{"HOME=/h"}
	cases := []struct {
		env  []string
		want string
	}{
		{base, "/h/.android/avd"},
		{append(base, "ANDROID_USER_HOME=/u"), "/u/avd"},
		{append(base, "ANDROID_USER_HOME=/u", "ANDROID_SDK_HOME=/s"), "/s/avd"},
		{append(base, "ANDROID_SDK_HOME=/s", "ANDROID_AVD_HOME=/a"), "/a"},
	}
	for _, c := range cases {
		if got := AVDHome(c.env); got != c.want {
			t.Errorf("%q: %s, want %s", c.env, got, c.want)
		}
	}
	if SDKRoot([]string{"ANDROID_HOME=/h", "ANDROID_SDK_ROOT=/r"}) != "/r" || SDKRoot([]string{"ANDROID_HOME=/h"}) != "/h" {
		t.Error("SDKRoot order")
	}

	home := t.TempDir()
	other := filepath.Join(t.TempDir(), "elsewhere.avd")
	os.MkdirAll(other, 0o755)
	// NAME.ini's path= wins over <home>/NAME.avd (avdmanager's layout).
	os.WriteFile(filepath.Join(home, "Pixel_7.ini"), []byte("avd.ini.encoding=UTF-8\npath="+other+"\npath.rel=avd/Pixel_7.avd\ntarget=android-34\n"), 0o644)
	os.WriteFile(filepath.Join(other, "config.ini"), []byte("AvdId = Pixel_7\nhw.lcd.width=1080\nhw.lcd.height = 2400\n# comment\nimage.sysdir.1=system-images/android-34/google_apis/x86_64/\n"), 0o644)
	m := New(Config{Env: []string{"ANDROID_AVD_HOME=" + home, "PATH=/nonexistent"}})
	cfg, err := m.ReadAVDConfig("Pixel_7")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["AvdId"] != "Pixel_7" || cfg["hw.lcd.height"] != "2400" || cfg["image.sysdir.1"] != "system-images/android-34/google_apis/x86_64/" {
		t.Errorf("config %v", cfg)
	}
	if info, err := m.DescribeAVD("Pixel_7"); err != nil || info.APILevel != 34 || info.Display != "1080x2400" || info.Dir != other {
		t.Errorf("DescribeAVD: %+v %v", info, err)
	}
	if _, err := m.ReadAVDConfig("nope"); err == nil || !strings.Contains(err.Error(), CodeAVDUnknown) {
		t.Errorf("missing AVD: %v", err)
	}
}

// The boot command line uses only flags the real emulator documents, with
// their documented meaning (fixtures/captures/emulator-help/help-options.txt,
// the real `emulator -help`; see SOURCES.md).
func TestBootArgsAreRealEmulatorFlags(t *testing.T) {
	help := capture(t, "emulator-help/help-options.txt")
	documented := map[string]string{}
	row := regexp.MustCompile(`^\s+(-[a-z-]+)(?:\s+<[^>]+>)?\s{2,}(.+)$`)
	for _, l := range strings.Split(help, "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			documented[m[1]] = m[2]
		}
	}
	takesValue := map[string]bool{"-avd": true, "-port": true}
	for _, ro := range []bool{false, true} {
		for _, save := range []bool{false, true} {
			for _, cold := range []bool{false, true} {
				args := BootArgs("Pixel_7", 5556, ro, save, cold)
				for i := 0; i < len(args); i++ {
					if _, ok := documented[args[i]]; !ok {
						t.Errorf("BootArgs(%v,%v,%v) passes %s, not in the emulator's help", ro, save, cold, args[i])
					}
					if takesValue[args[i]] {
						i++
					}
				}
				has := func(f string) bool {
					for _, a := range args {
						if a == f {
							return true
						}
					}
					return false
				}
				if has("-read-only") != ro || has("-no-snapshot-save") != (!ro && !save) || has("-no-snapshot-load") != cold {
					t.Errorf("BootArgs(%v,%v,%v) = %q", ro, save, cold, args)
				}
			}
		}
	}
	for flag, meaning := range map[string]string{
		"-read-only":        "multiple instances",
		"-no-snapshot-save": "do not auto-save to snapshot on exit",
		"-no-snapshot-load": "perform a full boot",
		"-port":             "console",
		"-no-window":        "disable graphical window",
	} {
		if !strings.Contains(documented[flag], meaning) {
			t.Errorf("%s documented as %q, want it to say %q", flag, documented[flag], meaning)
		}
	}
	// And against the emulator's own option table (cmdline-options.h,
	// fixtures/captures/emulator/cmdline-options.txt): known, and followed by
	// a value exactly when the table says so.
	table := map[string]bool{} // name -> takes a value
	for _, l := range strings.Split(capture(t, "emulator/cmdline-options.txt"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "-") {
			table[f[0]] = len(f) > 1
		}
	}
	for _, a := range BootArgs("Pixel_7", 5556, true, false, true) {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		v, ok := table[a]
		if !ok || v != takesValue[a] {
			t.Errorf("%s: in cmdline-options.h %v, takes a value %v (we pass one: %v)", a, ok, v, takesValue[a])
		}
	}
	for _, a := range []string{"-no-snapshot-save", "-list-avds"} {
		if _, ok := table[a]; !ok {
			t.Errorf("%s not in cmdline-options.h", a)
		}
	}
	if got := BootArgs("ci", 5554, false, false, false); strings.Join(got, " ") != "-avd ci -port 5554 -no-window -no-audio -no-boot-anim -no-snapshot-save" {
		t.Errorf("CI boot: %q", got)
	}
}

// The log lines the boot reads, as the real emulator prints them.
func TestBootLogLines(t *testing.T) {
	if !reQuickLoaded.MatchString(capture(t, "emulator/quickboot-loaded.txt")) {
		t.Error("quick boot line not recognized")
	}
	m := reBootCompleted.FindStringSubmatch(capture(t, "emulator/boot-completed.txt"))
	if m == nil || m[1] != "23779" {
		t.Errorf("boot completed: %q", m)
	}
	for _, l := range []string{
		"WARNING      | Failed to load snapshot 'default_boot'",
		"ERROR        | snapshot default_boot: L1 table entry corrupted",
		"WARNING | Cold boot: snapshot failed to load",
	} {
		if !reSnapshotFailed.MatchString(l) {
			t.Errorf("snapshot failure not recognized: %q", l)
		}
	}
	for _, l := range []string{capture(t, "emulator/quickboot-loaded.txt"), "INFO | Boot completed in 812 ms", "INFO | Saving snapshot 'default_boot'"} {
		if reSnapshotFailed.MatchString(l) {
			t.Errorf("not a failure: %q", l)
		}
	}
	if logMessage("WARNING      | Failed to load snapshot 'default_boot'") != "Failed to load snapshot 'default_boot'" {
		t.Error("logMessage")
	}
}

func TestReadNewLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	os.WriteFile(p, []byte("a\r\nb\npart"), 0o600)
	ls, off := readNewLines(p, 0)
	if !reflect.DeepEqual(ls, []string{"a", "b"}) || off != 5 {
		t.Fatalf("%q %d", ls, off)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("ial\nc\n")
	f.Close()
	if ls, _ := readNewLines(p, off); !reflect.DeepEqual(ls, []string{"partial", "c"}) {
		t.Fatalf("%q", ls)
	}
}

func TestHasAVDWithoutSDK(t *testing.T) {
	m := New(Config{Env: []string{"HOME=" + t.TempDir(), "PATH=" + t.TempDir()}})
	if ok, err := m.HasAVD(t.Context(), "Pixel_7"); ok || err != nil {
		t.Errorf("no SDK: %v %v", ok, err)
	}
	if ok, _ := m.HasAVD(t.Context(), "emulator-5554"); ok {
		t.Error("a serial is no AVD")
	}
	if _, err := m.ListAVDs(t.Context()); err == nil || !strings.Contains(err.Error(), CodeEmulatorNotFound) {
		t.Errorf("ListAVDs without SDK: %v", err)
	}
}

func TestConsolePortRange(t *testing.T) {
	for env, want := range map[string][2]int{
		"":            {FirstConsolePort, LastConsolePort},
		"21001-21099": {21002, 21099},
		"21000-21098": {21000, 21098},
		"bogus":       {FirstConsolePort, LastConsolePort},
		"300-200":     {FirstConsolePort, LastConsolePort},
	} {
		m := New(Config{Env: []string{EnvConsolePorts + "=" + env}})
		if f, l := m.consolePorts(); f != want[0] || l != want[1] {
			t.Errorf("%s=%q: %d..%d, want %d..%d", EnvConsolePorts, env, f, l, want[0], want[1])
		}
	}
}
