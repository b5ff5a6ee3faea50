package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/policy"
)

// keptScreens records what WaitIdle keeps.
type keptScreens struct {
	mu  sync.Mutex
	got []device.IdleScreen
}

func (k *keptScreens) Keep(s device.IdleScreen) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.got = append(k.got, s)
}

// timeline is an ordered log of what the device and the driver did.
type timeline struct {
	mu  sync.Mutex
	log []string
}

func (l *timeline) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, e)
}

func (l *timeline) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, " ")
}

func shotPNG(n int) []byte { return fmt.Appendf([]byte("\x89PNG\r\n\x1a\n"), "shot-%d", n) }

// shotDevice makes dev answer `screencap -p` (through Shell: the script
// device has no ExecOut) with shotPNG(1), shotPNG(2), … taking took (fake
// time) each, and logs each sample's shell and screencap on tl.
func shotDevice(dev *scriptDevice, tl *timeline, took time.Duration) (*scriptDevice, func() int) {
	var mu sync.Mutex
	n := 0
	inner := dev.shell
	dev.shell = func(cmd string) (device.ShellResult, error) {
		if cmd == "screencap -p" {
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			tl.add(fmt.Sprintf("shot%d-start", k))
			time.Sleep(took)
			tl.add(fmt.Sprintf("shot%d-end", k))
			return device.ShellResult{Stdout: string(shotPNG(k))}, nil
		}
		if strings.HasPrefix(cmd, "dumpsys gfxinfo") {
			tl.add("shell")
		}
		return inner(cmd)
	}
	return dev, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// On a settled screen the screenshot is taken in the wait between the two
// samples (after the first's reads, before the second's), the second proves
// idle unchanged, and WaitIdle keeps that screenshot with the proving
// sample's page source for its run, step and attempt.
func TestWaitIdleKeepsTheIdleScreen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &timeline{}
		settled := time.Now().Add(-2 * time.Second)
		dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 30*time.Millisecond)
		const src = `<hierarchy rotation="0"><node package="com.example.app" text="idle"/></hierarchy>`
		drv := &fakeDriver{source: func(_ string, n int) (string, error) {
			tl.add("source")
			time.Sleep(time.Millisecond) // the page source read spans the shell's
			return src, nil
		}}
		k := &keptScreens{}
		in := idleIn(500, 5000)
		in.Evidence = IdleEvidence{StepOrdinal: 4, Attempt: 2, Screenshot: true, Hierarchy: true}
		start := time.Now()
		if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: drv, IdleScreens: k}); err != nil {
			t.Fatal(err)
		}
		// The proving sample waits for the screencap (30 ms > ConfirmGap);
		// each sample takes the page source's 1 ms.
		if took := time.Since(start); took != 30*time.Millisecond+2*time.Millisecond {
			t.Errorf("idle after %v", took)
		}
		if len(k.got) != 1 || shots() != 1 {
			t.Fatalf("kept %d screens, %d screencaps", len(k.got), shots())
		}
		g := k.got[0]
		if g.RunID != in.RunID || g.StepOrdinal != 4 || g.Attempt != 2 || g.Serial != "s" || g.SessionID != "s1" || g.At.IsZero() {
			t.Errorf("kept %+v", g)
		}
		if g.PageSource != src || !bytes.Equal(g.Screenshot, shotPNG(1)) {
			t.Errorf("kept page source %q screenshot %q", g.PageSource, g.Screenshot)
		}
		// Sample 1's reads, then the screencap, then sample 2's reads (each
		// sample's two reads in either order).
		got := strings.NewReplacer("source shell", "sample", "shell source", "sample").Replace(tl.String())
		if want := "sample shot1-start shot1-end sample"; got != want {
			t.Errorf("order %q, want %q", tl, want)
		}
	})
}

