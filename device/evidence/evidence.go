// Package evidence captures what a run keeps of its device after the node
// that ends it (issue 14): a screenshot (adb `exec-out screencap -p`), the
// UI hierarchy (the Appium session's page source, or `uiautomator dump`
// without a session), the logcat since the run's start (the app's pid and
// the crash buffer) and the app's ANR traces (dropbox data_app_anr). It
// implements agent.Evidence: blobs go to an agent.BlobStore first, the
// engine commits the rows with the step. A kind that cannot be captured is
// a log line, never a failure of the run. After a successful WaitIdle the
// screenshot and hierarchy are what WaitIdle kept (IdleScreens), when it
// kept them.
package evidence

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// Content types by kind.
const (
	TypePNG  = "image/png"
	TypeXML  = "application/xml"
	TypeText = "text/plain; charset=utf-8"
)

// Capturer implements agent.Evidence.
type Capturer struct {
	Blobs agent.BlobStore
	// DeviceFor returns the device of an adb serial.
	DeviceFor func(serial string) device.Device
	// Driver reads the page source of the run's Appium session; nil uses
	// `uiautomator dump` only.
	Driver device.Driver
	// Kinds says what to capture after a final success or failure under a
	// policy, and the capture's time budget (policy.EvidenceKinds).
	Kinds func(pol agent.RetryPolicy, failed bool) ([]string, time.Duration)
	// Logf reports a capture's failures to the daemon's log too; may be nil.
	Logf func(format string, args ...any)
	// Idle holds what WaitIdle proved idle (nodes.Ports.IdleScreens wired
	// to it): the success evidence of that run's attempt uses its page
	// source and screenshot instead of asking again. nil captures always.
	Idle *IdleScreens
	// Video is the run's screen recording (kind video); nil records none.
	Video *Recorder
}

var _ agent.Evidence = (*Capturer)(nil)

// unreachable are the failures after which the device cannot answer.
var unreachable = map[agent.ErrorID]bool{agent.ErrDeviceNotFound: true, agent.ErrDeviceOffline: true,
	agent.ErrDeviceUnauthorized: true, agent.ErrBootTimeout: true}

// target is what a capture needs to know of the run.
type target struct {
	serial, session, pkg string
	// since starts the log window (device clock); leased: it is the
	// lease's (EvidenceRequest.Window), zero when unknown; dirty: the
	// screen may still show another tenant's run.
	since         time.Time
	leased, dirty bool
}

