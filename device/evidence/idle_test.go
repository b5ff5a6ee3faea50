package evidence_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
)

var (
	idlePNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR idle screen")
	idleXML = `<hierarchy rotation="0"><node package="com.example.app" text="idle"/></hierarchy>`
)

// successRequest is request(false) for WaitIdle, step 4, attempt 1.
func successRequest() agent.EvidenceRequest {
	req := request(false)
	req.Node, req.StepOrdinal, req.Attempt = "WaitIdle", 4, 1
	return req
}

// idleScreen is what WaitIdle would keep for successRequest.
func idleScreen() device.IdleScreen {
	req := successRequest()
	return device.IdleScreen{RunID: req.Run.RunID, StepOrdinal: 4, Attempt: 1, Serial: "emulator-5554",
		SessionID: "sess-1", PageSource: idleXML, Screenshot: idlePNG, At: time.Now()}
}

// captured returns the bytes of the screenshot and hierarchy artifacts.
func captured(t *testing.T, dir agent.BlobStore, arts []agent.Artifact) (shot, xml []byte) {
	t.Helper()
	for _, a := range arts {
		b, err := blobs.ReadAll(context.Background(), dir, a.SHA256)
		if err != nil || int64(len(b)) != a.Bytes || a.ArtifactID != "" {
			t.Fatalf("%s: blob %d bytes, %v; row %+v", a.Kind, len(b), err, a)
		}
		switch a.Kind {
		case agent.ArtifactScreenshot:
			shot = b
			if a.ContentType != evidence.TypePNG {
				t.Errorf("screenshot content type %q", a.ContentType)
			}
		case agent.ArtifactUIHierarchy:
			xml = b
			if a.ContentType != evidence.TypeXML {
				t.Errorf("hierarchy content type %q", a.ContentType)
			}
		}
	}
	return shot, xml
}

// The success evidence of WaitIdle's attempt is what WaitIdle kept: no
// screencap, no page source asked; the rows are shaped as a fresh capture's.
func TestCaptureUsesTheIdleScreen(t *testing.T) {
	dev := &fakeDevice{shot: pngBytes}
	c, dir := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy}, 5*time.Second)
	c.Idle = &evidence.IdleScreens{}
	c.Idle.Keep(idleScreen())
	arts, lines := c.Capture(context.Background(), successRequest())
	if len(arts) != 2 || len(lines) != 0 {
		t.Fatalf("artifacts %+v lines %+v", arts, lines)
	}
	shot, xml := captured(t, dir, arts)
	if !bytes.Equal(shot, idlePNG) || string(xml) != idleXML {
		t.Errorf("screenshot %q hierarchy %q: want WaitIdle's", shot, xml)
	}
	if len(dev.cmds) != 0 {
		t.Errorf("device asked %q: WaitIdle had it all", dev.cmds)
	}
	if c.Idle.Len() != 0 {
		t.Errorf("%d screens still kept after use", c.Idle.Len())
	}
	// Used once: the next capture of the same attempt asks the device.
	arts, _ = c.Capture(context.Background(), successRequest())
	if shot, xml := captured(t, dir, arts); !bytes.Equal(shot, pngBytes) || string(xml) == idleXML {
		t.Errorf("second capture reused the kept screen: %q %q", shot, xml)
	}
}

