package adb

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// --- on real captures ---------------------------------------------------------

func evidenceProfile() android.Profile {
	return android.Profile{
		Name:         "evidence",
		Preinstalled: []android.Package{{ID: "com.example.shop", VersionCode: 3, VersionName: "1.2"}},
		Apps: []android.App{{Package: "com.example.shop", LauncherActivity: "com.example.shop.Home",
			Activities: []android.Activity{{Name: "com.example.shop.Home"}}}},
	}
}

// --- through the real adb server and the Debian adb CLI ------------------------

// TestRealAdbCLIScreencapAndLogcat: `adb exec-out screencap -p` gives a PNG
// that image/png decodes at the `wm size`; `adb logcat -d -v threadtime` and
// `-b crash` print the simulator's entries, which the parsers read.
func TestRealAdbCLIScreencapAndLogcat(t *testing.T) {
	c := adbServer(t)
	p := evidenceProfile()
	p.DisplayWidth, p.DisplayHeight = 720, 1280
	p.Faults.AppCrash = &android.AppCrashFault{Package: "com.example.shop", Exception: "java.lang.IllegalStateException", Message: "boom", AfterMillis: 10}
	e := startSim(t, c, p)
	ctx := ctxT(t, 60*time.Second)
	size, err := c.ShellOutput(ctx, e.Serial(), "wm size")
	if err != nil || strings.TrimSpace(size) != "Physical size: 720x1280" {
		t.Fatalf("wm size %q %v", size, err)
	}
	out, err := adbCmd(srvPort, "-s", e.Serial(), "exec-out", "screencap", "-p").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG signature: % x", out[:min(8, len(out))])
	}
	img, err := png.Decode(bytes.NewReader(out))
	if err != nil || img.Bounds().Dx() != 720 || img.Bounds().Dy() != 1280 {
		t.Fatalf("png %v %v", img.Bounds(), err)
	}
	// Raw screencap through exec-out, binary-clean.
	raw, err := adbCmd(srvPort, "-s", e.Serial(), "exec-out", "screencap").Output()
	if err != nil {
		t.Fatal(err)
	}
	if h, err := parse.ParseScreencapRaw(raw, 34); err != nil || h.Width != 720 || h.Height != 1280 {
		t.Fatalf("raw %+v %v", h, err)
	}
	if _, err := c.ShellOutput(ctx, e.Serial(), "am start -n com.example.shop/.Home"); err != nil {
		t.Fatal(err)
	}
	var crashOut []byte
	for deadline := time.Now().Add(20 * time.Second); ; {
		crashOut, err = adbCmd(srvPort, "-s", e.Serial(), "logcat", "-d", "-b", "crash").Output()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(crashOut, []byte("FATAL EXCEPTION")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the device's log for the due crash
	}
	cs := parse.ParseFatalExceptions(string(crashOut), "com.example.shop")
	if len(cs) != 1 || cs[0].Exception != "java.lang.IllegalStateException" || cs[0].TopFrame == "" {
		t.Fatalf("adb logcat -b crash: %+v\n%s", cs, crashOut)
	}
	tt, err := adbCmd(srvPort, "-s", e.Serial(), "logcat", "-d", "-v", "threadtime").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--------- beginning of ", " I ActivityTaskManager: START u0 {", " I ActivityManager: Start proc ", " E AndroidRuntime: FATAL EXCEPTION: main",
		" I ActivityManager: Process com.example.shop (pid "} {
		if !bytes.Contains(tt, []byte(want)) {
			t.Errorf("adb logcat -d -v threadtime lacks %q:\n%s", want, tt)
		}
	}
	if bytes.Contains(tt, []byte("\r\n")) {
		t.Error("CRLF in exec logcat output")
	}
	// The adb client runs `export ANDROID_LOG_TAGS=""; exec logcat …`: nothing but log lines comes back.
	for _, l := range strings.Split(string(tt), "\n") {
		if _, ok := parse.ParseThreadtimeLine(l); !ok && l != "" && !strings.HasPrefix(l, "--------- beginning of ") {
			t.Errorf("adb logcat printed a non-log line %q", l)
		}
	}
	// A screencap written to the device file system and pulled back decodes too.
	if _, err := c.ShellOutput(ctx, e.Serial(), "screencap -p /sdcard/s.png"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "s.png")
	if out, err := adbCmd(srvPort, "-s", e.Serial(), "pull", "/sdcard/s.png", dst).CombinedOutput(); err != nil {
		t.Fatalf("pull: %v %s", err, out)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(b)); err != nil || img.Bounds().Dx() != 720 {
		t.Fatalf("pulled png: %v", err)
	}
}