// Capture implements agent.Evidence: the kinds concurrently, under the budget.
func (c *Capturer) Capture(ctx context.Context, req agent.EvidenceRequest) ([]agent.Artifact, []agent.TokenDelta) {
	kinds, budget := c.Kinds(req.Policy, req.Failed)
	if c.Video != nil && !slices.Contains(kinds, agent.ArtifactVideo) {
		// The run's end, and its outcome's list keeps no video: the
		// recording stops (and its files go) before the run's end commits.
		c.Video.Drop(ctx, req.Run.RunID)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	tg := targetOf(req)
	idle := c.idleScreen(req, tg)
	var lines []agent.TokenDelta
	note := func(format string, args ...any) {
		d := agent.Log("evidence: "+format, args...)
		d.Text = agent.RedactString(d.Text)
		lines = append(lines, d)
		if c.Logf != nil {
			c.Logf("run %s %s: %s", req.Run.RunID, req.Node, d.Text)
		}
	}
	if tg.serial == "" {
		note("no device to capture %s from (the run never named one)", strings.Join(kinds, ", "))
		return nil, lines
	}
	if req.Failed && unreachable[req.ErrorID] {
		// Every device command would wait out the adb client's reconnect
		// grace for a device that is not there: the budget, for nothing.
		note("%s not captured: the run failed with %s", strings.Join(kinds, ", "), req.ErrorID)
		return nil, lines
	}
	results := c.captureAll(ctx, req.Run.RunID, c.DeviceFor(tg.serial), tg, kinds, idle, budget)
	return collect(kinds, results, note), lines
}

// idleScreen is what WaitIdle kept for exactly this attempt on the run's
// device (zero when none, or the attempt failed). Taken, and so dropped,
// whatever the request: kept once, used once.
func (c *Capturer) idleScreen(req agent.EvidenceRequest, tg target) device.IdleScreen {
	if c.Idle == nil {
		return device.IdleScreen{}
	}
	idle, ok := c.Idle.take(req.Run.RunID, req.StepOrdinal, req.Attempt)
	if !ok || req.Failed || idle.Serial != tg.serial {
		return device.IdleScreen{}
	}
	return idle
}

// kindResult is one kind's capture.
type kindResult struct {
	data       []byte
	ctype, sum string
	err        error
	noted      string
	lines      []string // of the video: what was left out
}

// captureAll takes the kinds at once: the screenshot (adb), the hierarchy
// (Appium) and the logs use separate channels, so a capture takes about
// its slowest kind, not their sum (the warm chain's default evidence went
// from 61 ms to about half). Each captured kind's blob is stored; results
// keep the kinds' order.
func (c *Capturer) captureAll(ctx context.Context, runID string, dev device.Device, tg target, kinds []string, idle device.IdleScreen, budget time.Duration) []kindResult {
	results := make([]kindResult, len(kinds))
	var wg sync.WaitGroup
	for i, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			if kind == agent.ArtifactVideo {
				r.data, r.lines, r.err = c.video(ctx, runID)
				r.ctype = TypeMP4
			} else {
				r.data, r.ctype, r.err = c.capture(ctx, dev, tg, kind, idle)
			}
			if r.err != nil && ctx.Err() != nil {
				r.noted = fmt.Sprintf("%s not captured: the %s evidence budget ran out", kind, budget)
				return
			}
			if r.err != nil || r.data == nil {
				return
			}
			r.sum = sha256Hex(r.data)
			if err := c.Blobs.Put(ctx, r.sum, r.data); err != nil {
				r.noted = fmt.Sprintf("%s not stored: %v", kind, err)
			}
		}()
	}
	wg.Wait()
	return results
}

// collect turns the results into artifact rows, in the kinds' order, and
// notes what was left out and why.
func collect(kinds []string, results []kindResult, note func(format string, args ...any)) []agent.Artifact {
	var arts []agent.Artifact
	for i, kind := range kinds {
		r := results[i]
		for _, l := range r.lines {
			note("%s: %s", kind, l)
		}
		switch {
		case r.noted != "":
			note("%s", r.noted)
		case r.err != nil:
			note("%s not captured: %v", kind, r.err)
		case r.data == nil:
			// nothing of this kind (no ANR)
		default:
			arts = append(arts, agent.Artifact{ArtifactRef: agent.ArtifactRef{Kind: kind, ContentType: r.ctype, Bytes: int64(len(r.data)), SHA256: r.sum}})
		}
	}
	return arts
}

// capture takes one kind from the device, or from what WaitIdle proved
// idle (idle, zero when none): its screenshot, and its page source when it
// is the run's session's.
func (c *Capturer) capture(ctx context.Context, dev device.Device, tg target, kind string, idle device.IdleScreen) ([]byte, string, error) {
	switch kind {
	case agent.ArtifactScreenshot, agent.ArtifactUIHierarchy:
		if tg.dirty {
			return nil, "", errors.New("the device's reset after another tenant's run failed, so the screen is not this run's")
		}
	case agent.ArtifactLogcat, agent.ArtifactANRTraces:
		if tg.leased && tg.since.IsZero() {
			return nil, "", errors.New("the device clock at the lease's start is unknown, so no log window is this run's")
		}
	}
	switch kind {
	case agent.ArtifactScreenshot:
		if idle.Screenshot != nil {
			return idle.Screenshot, TypePNG, nil
		}
		b, err := screenshot(ctx, dev)
		return b, TypePNG, err
	case agent.ArtifactUIHierarchy:
		if idle.PageSource != "" && idle.SessionID == tg.session && strings.Contains(idle.PageSource, "<") {
			return []byte(idle.PageSource), TypeXML, nil
		}
		b, err := c.hierarchy(ctx, dev, tg)
		return b, TypeXML, err
	case agent.ArtifactLogcat:
		b, err := logcat(ctx, dev, tg)
		return b, TypeText, err
	case agent.ArtifactANRTraces:
		b, err := anrTraces(ctx, dev, tg)
		return b, TypeText, err
	}
	return nil, "", fmt.Errorf("unknown kind %q", kind)
}

