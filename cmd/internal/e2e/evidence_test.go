package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

// artifactsOf lists a run's artifacts through the API.
func (d *daemon) artifactsOf(t testing.TB, id string) []httpapi.ArtifactView {
	t.Helper()
	var v httpapi.ArtifactsResponse
	if st := d.call(t, "GET", "/v1/runs/"+id+"/artifacts", nil, &v); st != 200 {
		t.Fatalf("GET artifacts of %s: %d", id, st)
	}
	return v.Artifacts
}

// artifactBytes downloads one artifact and checks its length, digest and
// headers against the listing.
func (d *daemon) artifactBytes(t testing.TB, id string, a httpapi.ArtifactView) []byte {
	t.Helper()
	resp, err := http.Get(d.URL() + "/v1/runs/" + id + "/artifacts/" + a.ArtifactID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != a.ContentType || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET artifact %s: %d %v", a.ArtifactID, resp.StatusCode, resp.Header)
	}
	if int64(len(b)) != a.Bytes || blobs.Sum(b) != a.SHA256 {
		t.Fatalf("artifact %s: %d bytes sha256 %s, listed %d %s", a.ArtifactID, len(b), blobs.Sum(b), a.Bytes, a.SHA256)
	}
	return b
}

// checkSuccessEvidence checks what a FINISHED setup run on serial kept: a
// screenshot PNG at the device's `wm size` and a hierarchy naming the app,
// both after WaitIdle, pointed at (never carried) by the last snapshot and
// WaitIdle's node.finished. It returns the artifacts.
func checkSuccessEvidence(t testing.TB, d *daemon, adbAddr, serial, id string) []httpapi.ArtifactView {
	t.Helper()
	arts := d.artifactsOf(t, id)
	kinds := map[string]httpapi.ArtifactView{}
	for _, a := range arts {
		if a.Node != "WaitIdle" {
			t.Errorf("artifact %+v: want WaitIdle's", a)
		}
		kinds[a.Kind] = a
	}
	shot, okS := kinds[agent.ArtifactScreenshot]
	hier, okH := kinds[agent.ArtifactUIHierarchy]
	if len(arts) != 2 || !okS || !okH {
		t.Fatalf("artifacts %+v: want a screenshot and a ui_hierarchy (the default onSuccess)\n%s", arts, d.log())
	}
	size, err := adb.New(adbAddr).ShellOutput(context.Background(), serial, "wm size")
	if err != nil {
		t.Fatal(err)
	}
	var w, h int
	if _, err := fmt.Sscanf(strings.TrimSpace(size), "Physical size: %dx%d", &w, &h); err != nil {
		t.Fatalf("wm size %q: %v", size, err)
	}
	img, err := png.Decode(bytes.NewReader(d.artifactBytes(t, id, shot)))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h || shot.ContentType != "image/png" {
		t.Errorf("screenshot %dx%d (%s), wm size %dx%d", b.Dx(), b.Dy(), shot.ContentType, w, h)
	}
	xml := d.artifactBytes(t, id, hier)
	if !strings.Contains(string(xml), `package="`+appPkg+`"`) || hier.ContentType != "application/xml" {
		t.Errorf("hierarchy (%s) does not name %s: %.300s", hier.ContentType, appPkg, xml)
	}

	// Pointers: the last step's snapshot and WaitIdle's node.finished.
	var snap agent.Snapshot
	if st := d.call(t, "GET", fmt.Sprintf("/v1/runs/%s/steps/%d", id, shot.StepOrdinal), nil, &snap); st != 200 {
		t.Fatalf("step %d: %d", shot.StepOrdinal, st)
	}
	rs, err := agent.DecodeRunState(snap)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]agent.ArtifactRef{}
	for _, sa := range rs.Artifacts {
		refs[sa.ArtifactID] = sa.ArtifactRef
	}
	var finRefs []agent.ArtifactRef
	for _, e := range d.events(t, id) {
		if e.Kind != agent.KindNodeFinished {
			continue
		}
		var p agent.NodeFinishedPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.NodeName == "WaitIdle" {
			finRefs = p.Artifacts
		}
	}
	for _, a := range arts {
		want := agent.ArtifactRef{ArtifactID: a.ArtifactID, Kind: a.Kind, ContentType: a.ContentType, Bytes: a.Bytes, SHA256: a.SHA256}
		if refs[a.ArtifactID] != want {
			t.Errorf("snapshot step %d points at %+v, want %+v", shot.StepOrdinal, refs[a.ArtifactID], want)
		}
		found := false
		for _, r := range finRefs {
			found = found || r == want
		}
		if !found {
			t.Errorf("WaitIdle's node.finished artifacts %+v lack %+v", finRefs, want)
		}
	}
	return arts
}

