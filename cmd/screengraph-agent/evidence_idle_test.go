package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

// screencapCounter counts the screencaps asked of a device.
type screencapCounter struct {
	device.Device
	n *atomic.Int32
}

func (d screencapCounter) Shell(ctx context.Context, cmd string) (device.ShellResult, error) {
	if strings.Contains(cmd, "screencap") {
		d.n.Add(1)
	}
	return d.Device.Shell(ctx, cmd)
}

func (d screencapCounter) ExecOut(ctx context.Context, cmd string, max int64) ([]byte, error) {
	if strings.Contains(cmd, "screencap") {
		d.n.Add(1)
	}
	eo, ok := d.Device.(device.ExecOuter)
	if !ok {
		return nil, errors.New("no exec-out")
	}
	return eo.ExecOut(ctx, cmd, max)
}

// sourceCounter counts the page sources asked of a driver.
type sourceCounter struct {
	device.Driver
	n *atomic.Int32
}

func (d sourceCounter) PageSource(ctx context.Context, id string) (string, error) {
	d.n.Add(1)
	return d.Driver.PageSource(ctx, id)
}

// TestChainSuccessEvidenceFromWaitIdle: through the real adb server, the
// real Appium (uiautomator2) and the simulator, the setup chain's success
// evidence (cold run, then warm) is what WaitIdle kept: the Capturer asks
// the device for no screencap and Appium for no page source. The artifacts
// still decode (a PNG at the display's size, well-formed XML naming the
// app), and the hierarchy is the session's page source of the idle screen.
func TestChainSuccessEvidenceFromWaitIdle(t *testing.T) {
	slow(t, "a chain through Appium with evidence")
	ctx := context.Background()
	env := newChainEnv(t)
	h := env.openTestHost(t, "", func(n, l string) { t.Logf("%s: %s", n, l) })
	t.Cleanup(func() { h.Close(context.Background()) })
	capt := h.Engine.Evidence.(*evidence.Capturer)
	var shots, sources atomic.Int32
	deviceFor := capt.DeviceFor
	capt.DeviceFor = func(serial string) device.Device { return screencapCounter{deviceFor(serial), &shots} }
	capt.Driver = sourceCounter{capt.Driver, &sources}
	apk := fixtureAPK("demo-v2.apk")
	c := env.runCmd(apk, signerDigest(t, apk))
	idx, ok := h.Store.(agent.ArtifactIndex)
	if !ok {
		t.Fatalf("store %T lists no artifacts", h.Store)
	}
	for _, pass := range []string{"cold", "warm"} {
		id, status, _, err := submit(ctx, h, c)
		if err != nil || status != agent.RunFinished {
			t.Fatalf("%s run: %s %v", pass, status, err)
		}
		if shots.Load() != 0 || sources.Load() != 0 {
			t.Errorf("%s run: the evidence took %d screencaps and %d page sources; WaitIdle had both", pass, shots.Load(), sources.Load())
		}
		if capt.Idle.Len() != 0 {
			t.Errorf("%s run: %d idle screens still kept after the evidence", pass, capt.Idle.Len())
		}
		arts, err := idx.Artifacts(ctx, agent.Admin(), id)
		if err != nil {
			t.Fatal(err)
		}
		var shot, hier []byte
		for _, a := range arts {
			b, err := blobs.ReadAll(ctx, h.Blobs, a.SHA256)
			if err != nil || int64(len(b)) != a.Bytes || blobs.Sum(b) != a.SHA256 || a.Node != "WaitIdle" {
				t.Fatalf("%s run: artifact %+v: %d bytes, %v", pass, a, len(b), err)
			}
			switch a.Kind {
			case agent.ArtifactScreenshot:
				shot = b
			case agent.ArtifactUIHierarchy:
				hier = b
			}
		}
		if len(arts) != 2 || shot == nil || hier == nil {
			t.Fatalf("%s run: artifacts %+v, want a screenshot and a ui_hierarchy", pass, arts)
		}
		img, err := png.Decode(bytes.NewReader(shot))
		if err != nil {
			t.Fatalf("%s run: screenshot is no PNG: %v", pass, err)
		}
		if w, hh, _ := env.dev.DisplaySize(); img.Bounds().Dx() != w || img.Bounds().Dy() != hh {
			t.Errorf("%s run: screenshot %v, display %dx%d", pass, img.Bounds(), w, hh)
		}
		dec := xml.NewDecoder(bytes.NewReader(hier))
		for {
			if _, err := dec.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s run: hierarchy is no XML: %v\n%.300s", pass, err, hier)
			}
		}
		if !strings.Contains(string(hier), `package="`+appPkg+`"`) {
			t.Errorf("%s run: hierarchy does not name %s: %.300s", pass, appPkg, hier)
		}
		// The screen is still the idle one: the session's page source now is
		// the hierarchy WaitIdle proved idle.
		snap, err := h.Store.LatestSnapshot(ctx, agent.Admin(), id)
		if err != nil {
			t.Fatal(err)
		}
		var st agent.RunState
		var ed struct {
			DRC struct {
				Session string `json:"driverSessionId"`
			} `json:"deviceRuntimeContext"`
		}
		if err := json.Unmarshal(snap.State, &st); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(st.Outputs["EnsureDevice"], &ed); err != nil || ed.DRC.Session == "" {
			t.Fatalf("no session in EnsureDevice's output: %v", err)
		}
		src, err := h.Driver.PageSource(ctx, ed.DRC.Session)
		if err != nil || src != string(hier) {
			t.Errorf("%s run: hierarchy differs from the session's page source (%v):\n%.300s\n---\n%.300s", pass, err, hier, src)
		}
	}
}