// video is the run's recording (Recorder.Video); nil data when none was made.
func (c *Capturer) video(ctx context.Context, runID string) ([]byte, []string, error) {
	if c.Video == nil {
		return nil, nil, errors.New("this daemon records no video")
	}
	return c.Video.Video(ctx, runID)
}

// screenshot is `adb exec-out screencap -p`, checked to be a PNG.
func screenshot(ctx context.Context, dev device.Device) ([]byte, error) {
	return device.Screencap(ctx, dev, agent.MaxArtifactBytes)
}

// hierarchy is the session's page source, else `uiautomator dump`.
func (c *Capturer) hierarchy(ctx context.Context, dev device.Device, tg target) ([]byte, error) {
	var first error
	if c.Driver != nil && tg.session != "" {
		src, err := c.Driver.PageSource(ctx, tg.session)
		if err == nil && strings.Contains(src, "<") {
			return capBytes([]byte(src))
		}
		first = err
	}
	// uiautomator writes the XML to the file named, then a line saying so.
	r, err := dev.Shell(ctx, "uiautomator dump /dev/tty")
	if err == nil && r.ExitCode == 0 {
		out, _, _ := strings.Cut(r.Stdout, "UI hierchary dumped to:") // sic, the tool's spelling
		if out = strings.TrimSpace(out); strings.HasPrefix(out, "<?xml") || strings.HasPrefix(out, "<hierarchy") {
			return capBytes([]byte(out))
		}
		err = fmt.Errorf("uiautomator dump printed no hierarchy (%q)", firstBytes([]byte(r.Stdout+r.Stderr)))
	} else if err == nil {
		err = fmt.Errorf("uiautomator dump: exit %d: %s", r.ExitCode, firstBytes([]byte(r.Stderr+r.Stdout)))
	}
	if first != nil {
		return nil, fmt.Errorf("page source: %v; %v", first, err)
	}
	return nil, err
}

// logcat is `logcat -d -v threadtime -T <window start>` (the app's pid
// only, when it runs), then the crash buffer over the same window: a dead
// app's FATAL EXCEPTION is there and nowhere else. The window starts at
// the lease's start on the device clock, so an earlier lease's lines (another
// tenant's run) are never in it, whatever the run names.
func logcat(ctx context.Context, dev device.Device, tg target) ([]byte, error) {
	since := "'" + strconv.FormatFloat(float64(tg.since.UnixMilli())/1000, 'f', 3, 64) + "'"
	var pidArg string
	if tg.pkg != "" {
		if r, err := dev.Shell(ctx, "pidof "+shellWord(tg.pkg)); err == nil && r.ExitCode == 0 {
			if f := strings.Fields(r.Stdout); len(f) > 0 {
				if _, err := strconv.Atoi(f[0]); err == nil {
					pidArg = " --pid=" + f[0]
				}
			}
		}
	}
	main, err := dev.Shell(ctx, "logcat -d -v threadtime -T "+since+pidArg)
	if err != nil {
		return nil, err
	}
	if main.ExitCode != 0 {
		return nil, fmt.Errorf("logcat: exit %d: %s", main.ExitCode, firstBytes([]byte(main.Stderr)))
	}
	var b bytes.Buffer
	b.WriteString(main.Stdout)
	if pidArg != "" || !strings.Contains(main.Stdout, "beginning of crash") {
		crash, err := dev.Shell(ctx, "logcat -d -v threadtime -b crash -T "+since)
		if err != nil {
			return nil, err
		}
		if crash.ExitCode == 0 && crash.Stdout != "" {
			b.WriteString("--------- beginning of crash\n")
			b.WriteString(crash.Stdout)
		}
	}
	out := b.Bytes()
	if len(out) > agent.MaxArtifactBytes {
		// Keep the end: the failure is at the end of the window.
		out = out[len(out)-agent.MaxArtifactBytes:]
	}
	return out, nil
}

