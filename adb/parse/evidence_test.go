package parse

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// --- on real captures ---------------------------------------------------------

func TestParseThreadtimeLineCaptures(t *testing.T) {
	for _, rel := range captures(t, "logcat") {
		for i, l := range lines(capture(t, rel)) {
			if l == "" {
				continue
			}
			if _, ok := ParseThreadtimeLine(l); !ok {
				t.Errorf("%s:%d not parsed: %q", rel, i+1, l)
			}
		}
	}
	l, ok := ParseThreadtimeLine("12-05 14:51:57.112 10130 10130 I Process : Sending signal. PID: 10130 SIG: 9")
	if !ok || l.Tag != "Process" || l.PID != 10130 || l.Priority != 'I' || l.Message != "Sending signal. PID: 10130 SIG: 9" || l.Time != "12-05 14:51:57.112" {
		t.Errorf("padded tag: %+v", l)
	}
	l, ok = ParseThreadtimeLine("12-05 14:51:57.089  1692  6859 W ActivityTaskManager:   Force finishing activity com.example.safsumple/.MainActivity")
	if !ok || l.Tag != "ActivityTaskManager" || l.TID != 6859 || l.Message != "  Force finishing activity com.example.safsumple/.MainActivity" {
		t.Errorf("leading blanks of the message: %+v", l)
	}
	for _, bad := range []string{"--------- beginning of main", "E/AndroidRuntime( 4321): FATAL EXCEPTION: main", "", "12-05 14:51:57.112 x y I T: m"} {
		if _, ok := ParseThreadtimeLine(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestParseFatalExceptionsCaptures(t *testing.T) {
	cs := ParseFatalExceptions(capture(t, "logcat/api30-threadtime-crash-no-dialog.txt"), "com.example.safsumple")
	if len(cs) != 1 {
		t.Fatalf("%d crashes", len(cs))
	}
	c := cs[0]
	if c.Thread != "main" || c.Process != "com.example.safsumple" || c.PID != 10130 || c.Time != "12-05 14:51:57.082" ||
		c.Exception != "android.content.ActivityNotFoundException" ||
		c.Message != "No Activity found to handle Intent { act=android.intent.action.CREATE_DOCUMENT typ=text/* (has extras) }" ||
		len(c.Frames) != 28 || c.TopFrame != "com.example.safsumple.FirstFragment.openSAF(FirstFragment.kt:63)" {
		t.Errorf("%+v", c)
	}
	cs = ParseFatalExceptions(capture(t, "logcat/api28-threadtime-fatal-oom.txt"), "com.baiiu.nativeleak")
	if len(cs) != 1 || cs[0].Exception != "java.lang.OutOfMemoryError" || cs[0].Message != "pthread_create (1040KB stack) failed: Try again" ||
		cs[0].TopFrame != "" || cs[0].Frames[0] != "java.lang.Thread.nativeCreate(Native Method)" {
		t.Errorf("%+v", cs)
	}
	// Interleaved lines of other processes and a cause chain.
	mixed := "01-05 14:03:07.123  4321  4321 E AndroidRuntime: FATAL EXCEPTION: main\n" +
		"01-05 14:03:07.123   513   600 I ActivityManager: unrelated\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: Process: com.x, PID: 4321\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: java.lang.RuntimeException: outer\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: \tat android.app.A.b(A.java:1)\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: Caused by: java.lang.IllegalStateException: inner\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: \tat com.x.Main.onCreate(Main.java:9)\n" +
		"01-05 14:03:07.123  4321  4321 E AndroidRuntime: \t... 3 more\n"
	cs = ParseFatalExceptions(mixed, "com.x")
	if len(cs) != 1 || cs[0].Causes[0] != "java.lang.IllegalStateException" || cs[0].TopFrame != "com.x.Main.onCreate(Main.java:9)" || len(cs[0].Frames) != 2 {
		t.Errorf("%+v", cs)
	}
}

// TestFatalExceptionMessageIsBounded: a report whose message goes on for
// megabytes stops growing at maxCrashMessage (appending every line would be
// quadratic in the input).
func TestFatalExceptionMessageIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("01-05 14:03:07.123  4321  4321 E AndroidRuntime: FATAL EXCEPTION: main\n")
	b.WriteString("01-05 14:03:07.123  4321  4321 E AndroidRuntime: java.lang.RuntimeException: start\n")
	line := "01-05 14:03:07.123  4321  4321 E AndroidRuntime: " + strings.Repeat("x", 1000) + "\n"
	for b.Len() < 8<<20 {
		b.WriteString(line)
	}
	cs := ParseFatalExceptions(b.String(), "")
	if len(cs) != 1 || len(cs[0].Message) > maxCrashMessage+1100 {
		t.Fatalf("%d reports, message %d bytes", len(cs), len(cs[0].Message))
	}
}

func TestParseDropboxCapture(t *testing.T) {
	es := ParseDropbox(capture(t, "dumpsys-dropbox/api34plus-print-data_app_crash-trimmed.txt"))
	if len(es) != 1 {
		t.Fatalf("%d entries", len(es))
	}
	e := es[0]
	if e.Time != "2026-05-29 10:22:34" || e.Tag != "data_app_crash" || e.Size != 1328 || e.Compressed || e.Process() != "com.harnessplayground" ||
		e.PID() != 586 || e.Headers["Package"] != "com.harnessplayground v1 (1.0)" || e.Headers["SystemUptimeMs"] != "79467172" ||
		e.Exception() != "java.lang.RuntimeException: Intentional asynchronous Kotlin crash" {
		t.Errorf("%+v", e)
	}
	if es := ParseDropbox("Drop box contents: 0 entries\nMax entries: 1000\n\n(No entries found.)\n"); len(es) != 0 {
		t.Errorf("empty dump gave %+v", es)
	}
}

// TestParseDropboxFile: with --file the entry's path follows its line
// (unindented with --print, as DropBoxManagerService.dump prints it; four
// spaces without) and its name gives the millis; the headers still parse.
func TestParseDropboxFile(t *testing.T) {
	for _, indent := range []string{"", "    "} {
		out := "Drop box contents: 1 entries\n\n========================================\n" +
			"2026-11-28 09:00:00 data_app_anr (compressed text, 900 bytes)\n" + indent +
			"/data/system/dropbox/data_app_anr@1795856400124.txt.gz\nProcess: com.x\nPID: 42\n\ntraces\n"
		es := ParseDropbox(out)
		if len(es) != 1 || es[0].Millis != 1795856400124 || es[0].File != "/data/system/dropbox/data_app_anr@1795856400124.txt.gz" ||
			es[0].Process() != "com.x" || es[0].PID() != 42 || es[0].Body != "traces" {
			t.Errorf("indent %q: %+v", indent, es)
		}
	}
	// Without --file: no path, no millis.
	if es := ParseDropbox(capture(t, "dumpsys-dropbox/api34plus-print-data_app_crash-trimmed.txt")); len(es) != 1 || es[0].Millis != 0 || es[0].File != "" {
		t.Errorf("%+v", es)
	}
}

// TestParseDropboxEmptyEntryThenPath: an entry with no text is ended by the
// next separator before its --file line could come; a path-shaped line
// after the next, unparsable, entry line belongs to no entry (it panicked
// on a nil entry before the separator ended the wait for the path).
func TestParseDropboxEmptyEntryThenPath(t *testing.T) {
	sep := "========================================\n"
	out := sep + "2026-11-28 09:00:00 data_app_anr (text, 0 bytes)\n" + sep +
		"not an entry line\n/data/system/dropbox/data_app_anr@1795856400124.txt\n"
	es := ParseDropbox(out)
	if len(es) != 1 || es[0].Tag != "data_app_anr" || es[0].File != "" || es[0].Body != "" {
		t.Errorf("%+v", es)
	}
}

func TestParseErrorDialogsCaptures(t *testing.T) {
	for rel, want := range map[string]ErrorDialog{
		"dumpsys-window-dialogs/focus-application-error.txt":     {Title: "Application Error: com.huanhailiuxin.jet2020", Process: "com.huanhailiuxin.jet2020", Focused: true},
		"dumpsys-window-dialogs/focus-application-error-old.txt": {Title: "Application Error: com.android.development", Process: "com.android.development", Focused: true},
		"dumpsys-window-dialogs/api28-focus-anr-systemui.txt":    {Title: "Application Not Responding: com.android.systemui", Process: "com.android.systemui", ANR: true, System: true, Focused: true},
	} {
		ds := ParseErrorDialogs(capture(t, rel))
		if len(ds) != 1 || ds[0] != want {
			t.Errorf("%s: %+v", rel, ds)
		}
	}
	// The real window list of an API 30 emulator has no dialog.
	if ds := ParseErrorDialogs(capture(t, "dumpsys-window-windows/api30.txt")); len(ds) != 0 {
		t.Errorf("dialogs in a plain dump: %+v", ds)
	}
}

func TestParseScreencapRaw(t *testing.T) {
	raw := make([]byte, 16+3*2*4)
	binary.LittleEndian.PutUint32(raw, 3)
	binary.LittleEndian.PutUint32(raw[4:], 2)
	binary.LittleEndian.PutUint32(raw[8:], 1)
	binary.LittleEndian.PutUint32(raw[12:], 1)
	h, err := ParseScreencapRaw(raw, 34)
	if err != nil || h != (ScreencapHeader{Width: 3, Height: 2, Format: 1, ColorSpace: 1, Size: 16, BytesPerPixel: 4}) {
		t.Errorf("%+v %v", h, err)
	}
	if h, err := ParseScreencapRaw(raw, 0); err != nil || h.Size != 16 {
		t.Errorf("inferred: %+v %v", h, err)
	}
	if h, err := ParseScreencapRaw(raw[:12+24], 27); err != nil || h.Size != 12 || h.ColorSpace != -1 {
		t.Errorf("API 27: %+v %v", h, err)
	}
	for name, b := range map[string][]byte{"short": raw[:8], "truncated": raw[:20], "huge": func() []byte {
		x := append([]byte(nil), raw...)
		binary.LittleEndian.PutUint32(x, 1<<20)
		return x
	}(), "format": func() []byte {
		x := append([]byte(nil), raw...)
		binary.LittleEndian.PutUint32(x[8:], 99)
		return x
	}()} {
		if _, err := ParseScreencapRaw(b, 34); IDOf(err) != IDProcessError {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// --- on the simulator's output ------------------------------------------------

func simShell(t *testing.T, d *android.Device, cmd string) string {
	t.Helper()
	var o, e bytes.Buffer
	if code := d.Shell(context.Background(), cmd, nil, &o, &e); code != 0 {
		t.Fatalf("%s: exit %d %s", cmd, code, e.String())
	}
	return o.String()
}

func evidenceProfile() android.Profile {
	return android.Profile{
		Name:         "evidence",
		Preinstalled: []android.Package{{ID: "com.example.shop", VersionCode: 3, VersionName: "1.2"}},
		Apps: []android.App{{Package: "com.example.shop", LauncherActivity: "com.example.shop.Home",
			Activities: []android.Activity{{Name: "com.example.shop.Home"}}}},
	}
}

func TestEvidenceParsersOnSimulatorOutput(t *testing.T) {
	p := evidenceProfile()
	p.Faults.AppCrash = &android.AppCrashFault{Package: "com.example.shop", Exception: "java.lang.IllegalStateException", Message: "boom"}
	p.Faults.SystemUINotResponding = &android.SystemUIANRFault{AfterMillis: 0}
	d, err := android.New(p, android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	simShell(t, d, "am start -n com.example.shop/.Home")
	all := simShell(t, d, "logcat -d -v threadtime")
	for _, l := range lines(all) {
		if l != "" && !strings.HasPrefix(l, "--------- beginning of ") {
			if _, ok := ParseThreadtimeLine(l); !ok {
				t.Errorf("simulator line not threadtime: %q", l)
			}
		}
	}
	cs := ParseFatalExceptions(simShell(t, d, "logcat -d -b crash"), "com.example.shop")
	if len(cs) != 1 || cs[0].Process != "com.example.shop" || cs[0].Exception != "java.lang.IllegalStateException" || cs[0].Message != "boom" ||
		cs[0].TopFrame != "com.example.shop.Home$1.run(Home.java:42)" || cs[0].PID == 0 {
		t.Errorf("crash %+v", cs)
	}
	es := ParseDropbox(simShell(t, d, "dumpsys dropbox --print"))
	var crash, anr *DropboxEntry
	for i := range es {
		switch es[i].Tag {
		case "data_app_crash":
			crash = &es[i]
		case "system_app_anr":
			anr = &es[i]
		}
	}
	if crash == nil || crash.Process() != "com.example.shop" || crash.PID() != cs[0].PID || crash.Exception() != "java.lang.IllegalStateException: boom" {
		t.Errorf("dropbox crash %+v", crash)
	}
	if anr == nil || anr.Process() != "com.android.systemui" || !strings.HasPrefix(anr.Headers["Subject"], "Input dispatching timed out") {
		t.Errorf("dropbox anr %+v", anr)
	}
	ds := ParseErrorDialogs(simShell(t, d, "dumpsys window"))
	if len(ds) != 1 || !ds[0].ANR || !ds[0].System || !ds[0].Focused || ds[0].Process != "com.android.systemui" {
		t.Errorf("dialogs %+v", ds)
	}
	anrs := ParseANRs(all)
	if len(anrs) != 1 || anrs[0].Process != "com.android.systemui" || anrs[0].PID == 0 || !strings.HasPrefix(anrs[0].Reason, "Input dispatching timed out") {
		t.Errorf("anrs %+v", anrs)
	}
	raw := []byte(simShell(t, d, "screencap"))
	if h, err := ParseScreencapRaw(raw, d.APILevel()); err != nil || h.Width != 1080 || h.Height != 2400 || h.Format != 1 || h.ColorSpace != 1 {
		t.Errorf("screencap raw %+v %v", h, err)
	}
}
