package nodes

import (
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// The sampler's steps, one by one, on hand-made samples (no device): what
// each step decides from the state the one before left.

type samplerClock struct{ t time.Time }

func (c *samplerClock) Now() time.Time { return c.t }

func testSampler(t *testing.T, minQuiet, maxWait, interval int64, fromLastFrame bool) (*sampler, *samplerClock, *[]string) {
	t.Helper()
	clk := &samplerClock{t: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	var lines []string
	in := WaitIdleInput{RunID: "01JRUN", IdleHeuristicsConfiguration: IdleHeuristicsConfiguration{
		MinQuietMillis: i64(minQuiet), MaxWaitMillis: i64(maxWait), SamplingIntervalMillis: i64(interval), CountQuietFromLastFrame: &fromLastFrame}}
	p := Ports{Clock: clk, Progress: func(l string) { lines = append(lines, l) }}
	sm := newSampler(in, p, &appWatch{})
	sm.signals = []string{"frames", "focus"}
	return sm, clk, &lines
}

func sampleOf(frames int64, focus string, sinceFrame time.Duration) idleSample {
	return idleSample{sig: &idleSignature{frames: frames, focus: focus}, sinceFrame: sinceFrame, uid: -1}
}

// compare: the first sample starts the window; an unchanged one confirms
// it; a changed one starts it again at once.
func TestSamplerCompareStartsAndConfirms(t *testing.T) {
	sm, clk, _ := testSampler(t, 400, 5000, 200, false)
	t0 := clk.t
	sm.compare(sampleOf(10, "a", -1), t0, nil)
	if sm.confirmed || !sm.quietSince.Equal(t0) {
		t.Fatalf("first sample: confirmed %v, quiet since %v", sm.confirmed, sm.quietSince)
	}
	shot := &idleShot{png: []byte("png")}
	sm.compare(sampleOf(10, "a", -1), t0.Add(200*time.Millisecond), shot)
	if !sm.confirmed || !sm.quietSince.Equal(t0) || sm.held != shot {
		t.Fatalf("unchanged sample: confirmed %v, quiet since %v, held %v", sm.confirmed, sm.quietSince, sm.held)
	}
	t2 := t0.Add(400 * time.Millisecond)
	sm.compare(sampleOf(11, "a", -1), t2, nil)
	if sm.confirmed || !sm.quietSince.Equal(t2) || sm.held != nil {
		t.Fatalf("changed sample: confirmed %v, quiet since %v, held %v", sm.confirmed, sm.quietSince, sm.held)
	}
	bad := sampleOf(11, "a", -1)
	bad.changedByError = true
	sm.compare(bad, t2.Add(time.Second), nil)
	if sm.confirmed {
		t.Fatal("a sample read with an error confirmed the window")
	}
}

// compare + quietFrom: the app's last frame dates the window back, only
// once confirmed, and never before the previous sample.
func TestSamplerQuietFromLastFrame(t *testing.T) {
	sm, clk, _ := testSampler(t, 400, 5000, 200, true)
	t0 := clk.t
	sm.compare(sampleOf(10, "a", 3*time.Second), t0, nil)
	if got := sm.quietFrom(); !got.Equal(t0) {
		t.Fatalf("unconfirmed window starts %v, want the sample %v", got, t0)
	}
	t1 := t0.Add(ConfirmGap)
	sm.compare(sampleOf(10, "a", 3*time.Second+ConfirmGap), t1, nil)
	if got := sm.quietFrom(); !got.Equal(t0.Add(-3 * time.Second)) {
		t.Fatalf("confirmed window starts %v, want the last frame %v", got, t0.Add(-3*time.Second))
	}
	// A change after it: the new last frame cannot reach before t1.
	t2 := t1.Add(200 * time.Millisecond)
	sm.compare(sampleOf(11, "a", 5*time.Second), t2, nil)
	if !sm.lastFrameAt.Equal(t1) {
		t.Fatalf("last frame %v, want clipped to the previous sample %v", sm.lastFrameAt, t1)
	}
	off, _, _ := testSampler(t, 400, 5000, 200, false)
	off.compare(sampleOf(10, "a", 3*time.Second), t0, nil)
	off.compare(sampleOf(10, "a", 3*time.Second), t1, nil)
	if got := off.quietFrom(); !got.Equal(t0) {
		t.Fatalf("countQuietFromLastFrame=false: window starts %v", got)
	}
}

// confirm: idle once the window reaches minQuiet, idle_timeout at the
// deadline (with the assessment), else not done.
func TestSamplerConfirm(t *testing.T) {
	sm, clk, lines := testSampler(t, 400, 1000, 200, false)
	t0 := clk.t
	x := sampleOf(10, "a", -1)
	sm.compare(x, t0, nil)
	if _, done, _ := sm.confirm(x, t0.Add(100*time.Millisecond)); done {
		t.Fatal("done after 100 ms of quiet")
	}
	sm.compare(x, t0.Add(400*time.Millisecond), nil)
	a, done, err := sm.confirm(x, t0.Add(400*time.Millisecond))
	if !done || err != nil || a.QuietWindowObservedMillis != 400 || a.NetworkInFlightStatus != NetworkUnknown {
		t.Fatalf("at 400 ms: %+v %v %v", a, done, err)
	}
	if !strings.Contains(strings.Join(*lines, "\n"), "idle after 400ms") {
		t.Errorf("no idle line: %q", *lines)
	}
	sm2, _, _ := testSampler(t, 400, 1000, 200, false)
	y := sampleOf(1, "a", -1)
	sm2.compare(y, t0.Add(900*time.Millisecond), nil)
	a, done, err = sm2.confirm(y, t0.Add(time.Second))
	if !done || agent.Classify(err).ID != agent.ErrIdleTimeout || a == nil || a.QuietWindowObservedMillis != 100 {
		t.Fatalf("at the deadline: %+v %v %v", a, done, err)
	}
}

// nextWait: until the window would be complete, within [ConfirmGap,
// interval], never past the deadline.
func TestSamplerNextWait(t *testing.T) {
	sm, clk, _ := testSampler(t, 400, 1000, 200, true)
	t0 := clk.t
	sm.compare(sampleOf(10, "a", -1), t0, nil)
	if w, _ := sm.nextWait(t0); w != 200*time.Millisecond {
		t.Errorf("first wait %v, want the interval", w)
	}
	if w, _ := sm.nextWait(t0.Add(300 * time.Millisecond)); w != 100*time.Millisecond {
		t.Errorf("wait at 300 ms %v, want the 100 ms left of the window", w)
	}
	if w, _ := sm.nextWait(t0.Add(399 * time.Millisecond)); w != ConfirmGap {
		t.Errorf("wait at 399 ms %v, want ConfirmGap", w)
	}
	sm.compare(sampleOf(11, "a", -1), t0.Add(950*time.Millisecond), nil)
	if w, _ := sm.nextWait(t0.Add(950 * time.Millisecond)); w != 50*time.Millisecond {
		t.Errorf("wait 50 ms before the deadline %v", w)
	}
	last, _, _ := testSampler(t, 400, 5000, 200, true)
	last.compare(sampleOf(10, "a", 2*time.Second), t0, nil)
	if w, p := last.nextWait(t0); w != ConfirmGap || p != 2*time.Second {
		t.Errorf("settled screen: wait %v potential %v, want ConfirmGap and 2s", w, p)
	}
}

// speculates: the evidence's screenshot is taken in a wait only when kept,
// not held already, within MaxIdleShots, and the next samples may prove
// idle on a screen already presented.
func TestSamplerSpeculates(t *testing.T) {
	sm, clk, _ := testSampler(t, 400, 5000, 200, true)
	t0 := clk.t
	x := sampleOf(10, "a", time.Second)
	sm.compare(x, t0, nil)
	w, p := sm.nextWait(t0)
	if sm.speculates(x, t0, t0, w, p) {
		t.Fatal("speculates without evidence kept")
	}
	sm.keep, sm.in.Evidence.Screenshot = true, true
	if !sm.speculates(x, t0, t0, w, p) {
		t.Fatal("no screenshot before the sample that proves idle")
	}
	fresh := sampleOf(10, "a", 10*time.Millisecond)
	if sm.speculates(fresh, t0, t0, w, p) {
		t.Error("screenshot of a frame maybe not on the display yet")
	}
	sm.shots = MaxIdleShots
	if sm.speculates(x, t0, t0, w, p) {
		t.Error("more than MaxIdleShots screenshots")
	}
	sm.shots, sm.held = 0, &idleShot{}
	if sm.speculates(x, t0, t0, w, p) {
		t.Error("a second screenshot while one is held")
	}
	far, _, _ := testSampler(t, 4000, 10000, 200, false)
	far.keep, far.in.Evidence.Screenshot = true, true
	far.compare(x, t0, nil)
	w, p = far.nextWait(t0)
	if far.speculates(x, t0, t0, w, p) {
		t.Error("screenshot taken long before the window can complete")
	}
}