// anrTraces are the app's data_app_anr dropbox entries stamped inside the
// window (`dumpsys dropbox --print --file`: the entry file's name carries
// its epoch milliseconds, DropBoxManagerService's <tag>@<millis>.txt; an
// entry without one is left out); their text holds the traces. nil when
// there are none.
func anrTraces(ctx context.Context, dev device.Device, tg target) ([]byte, error) {
	r, err := dev.Shell(ctx, "dumpsys dropbox --print --file data_app_anr")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, e := range parse.ParseDropbox(r.Stdout) {
		if tg.pkg != "" && e.Process() != tg.pkg {
			continue
		}
		if e.Millis > 0 && e.Millis < tg.since.UnixMilli() || e.Millis <= 0 && tg.leased {
			continue
		}
		fmt.Fprintf(&b, "%s %s\n", e.Time, e.Tag)
		for k, v := range e.Headers {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
		b.WriteString("\n" + e.Body + "\n")
	}
	if b.Len() == 0 {
		return nil, nil
	}
	return capBytes(b.Bytes())
}

func capBytes(b []byte) ([]byte, error) {
	if len(b) > agent.MaxArtifactBytes {
		return nil, fmt.Errorf("%d bytes, more than the %d an artifact may hold", len(b), agent.MaxArtifactBytes)
	}
	return b, nil
}

func firstBytes(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

// shellWord quotes s for the device's sh.
func shellWord(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// targetOf reads the device, session and package from the run's outputs
// (EnsureDevice's deviceRuntimeContext) and input (the app descriptor), and
// the window from the request (the lease's, else the run's submission).
func targetOf(req agent.EvidenceRequest) target {
	tg := target{serial: req.Run.Serial, since: req.Run.CreatedAt}
	if w := req.Window; w != nil {
		tg.since, tg.leased, tg.dirty = w.Since, true, w.Dirty
	}
	var ed struct {
		DRC *struct {
			DriverSessionID string `json:"driverSessionId"`
			DeviceID        string `json:"deviceId"`
		} `json:"deviceRuntimeContext"`
	}
	if raw, ok := req.Outputs["EnsureDevice"]; ok && json.Unmarshal(raw, &ed) == nil && ed.DRC != nil {
		tg.session = ed.DRC.DriverSessionID
		if ed.DRC.DeviceID != "" {
			tg.serial = ed.DRC.DeviceID
		}
	}
	for _, n := range []string{"launchOrAttach", "waitIdle", "provisionApp"} {
		if p := requestPackage(req.Run, n); p != "" {
			tg.pkg = p
			break
		}
	}
	if tg.since.IsZero() && !tg.leased {
		tg.since = time.Now().Add(-time.Hour)
	}
	return tg
}

// requestPackage is the androidPackageId of node n's app descriptor in the
// run's request ("" when none or not a package name).
func requestPackage(run agent.Run, n string) string {
	var in map[string]struct {
		AUT struct {
			Package string `json:"androidPackageId"`
		} `json:"applicationUnderTestDescriptor"`
	}
	if json.Unmarshal(run.Input, &in) != nil || !validPackage(in[n].AUT.Package) {
		return ""
	}
	return in[n].AUT.Package
}

// validPackage: an Android package name's characters (it goes into a shell
// command line, quoted anyway).
func validPackage(p string) bool {
	if len(p) == 0 || len(p) > 255 {
		return false
	}
	for _, r := range p {
		if !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