// Only that run's success evidence of that attempt, on that device and
// session, gets the kept screen; the rest capture as without it.
func TestCaptureIdleScreenOnlyForItsRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*agent.EvidenceRequest, *device.IdleScreen)
		fresh    bool // the screenshot is captured afresh
		freshXML bool
	}{
		{"another run", func(r *agent.EvidenceRequest, _ *device.IdleScreen) { r.Run.RunID = "01JBD0QJ8K9M2N3P4Q5R6S7T8W" }, true, true},
		{"another attempt", func(r *agent.EvidenceRequest, _ *device.IdleScreen) { r.Attempt = 2 }, true, true},
		{"another step", func(r *agent.EvidenceRequest, _ *device.IdleScreen) { r.StepOrdinal = 8 }, true, true},
		{"a failure", func(r *agent.EvidenceRequest, _ *device.IdleScreen) { r.Failed = true }, true, true},
		{"another device", func(_ *agent.EvidenceRequest, s *device.IdleScreen) { s.Serial = "emulator-5556" }, true, true},
		{"another session", func(_ *agent.EvidenceRequest, s *device.IdleScreen) { s.SessionID = "sess-0" }, false, true},
		{"no screenshot proven", func(_ *agent.EvidenceRequest, s *device.IdleScreen) { s.Screenshot = nil }, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := &fakeDevice{shot: pngBytes}
			c, dir := capturer(t, dev, []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy}, 5*time.Second)
			c.Idle = &evidence.IdleScreens{}
			req, kept := successRequest(), idleScreen()
			tc.edit(&req, &kept)
			c.Idle.Keep(kept)
			arts, _ := c.Capture(context.Background(), req)
			shot, xml := captured(t, dir, arts)
			if got := !bytes.Equal(shot, idlePNG); got != tc.fresh || slices.Contains(dev.cmds, "exec:screencap -p") != tc.fresh {
				t.Errorf("screenshot %q (commands %q): fresh %v, want %v", shot, dev.cmds, got, tc.fresh)
			}
			if got := string(xml) != idleXML; got != tc.freshXML {
				t.Errorf("hierarchy %q: fresh %v, want %v", xml, got, tc.freshXML)
			}
		})
	}
	// Another run's request leaves this run's screen for it.
	k := &evidence.IdleScreens{}
	c, _ := capturer(t, &fakeDevice{shot: pngBytes}, []string{agent.ArtifactScreenshot}, 5*time.Second)
	c.Idle = k
	k.Keep(idleScreen())
	other := successRequest()
	other.Run.RunID = "01JBD0QJ8K9M2N3P4Q5R6S7T8W"
	c.Capture(context.Background(), other)
	if k.Len() != 1 {
		t.Errorf("another run's capture dropped this run's screen (%d kept)", k.Len())
	}
}

// Memory is bounded: entries, bytes, age; a run keeps one screen.
func TestIdleScreensBounds(t *testing.T) {
	now := time.Date(2026, 11, 26, 16, 0, 0, 0, time.UTC)
	k := &evidence.IdleScreens{Now: func() time.Time { return now }}
	s := idleScreen()
	for i := range evidence.MaxIdleScreens + 10 {
		s.RunID = "run-" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		k.Keep(s)
	}
	if k.Len() != evidence.MaxIdleScreens {
		t.Errorf("%d kept, at most %d", k.Len(), evidence.MaxIdleScreens)
	}
	k.Keep(s) // the same run again: replaces
	if k.Len() != evidence.MaxIdleScreens {
		t.Errorf("a run's second screen: %d kept", k.Len())
	}

	big := &evidence.IdleScreens{Now: func() time.Time { return now }}
	s.Screenshot = make([]byte, agent.MaxArtifactBytes-1)
	for _, id := range []string{"r1", "r2", "r3"} {
		s.RunID = id
		big.Keep(s)
	}
	if n := big.Len(); n*(agent.MaxArtifactBytes-1) > evidence.MaxIdleScreenBytes || n == 0 {
		t.Errorf("%d screens of %d bytes kept, at most %d bytes", n, agent.MaxArtifactBytes-1, evidence.MaxIdleScreenBytes)
	}

	// Too old to be asked for: dropped at the next Keep.
	old := &evidence.IdleScreens{Now: func() time.Time { return now }}
	s = idleScreen()
	old.Keep(s)
	now = now.Add(evidence.IdleScreenTTL + time.Second)
	s.RunID = "another"
	old.Keep(s)
	if old.Len() != 1 {
		t.Errorf("%d kept, the stale one not dropped", old.Len())
	}
	// A stale screen is not used.
	dev := &fakeDevice{shot: pngBytes}
	c, dir := capturer(t, dev, []string{agent.ArtifactScreenshot}, 5*time.Second)
	c.Idle = &evidence.IdleScreens{Now: func() time.Time { return now }}
	c.Idle.Keep(idleScreen())
	now = now.Add(evidence.IdleScreenTTL + time.Second)
	arts, _ := c.Capture(context.Background(), successRequest())
	if shot, _ := captured(t, dir, arts); !bytes.Equal(shot, pngBytes) {
		t.Errorf("a screen older than the TTL was used")
	}
}