// A screenshot followed by a sample that saw the screen change is never
// kept: after MaxIdleShots such shots none is taken, and the success keeps
// the page source only (the evidence then takes its own screenshot).
func TestWaitIdleDiscardsAShotOfAChangingScreen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tl := &timeline{}
		settled := time.Now().Add(-2 * time.Second)
		dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 5*time.Millisecond)
		// The hierarchy changes right after every screenshot (MaxIdleShots+1
		// would change too, were one taken).
		drv := &fakeDriver{source: func(string, int) (string, error) {
			return fmt.Sprintf(`<hierarchy><node text="%d"/></hierarchy>`, shots()), nil
		}}
		k := &keptScreens{}
		in := idleIn(500, 5000)
		in.Evidence = IdleEvidence{StepOrdinal: 4, Attempt: 1, Screenshot: true, Hierarchy: true}
		if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: drv, IdleScreens: k}); err != nil {
			t.Fatal(err)
		}
		if shots() != MaxIdleShots {
			t.Errorf("%d screencaps, want %d (then no more)", shots(), MaxIdleShots)
		}
		if len(k.got) != 1 || k.got[0].Screenshot != nil {
			t.Fatalf("kept %+v: a screenshot of a changing screen", k.got)
		}
		if want := fmt.Sprintf(`<hierarchy><node text="%d"/></hierarchy>`, MaxIdleShots); k.got[0].PageSource != want {
			t.Errorf("page source %q, want the idle one %q", k.got[0].PageSource, want)
		}
	})
	t.Run("a later shot of the settled screen is kept", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tl := &timeline{}
			settled := time.Now().Add(-2 * time.Second)
			dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 5*time.Millisecond)
			// Changes after the first screenshot only.
			drv := &fakeDriver{source: func(string, int) (string, error) {
				return fmt.Sprintf(`<hierarchy><node text="%d"/></hierarchy>`, min(shots(), 1)), nil
			}}
			k := &keptScreens{}
			in := idleIn(500, 5000)
			in.Evidence = IdleEvidence{Screenshot: true}
			if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: drv, IdleScreens: k}); err != nil {
				t.Fatal(err)
			}
			if shots() != 2 || len(k.got) != 1 || !bytes.Equal(k.got[0].Screenshot, shotPNG(2)) || k.got[0].PageSource != "" {
				t.Fatalf("%d screencaps, kept %+v: want the second shot only (no hierarchy asked)", shots(), k.got)
			}
		})
	})
	t.Run("not while the newest frame may not be on the display", func(t *testing.T) {
		// A frame completed 10 ms before WaitIdle starts may still be on its
		// way to the display: no screenshot stands for the idle screen, the
		// evidence takes its own. 60 ms (> FramePresentMargin): one does.
		for _, age := range []time.Duration{10 * time.Millisecond, 60 * time.Millisecond} {
			synctest.Test(t, func(t *testing.T) {
				tl := &timeline{}
				settled := time.Now().Add(-age)
				dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 5*time.Millisecond)
				k := &keptScreens{}
				in := idleIn(100, 5000)
				in.Evidence = IdleEvidence{Screenshot: true}
				if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: &fakeDriver{}, IdleScreens: k}); err != nil {
					t.Fatal(err)
				}
				want := age >= FramePresentMargin
				if (shots() == 1) != want || (shots() == 0) == want {
					t.Errorf("frame %v old: %d screencaps (%s)", age, shots(), tl)
				}
				if want && (len(k.got) != 1 || !bytes.Equal(k.got[0].Screenshot, shotPNG(1))) {
					t.Errorf("frame %v old: kept %+v", age, k.got)
				}
				if !want && len(k.got) != 0 {
					t.Errorf("frame %v old: kept %+v, nothing to keep", age, k.got)
				}
			})
		}
	})
}

// A screenshot stays proven while the signature holds: taken before a
// sample that did not complete the window yet, it is kept when a later
// unchanged sample does (no second screencap); a change in between drops it.
func TestWaitIdleHoldsTheShotWhileUnchanged(t *testing.T) {
	for _, changeAt := range []int{-1, 3} {
		synctest.Test(t, func(t *testing.T) {
			tl := &timeline{}
			settled := time.Now().Add(-2 * time.Second)
			dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 5*time.Millisecond)
			// Sample 1 takes 60 ms: with the 200 ms interval the next sample
			// looks like the window's last (260+200+60 >= 500) but comes at
			// 461 ms; the window completes at the one after.
			drv := &fakeDriver{source: func(_ string, n int) (string, error) {
				if n == 1 {
					time.Sleep(60 * time.Millisecond)
				} else {
					time.Sleep(time.Millisecond)
				}
				v := 0
				if changeAt >= 0 && n >= changeAt {
					v = 1
				}
				return fmt.Sprintf(`<hierarchy><node text="%d"/></hierarchy>`, v), nil
			}}
			k := &keptScreens{}
			in := idleIn(500, 5000)
			off := false
			in.IdleHeuristicsConfiguration.CountQuietFromLastFrame = &off
			in.Evidence = IdleEvidence{Screenshot: true}
			if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: drv, IdleScreens: k}); err != nil {
				t.Fatal(err)
			}
			want := shotPNG(1)
			if changeAt >= 0 {
				want = shotPNG(2) // the first showed the screen before the change
			}
			if len(k.got) != 1 || !bytes.Equal(k.got[0].Screenshot, want) {
				t.Fatalf("change at sample %d: %d screencaps, kept %+v; want %q (%s)", changeAt, shots(), k.got, want, tl)
			}
			if changeAt < 0 && shots() != 1 {
				t.Errorf("%d screencaps: a held shot is not taken again", shots())
			}
		})
	}
}

