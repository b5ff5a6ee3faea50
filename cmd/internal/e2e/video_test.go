package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/ui/uitest"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// settingsPkg is Appium's io.appium.settings: a real app, signed by its
// makers, that nobody here wrote (the uiautomator2 driver ships it).
const settingsPkg = "io.appium.settings"

// settingsAPK copies Appium's settings APK into a directory of its own and
// returns that directory (an extra --artifact-file-root) and the APK's path.
func settingsAPK(t testing.TB) (string, string) {
	t.Helper()
	src := filepath.Join(repoRoot, ".cache", "appium-home", "node_modules", "appium-uiautomator2-driver",
		"node_modules", "io.appium.settings", "apks", "settings_apk-debug.apk")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("%s: %v (tools/setup.sh installs the uiautomator2 driver)", src, err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "settings.apk")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, p
}

// settingsBody is a run request installing and launching io.appium.settings.
func settingsBody(serial, apk string, t testing.TB) map[string]any {
	body := runBody(serial, "file://"+apk, signerDigest(t, apk), "", "", nil)
	body["provisionApp"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidPackageId"] = settingsPkg
	body["launchOrAttach"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidPackageId"] = settingsPkg
	return body
}

// videoProbe is what ffprobe decodes of an MP4.
type videoProbe struct {
	Codec   string
	W, H    int
	Seconds float64
	Frames  int
}

// probeVideo runs ffprobe over every frame of data (-count_frames).
func probeVideo(t testing.TB, data []byte) videoProbe {
	t.Helper()
	f := filepath.Join(t.TempDir(), "v.mp4")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames:format=duration", "-of", "json", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe (Debian's ffmpeg, tools/setup.sh): %v\n%s", err, out)
	}
	var doc struct {
		Streams []struct {
			CodecName    string `json:"codec_name"`
			Width        int    `json:"width"`
			Height       int    `json:"height"`
			NbReadFrames string `json:"nb_read_frames"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Streams) != 1 {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	s := doc.Streams[0]
	p := videoProbe{Codec: s.CodecName, W: s.Width, H: s.Height}
	p.Seconds, _ = strconv.ParseFloat(doc.Format.Duration, 64)
	p.Frames, _ = strconv.Atoi(s.NbReadFrames)
	return p
}

// screenrecords lists the screenrecord processes on serial (toybox ps).
func screenrecords(t testing.TB, adbAddr, serial string) string {
	t.Helper()
	out, err := adb.New(adbAddr).ShellOutput(context.Background(), serial, "ps -A")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "screenrecord") {
			rows = append(rows, l)
		}
	}
	return strings.Join(rows, "\n")
}

// recordingFiles lists what recordings left in /data/local/tmp on serial.
func recordingFiles(t testing.TB, adbAddr, serial string) string {
	t.Helper()
	out, _ := adb.New(adbAddr).ShellOutput(context.Background(), serial, "ls /data/local/tmp")
	var names []string
	for _, l := range strings.Fields(out) {
		if strings.HasPrefix(l, "screengraph-video-") {
			names = append(names, l)
		}
	}
	return strings.Join(names, " ")
}

// eventTS is the ts of the first event of kind (of node, when set).
func eventTS(t testing.TB, evs []agent.Event, kind, node string) time.Time {
	t.Helper()
	for _, e := range evs {
		if e.Kind != kind {
			continue
		}
		if node != "" {
			var p struct {
				NodeName string `json:"nodeName"`
			}
			if json.Unmarshal(e.Payload, &p) != nil || p.NodeName != node {
				continue
			}
		}
		ts, err := time.Parse(time.RFC3339Nano, e.TS)
		if err != nil {
			t.Fatalf("event %s ts %q: %v", kind, e.TS, err)
		}
		return ts
	}
	t.Fatalf("no %s %s event", kind, node)
	return time.Time{}
}

// TestServeVideo: a real third-party app (Appium's io.appium.settings,
// whose Settings activity finishes at once, so LaunchOrAttach fails with
// launch_timeout as on a device) through serve with video in both
// evidence lists and 4 s segments (restarted, then joined): the failed run
// keeps one video/mp4 of LaunchOrAttach that ffprobe decodes as H.264 at
// the device's aspect ratio, lasting LaunchOrAttach's start to the run's
// end within 10%; the snapshot and LaunchOrAttach's node.finished point at
// it; the endpoint serves byte ranges; the run page plays it in headless
// Chromium (readyState >= 2, currentTime advancing) streamed from the
// artifact endpoint; nothing is left recording or recorded on the device.
// Then a FINISHED run of the demo app keeps WaitIdle's video (onSuccess).
func TestServeVideo(t *testing.T) {
	if testing.Short() {
		t.Skip("two full chains with recordings (about a minute)")
	}
	ctx := uitest.Browser(t)
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	root, apk := settingsAPK(t)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 2\nretries: {maxAttempts: 1}\nevidence:\n  onSuccess: [screenshot, video]\n  onFailure: [screenshot, video]\n  video: {segment: 4s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, srv, "--policy", pol, "--artifact-file-root", root)
	id := d.submit(t, settingsBody(emu.Serial(), apk, t))
	d.waitStatus(t, []string{id}, 4*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	evs := d.events(t, id)
	if v := d.run(t, id); v.Status != agent.RunFailed {
		t.Fatalf("run %s: %s, want FAILED (launch_timeout)\n%s", id, v.Status, d.log())
	}
	video := videoOf(t, d, id, "LaunchOrAttach")
	data := d.artifactBytes(t, id, video)
	p := probeVideo(t, data)
	size, err := adb.New(srv.Addr()).ShellOutput(context.Background(), emu.Serial(), "wm size")
	if err != nil {
		t.Fatal(err)
	}
	var w, h int
	if _, err := fmt.Sscanf(strings.TrimSpace(size), "Physical size: %dx%d", &w, &h); err != nil {
		t.Fatalf("wm size %q: %v", size, err)
	}
	start, end := eventTS(t, evs, agent.KindNodeStarted, "LaunchOrAttach"), eventTS(t, evs, agent.KindRunFailed, "")
	want := end.Sub(start).Seconds()
	t.Logf("video %d bytes: %+v; display %dx%d; LaunchOrAttach to the end %.2f s", len(data), p, w, h, want)
	if p.Codec != "h264" || math.Abs(float64(p.W)/float64(p.H)-float64(w)/float64(h)) > 0.01 || min(p.W, p.H) != 720 {
		t.Errorf("video %+v: want H.264, 720 px on its short side, at the display's %dx%d aspect", p, w, h)
	}
	if math.Abs(p.Seconds-want) > 0.1*want {
		t.Errorf("video lasts %.2f s, LaunchOrAttach's start to the run's end %.2f s (more than 10%% apart)\n%s", p.Seconds, want, d.log())
	}
	if want < 8 {
		t.Errorf("the recording lasted %.1f s: fewer than two 4 s segments, so no join was shown", want)
	}
	checkVideoRefs(t, d, id, "LaunchOrAttach", video, evs)
	// Byte ranges.
	req, _ := http.NewRequest("GET", d.URL()+"/v1/runs/"+id+"/artifacts/"+video.ArtifactID, nil)
	req.Header.Set("Range", "bytes=100-199")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 100-199/%d", len(data)) || string(part) != string(data[100:200]) {
		t.Errorf("range: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Range"), len(part))
	}
	if ps := screenrecords(t, srv.Addr(), emu.Serial()); ps != "" {
		t.Errorf("screenrecord left running:\n%s", ps)
	}
	if f := recordingFiles(t, srv.Addr(), emu.Serial()); f != "" {
		t.Errorf("recordings left on the device: %s", f)
	}

	// The run page plays it, streamed from the artifact endpoint.
	const sel = `document.querySelector("#evidence video.run-video")`
	uitest.Run(t, ctx, time.Minute, "the run page's video has its first frames",
		chromedp.Navigate(d.URL()+"/ui/runs/"+id),
		chromedp.Poll[chromedp.Void](`(() => { const v = `+sel+`; return !!v && v.readyState >= 2; })()`, chromedp.WithPollingInterval(100*time.Millisecond)))
	src := uitest.Eval[string](t, ctx, sel+`.currentSrc`)
	if !strings.HasSuffix(src, "/v1/runs/"+id+"/artifacts/"+video.ArtifactID) {
		t.Errorf("the video plays %q, not the artifact endpoint (service worker)", src)
	}
	uitest.Run(t, ctx, time.Minute, "play: currentTime advances",
		chromedp.Evaluate[chromedp.Void](sel+`.play()`),
		chromedp.Poll[chromedp.Void](sel+`.currentTime > 1.5`, chromedp.WithPollingInterval(100*time.Millisecond)))
	uitest.SavePNG(t, ctx, "run-video")
	if e := uitest.Eval[string](t, ctx, `(() => { const v = `+sel+`; return v.error ? String(v.error.code) + " " + v.error.message : ""; })()`); e != "" {
		t.Errorf("video error: %s", e)
	}

	// onSuccess: a FINISHED run keeps WaitIdle's video.
	demo, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	ok := d.submit(t, runBody(emu.Serial(), "file://"+demo, signerDigest(t, demo), "", "", nil))
	d.waitStatus(t, []string{ok}, 4*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if v := d.run(t, ok); v.Status != agent.RunFinished {
		t.Fatalf("demo run %s: %s\n%s", ok, v.Status, d.log())
	}
	okEvs := d.events(t, ok)
	okVideo := videoOf(t, d, ok, "WaitIdle")
	checkVideoRefs(t, d, ok, "WaitIdle", okVideo, okEvs)
	p = probeVideo(t, d.artifactBytes(t, ok, okVideo))
	// A run of two seconds: against its last node's end (the capture
	// starts then), with the adb round trips' half second of slack.
	want = eventTS(t, okEvs, agent.KindNodeFinished, "WaitIdle").Sub(eventTS(t, okEvs, agent.KindNodeStarted, "LaunchOrAttach")).Seconds()
	if p.Codec != "h264" || math.Abs(p.Seconds-want) > 0.1*want+0.5 {
		t.Errorf("FINISHED run's video %+v, LaunchOrAttach to WaitIdle's end %.2f s", p, want)
	}
	if ps := screenrecords(t, srv.Addr(), emu.Serial()); ps != "" {
		t.Errorf("screenrecord left running:\n%s", ps)
	}
}

// videoOf is the run's one video artifact, kept by node.
func videoOf(t testing.TB, d *daemon, id, node string) httpapi.ArtifactView {
	t.Helper()
	var out []httpapi.ArtifactView
	for _, a := range d.artifactsOf(t, id) {
		if a.Kind == agent.ArtifactVideo {
			out = append(out, a)
		}
	}
	if len(out) != 1 || out[0].ContentType != "video/mp4" || out[0].Node != node {
		t.Fatalf("run %s: videos %+v, want one video/mp4 of %s\n%s", id, out, node, d.log())
	}
	return out[0]
}

// checkVideoRefs checks that the step's snapshot and node's node.finished
// point at the video (never carry it).
func checkVideoRefs(t testing.TB, d *daemon, id, node string, video httpapi.ArtifactView, evs []agent.Event) {
	t.Helper()
	ref := agent.ArtifactRef{ArtifactID: video.ArtifactID, Kind: video.Kind, ContentType: video.ContentType, Bytes: video.Bytes, SHA256: video.SHA256}
	var snap agent.Snapshot
	if st := d.call(t, "GET", fmt.Sprintf("/v1/runs/%s/steps/%d", id, video.StepOrdinal), nil, &snap); st != 200 {
		t.Fatalf("step %d: %d", video.StepOrdinal, st)
	}
	rs, err := agent.DecodeRunState(snap)
	if err != nil {
		t.Fatal(err)
	}
	inSnap, inFin := false, false
	for _, sa := range rs.Artifacts {
		inSnap = inSnap || sa.ArtifactRef == ref
	}
	for _, e := range evs {
		var pl agent.NodeFinishedPayload
		if e.Kind == agent.KindNodeFinished && json.Unmarshal(e.Payload, &pl) == nil && pl.NodeName == node {
			for _, r := range pl.Artifacts {
				inFin = inFin || r == ref
			}
		}
	}
	if !inSnap || !inFin {
		t.Errorf("run %s: video ref in the snapshot %v, in %s's node.finished %v", id, inSnap, node, inFin)
	}
}

// TestServeVideoDefaultPolicy: with the default policy (video on failure
// only), a run whose app crashes at every launch keeps LaunchOrAttach's
// video and a FINISHED run keeps none; a run canceled while it records
// leaves no screenrecord process (nor file) on its device.
func TestServeVideoDefaultPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("three full chains (about two minutes)")
	}
	srv := simtest.StartADBServer(t)
	launch := func(edit func(*android.Profile)) string {
		prof := simtest.Profile(t, "default")
		edit(&prof)
		emu, _ := simtest.Launch(t, srv, prof)
		srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
		return emu.Serial()
	}
	crashing := launch(func(p *android.Profile) {
		p.Faults.AppCrash = &android.AppCrashFault{Package: appPkg, Exception: "java.lang.IllegalStateException", Message: "video boom"}
	})
	fine := launch(func(*android.Profile) {})
	demo, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, demo)
	d := startDaemon(t, srv)
	crashRun := d.submit(t, runBody(crashing, "file://"+demo, sha, "", "", nil))
	fineRun := d.submit(t, runBody(fine, "file://"+demo, sha, "", "", nil))
	d.waitStatus(t, []string{crashRun, fineRun}, 4*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if st := d.run(t, crashRun).Status; st != agent.RunFailed {
		t.Fatalf("crash run: %s\n%s", st, d.log())
	}
	if st := d.run(t, fineRun).Status; st != agent.RunFinished {
		t.Fatalf("fine run: %s\n%s", st, d.log())
	}
	crashed := false
	for _, e := range d.events(t, crashRun) {
		var p agent.RunEndedPayload
		if e.Kind == agent.KindRunFailed && json.Unmarshal(e.Payload, &p) == nil && p.ErrorID != nil {
			crashed = *p.ErrorID == agent.ErrAppCrashed
		}
	}
	if !crashed {
		t.Fatalf("crash run did not fail with app_crashed: %v", d.events(t, crashRun))
	}
	crashVideo := videoOf(t, d, crashRun, "LaunchOrAttach")
	if p := probeVideo(t, d.artifactBytes(t, crashRun, crashVideo)); p.Codec != "h264" || p.Frames < 1 {
		t.Errorf("crash video %+v", p)
	}
	for _, a := range d.artifactsOf(t, fineRun) {
		if a.Kind == agent.ArtifactVideo {
			t.Errorf("the FINISHED run kept a video under the default policy: %+v", a)
		}
	}
	for _, s := range []string{crashing, fine} {
		if ps := screenrecords(t, srv.Addr(), s); ps != "" {
			t.Errorf("%s: screenrecord left running:\n%s", s, ps)
		}
		if f := recordingFiles(t, srv.Addr(), s); f != "" {
			t.Errorf("%s: recordings left: %s", s, f)
		}
	}

	// Cancel while it records: the demo app's never-idle screen keeps
	// WaitIdle busy (up to its 10 s budget) with the recording running.
	spinning := launch(func(*android.Profile) {})
	body := runBody(spinning, "file://"+demo, sha, "", "", nil)
	body["launchOrAttach"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidLaunchActivityName"] = ".SpinnerActivity"
	id := d.submit(t, body)
	deadline := time.Now().Add(3 * time.Minute)
	for screenrecords(t, srv.Addr(), spinning) == "" {
		if time.Now().After(deadline) || d.run(t, id).Status.Terminal() {
			t.Fatalf("run %s never recorded (%s)\n%s", id, d.run(t, id).Status, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := d.call(t, "POST", "/v1/runs/"+id+"/cancel", nil, nil); st != 200 && st != 202 {
		t.Fatalf("cancel: %d", st)
	}
	d.waitStatus(t, []string{id}, 2*time.Minute, agent.RunCanceled, agent.RunFailed, agent.RunFinished)
	if st := d.run(t, id).Status; st != agent.RunCanceled {
		t.Errorf("canceled run ended %s", st)
	}
	// The recording stops before the run is CANCELED; its files are
	// removed when the engine lets go of the run, just after.
	if ps := screenrecords(t, srv.Addr(), spinning); ps != "" {
		t.Errorf("a canceled run left screenrecord running:\n%s", ps)
	}
	end := time.Now().Add(20 * time.Second)
	for recordingFiles(t, srv.Addr(), spinning) != "" {
		if time.Now().After(end) {
			t.Fatalf("a canceled run left recordings: %s", recordingFiles(t, srv.Addr(), spinning))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeVideoPause: a run paused while it records shows PAUSED with no
// screenrecord on its device; resumed, it records again, and its video
// (kept on success by its policy) leaves the pause out.
func TestServeVideoPause(t *testing.T) {
	if testing.Short() {
		t.Skip("a full chain with a pause (about a minute)")
	}
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 2\nevidence: {onSuccess: [video], onFailure: [video]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, srv, "--policy", pol)
	demo, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	id := d.submit(t, runBody(emu.Serial(), "file://"+demo, signerDigest(t, demo), "", "", nil))
	deadline := time.Now().Add(3 * time.Minute)
	for screenrecords(t, srv.Addr(), emu.Serial()) == "" {
		if time.Now().After(deadline) || d.run(t, id).Status.Terminal() {
			t.Fatalf("run %s never recorded (%s)\n%s", id, d.run(t, id).Status, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	recording := time.Now() // a screenrecord of the run is on the device by now
	if st := d.call(t, "POST", "/v1/runs/"+id+"/pause", nil, nil); st != 200 && st != 202 {
		t.Fatalf("pause: %d", st)
	}
	d.waitStatus(t, []string{id}, 2*time.Minute, agent.RunPaused, agent.RunFinished, agent.RunFailed)
	if st := d.run(t, id).Status; st != agent.RunPaused {
		t.Fatalf("run %s after pause: %s", id, st)
	}
	if ps := screenrecords(t, srv.Addr(), emu.Serial()); ps != "" {
		t.Fatalf("a PAUSED run records:\n%s", ps)
	}
	// Held paused for 3 s (a measurement window: the pause must last to be
	// seen missing from the video), the device checked all along.
	pausedAt := time.Now()
	for time.Since(pausedAt) < 3*time.Second {
		if ps := screenrecords(t, srv.Addr(), emu.Serial()); ps != "" {
			t.Fatalf("a PAUSED run records:\n%s", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := d.call(t, "POST", "/v1/runs/"+id+"/resume", nil, nil); st != 200 && st != 202 {
		t.Fatalf("resume: %d", st)
	}
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if st := d.run(t, id).Status; st != agent.RunFinished {
		t.Fatalf("run %s: %s\n%s", id, st, d.log())
	}
	evs := d.events(t, id)
	video := videoOf(t, d, id, "WaitIdle")
	p := probeVideo(t, d.artifactBytes(t, id, video))
	// The recording runs from when the test saw screenrecord on the device
	// to the run's end, less the pause: a video holding the pause is longer
	// than that, plus a second of slack. Where the pause falls depends on
	// the node boundary that honours it (CI: after WaitIdle, before the
	// run's end, so a bound from LaunchOrAttach to WaitIdle's end did not
	// hold it), so the pause is clipped to the recorded span.
	end := eventTS(t, evs, agent.KindRunFinished, "")
	pausedAt, resumedAt := eventTS(t, evs, agent.KindRunPaused, ""), eventTS(t, evs, agent.KindRunResumed, "")
	if pausedAt.Before(recording) {
		pausedAt = recording
	}
	if resumedAt.After(end) {
		resumedAt = end
	}
	span, paused := end.Sub(recording).Seconds(), max(0, resumedAt.Sub(pausedAt).Seconds())
	t.Logf("video %+v; recorded span %.2f s, paused %.2f s of it", p, span, paused)
	if p.Codec != "h264" || p.Seconds > span-paused+1 {
		t.Errorf("video %.2f s: the %.2f s pause is in it (%.2f s recorded span)", p.Seconds, paused, span)
	}
}