// TestServeEvidence: a run through serve with the simulator, the real adb
// server and the real Appium keeps a screenshot at `wm size` and a UI
// hierarchy naming the app, listed and downloaded through the API and the
// CLI; the snapshot and node.finished point at them; the NATS events carry
// no artifact bytes.
func TestServeEvidence(t *testing.T) {
	slow(t, "chains through Appium with evidence")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemon(t, srv)
	col := collectNATS(t, d.NATSURL())
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	id := d.submit(t, runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "", "", nil))
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if v := d.run(t, id); v.Status != agent.RunFinished {
		t.Fatalf("run %s: %s\n%v", id, v.Status, d.events(t, id))
	}
	arts := checkSuccessEvidence(t, d, srv.Addr(), emu.Serial(), id)

	// NATS: every event of the run, none carrying the bytes (no PNG in
	// base64, no hierarchy XML), each small.
	evs := d.events(t, id)
	seen := 0
	deadline := time.After(30 * time.Second)
	for seen < len(evs) {
		select {
		case m := <-col.msgs:
			if !strings.HasSuffix(m.Subject(), "."+id) {
				continue
			}
			seen++
			body := string(m.Data())
			if strings.Contains(body, "iVBORw0KGgo") || strings.Contains(body, "<hierarchy") || strings.Contains(body, "\\u003chierarchy") || len(body) > 16<<10 {
				t.Errorf("NATS event %s (%d bytes) carries artifact bytes: %.200s", m.Subject(), len(body), body)
			}
		case <-deadline:
			t.Fatalf("NATS delivered %d of the run's %d events", seen, len(evs))
		}
	}

	// The CLI lists and downloads them into DIR (created when missing,
	// parents too), and refuses a name in DIR that is a symlink out of it.
	dir := filepath.Join(t.TempDir(), "evidence", "run1")
	out, err := exec.Command(d.bin, "runs", "artifacts", id, "--server", d.URL(), "--download", dir, "--output", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("runs artifacts --download: %v\n%s", err, out)
	}
	var listed struct {
		Artifacts []struct {
			httpapi.ArtifactView
			Path string `json:"path"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(out, &listed); err != nil || len(listed.Artifacts) != len(arts) {
		t.Fatalf("runs artifacts --output json: %s (%v)", out, err)
	}
	for _, a := range listed.Artifacts {
		b, err := os.ReadFile(a.Path)
		if err != nil || filepath.Dir(a.Path) != dir || blobs.Sum(b) != a.SHA256 {
			t.Errorf("downloaded %s: %v, %d bytes sha %s; want %s in %s", a.Path, err, len(b), blobs.Sum(b), a.SHA256, dir)
		}
	}
	trap, outside := t.TempDir(), filepath.Join(t.TempDir(), "outside.png")
	name := httpapi.ArtifactFileName(arts[0].ArtifactID, arts[0].Kind, arts[0].ContentType)
	if err := os.Symlink(outside, filepath.Join(trap, name)); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(d.bin, "runs", "artifacts", id, "--server", d.URL(), "--download", trap).CombinedOutput(); err == nil {
		t.Errorf("download through a symlink out of DIR succeeded: %s", out)
	}
	if _, err := os.Lstat(outside); err == nil {
		t.Error("the download wrote outside DIR through a symlink")
	}
}