// The setup graph asks WaitIdle for what the policy's onSuccess keeps: no
// screencap when the screenshot is not among it, nothing at all for an
// empty list.
func TestSetupWaitIdleEvidenceFollowsThePolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onSuccess []string
		shot, xml bool
	}{
		{"default", nil, true, true},
		{"hierarchy only", []string{agent.ArtifactUIHierarchy}, false, true},
		{"screenshot only", []string{agent.ArtifactScreenshot}, true, false},
		{"nothing", []string{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tl := &timeline{}
				settled := time.Now().Add(-2 * time.Second)
				dev, shots := shotDevice(timelineDevice(t, func(time.Time) time.Time { return settled }), tl, 5*time.Millisecond)
				k := &keptScreens{}
				g, err := NewSetupGraph(SetupDeps{Ports: Ports{Driver: &fakeDriver{}, IdleScreens: k},
					DeviceFor: func(string) device.Device { return dev }})
				if err != nil {
					t.Fatal(err)
				}
				pol := policy.Default()
				if tc.onSuccess != nil {
					pol.Evidence.OnSuccess = tc.onSuccess
				}
				app := map[string]any{"applicationUnderTestDescriptor": map[string]any{"androidPackageId": demoPkg}}
				input, _ := json.Marshal(map[string]any{"provisionApp": app, "launchOrAttach": app,
					"waitIdle": map[string]any{"idleHeuristicsConfiguration": map[string]any{"minQuietMillis": 500}}})
				node, _ := g.Node(NodeWaitIdle)
				res := node.Run(context.Background(), agent.NodeInput{
					Run: agent.Run{RunID: "01JRUN", TenantID: "t", Input: input}, NodeName: NodeWaitIdle,
					StepOrdinal: 4, Attempt: 3, Policy: pol,
					Outputs: map[string]json.RawMessage{NodeEnsureDevice: json.RawMessage(
						`{"deviceRuntimeContext":{"driverSessionId":"s1","deviceId":"s"}}`)}})
				if res.Err != nil {
					t.Fatal(res.Err)
				}
				if got := shots() > 0; got != tc.shot {
					t.Errorf("%d screencaps, want some: %v", shots(), tc.shot)
				}
				if !tc.shot && !tc.xml {
					if len(k.got) != 0 {
						t.Errorf("kept %+v for a policy keeping nothing", k.got)
					}
					return
				}
				if len(k.got) != 1 {
					t.Fatalf("kept %d screens", len(k.got))
				}
				s := k.got[0]
				if s.RunID != "01JRUN" || s.StepOrdinal != 4 || s.Attempt != 3 || (s.Screenshot != nil) != tc.shot || (s.PageSource != "") != tc.xml {
					t.Errorf("kept %+v", s)
				}
			})
		})
	}
}

// A screencap that never answers delays the proving sample by
// IdleShotBudget at most: the screen is still idle (not idle_timeout), the
// shot is abandoned and nothing but the page source is kept.
func TestWaitIdleAbandonsAWedgedScreencap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		settled := time.Now().Add(-2 * time.Second)
		dev := timelineDevice(t, func(time.Time) time.Time { return settled })
		inner := dev.shell
		release := make(chan struct{})
		defer close(release)
		dev.shell = func(cmd string) (device.ShellResult, error) {
			if cmd == "screencap -p" {
				<-release // wedged, deaf to its context, until the test ends
				return device.ShellResult{}, errors.New("released")
			}
			return inner(cmd)
		}
		k := &keptScreens{}
		in := idleIn(500, 5000)
		in.Evidence = IdleEvidence{Screenshot: true, Hierarchy: true}
		start := time.Now()
		if _, err := WaitIdle(context.Background(), in, Ports{Device: dev, Driver: &fakeDriver{}, IdleScreens: k}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != ConfirmGap+IdleShotBudget {
			t.Errorf("idle after %v, want the wait plus IdleShotBudget", took)
		}
		if len(k.got) != 1 || k.got[0].Screenshot != nil || k.got[0].PageSource == "" {
			t.Errorf("kept %+v", k.got)
		}
	})
}
