package sim_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// samePixels compares two screens below the status bar (whose clock may
// have turned a minute between the captures).
func samePixels(t *testing.T, got, want image.Image, statusBar int) {
	t.Helper()
	if got.Bounds() != want.Bounds() {
		t.Fatalf("size %v, device renders %v", got.Bounds(), want.Bounds())
	}
	b := got.Bounds()
	for y := statusBar; y < b.Max.Y; y++ {
		for x := 0; x < b.Max.X; x++ {
			r1, g1, b1, _ := got.At(x, y).RGBA()
			r2, g2, b2, _ := want.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				t.Fatalf("pixel (%d,%d) differs from the device's screen", x, y)
			}
		}
	}
}

// TestAppiumADBReadsSimulatorLogcatAndScreenshot: appium-adb's logcat
// capture sees the launch and the crash lines of the simulator as
// threadtime lines, and its takeScreenshot decodes at the `wm size` with
// the device's own pixels.
func TestAppiumADBReadsSimulatorLogcatAndScreenshot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short (a real Appium with appium-adb); make test runs it")
	}
	root := repoRoot(t)
	probe := filepath.Join(root, "tools", "node", "appium-adb-evidence.mjs")
	if _, err := os.Stat(filepath.Join(root, "tools", "node", "node_modules", "appium-adb")); err != nil {
		t.Fatalf("appium-adb is not installed: run tools/setup.sh (%v)", err)
	}
	p := simtest.Profile(t, "default")
	p.DisplayWidth, p.DisplayHeight = 720, 1280
	p.Faults.AppCrash = &android.AppCrashFault{Package: "com.example.app", Exception: "java.lang.IllegalStateException", Message: "sim boom", AfterMillis: 300}
	srv := simtest.StartADBServer(t)
	e, dev := simtest.Launch(t, srv, p)
	srv.WaitState(t, e.Serial(), "device", 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", probe, strconv.Itoa(srv.Port), e.Serial(), "com.example.app/.HomeActivity", "has died")
	cmd.Env = append(srv.Env(), "ANDROID_HOME="+sdkRootOfADB(t))
	var logs strings.Builder
	cmd.Stderr = &logs
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, logs.String())
	}
	var got struct {
		Lines []string `json:"lines"`
		PNG   string   `json:"png"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("probe output: %v", err)
	}
	all := strings.Join(got.Lines, "\n")
	for _, want := range []string{"I ActivityTaskManager: START u0 {", "I ActivityManager: Start proc ", "I ActivityTaskManager: Displayed com.example.app/.HomeActivity",
		"E AndroidRuntime: FATAL EXCEPTION: main", "E AndroidRuntime: java.lang.IllegalStateException: sim boom", "I ActivityManager: Process com.example.app (pid "} {
		if !strings.Contains(all, want) {
			t.Errorf("appium-adb logcat lacks %q:\n%s", want, all)
		}
	}
	for _, l := range got.Lines {
		if _, ok := parse.ParseThreadtimeLine(l); !ok && !strings.HasPrefix(l, "--------- ") {
			t.Errorf("appium-adb got a non-threadtime line %q", l)
		}
	}
	if cs := parse.ParseFatalExceptions(all, "com.example.app"); len(cs) != 1 || cs[0].Message != "sim boom" || cs[0].TopFrame == "" {
		t.Errorf("crash read from appium-adb's lines: %+v", cs)
	}
	b, err := base64.StdEncoding.DecodeString(got.PNG)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("appium-adb screenshot: %v", err)
	}
	samePixels(t, img, dev.Screenshot(), 100)
}

// TestAppiumUiAutomator2ScreenshotAndSystemUIANR: the real uiautomator2
// driver's getScreenshot returns the simulator's screen; with a SystemUI
// ANR dialog up, the page source shows the dialog ("System UI isn't
// responding", android:id/aerr_wait) and clicking Wait through the driver
// dismisses it.
func TestAppiumUiAutomator2ScreenshotAndSystemUIANR(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short (a real Appium session with the uiautomator2 driver); make test runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srvADB := simtest.StartADBServer(t)
	e, dev := simtest.Launch(t, srvADB, simtest.Profile(t, "default"))
	srvADB.WaitState(t, e.Serial(), "device", 10*time.Second)
	srv, err := appium.StartServer(ctx, appium.ServerConfig{ADBServerPort: srvADB.Port, LogFile: filepath.Join(t.TempDir(), "appium.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := appium.New(srv.URL, appium.Options{})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := appium.Capabilities(appium.CapsConfig{Serial: e.Serial(), ADBPort: srvADB.Port})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, caps)
	if err != nil {
		t.Fatalf("CreateSession: %v\n%s", err, srv.LogTail(32<<10))
	}
	defer c.DeleteSession(context.Background(), s.ID)
	call := func(method, path string, body any) map[string]any {
		t.Helper()
		var rd io.Reader
		if body != nil {
			bb, _ := json.Marshal(body)
			rd = bytes.NewReader(bb)
		}
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+"/session/"+s.ID+path, rd)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v %v", method, path, resp.StatusCode, v, err)
		}
		return v
	}
	shot, _ := call("GET", "/screenshot", nil)["value"].(string)
	b, err := base64.StdEncoding.DecodeString(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("getScreenshot: %v", err)
	}
	samePixels(t, img, dev.Screenshot(), 100)

	dev.ShowSystemUIANR()
	src, _ := call("GET", "/source", nil)["value"].(string)
	if !strings.Contains(src, `text="System UI isn't responding"`) || !strings.Contains(src, `resource-id="android:id/aerr_wait"`) || !strings.Contains(src, `package="android"`) {
		t.Fatalf("page source without the ANR dialog:\n%s", src)
	}
	el := call("POST", "/element", map[string]string{"using": "id", "value": "android:id/aerr_wait"})["value"].(map[string]any)
	var id string
	for _, v := range el {
		id, _ = v.(string)
	}
	call("POST", fmt.Sprintf("/element/%s/click", id), map[string]any{})
	if pkg, _, _ := dev.Foreground(); pkg == "android" {
		t.Fatal("Wait clicked through Appium left the dialog up")
	}
	if ds := parse.ParseErrorDialogs(shellOut(t, dev, "dumpsys window")); len(ds) != 0 {
		t.Errorf("dialogs after Wait: %+v", ds)
	}
}

// sdkRootOfADB is the SDK the adb on PATH belongs to (<root>/platform-tools/adb
// behind the PATH symlink), which appium-adb wants as ANDROID_HOME.
func sdkRootOfADB(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("adb")
	if err != nil {
		t.Fatal("adb not installed")
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return filepath.Dir(filepath.Dir(p))
}

func shellOut(t *testing.T, d *android.Device, cmd string) string {
	t.Helper()
	var o bytes.Buffer
	d.Shell(context.Background(), cmd, nil, &o, io.Discard)
	return o.String()
}
