package service_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// fakeScreens is a ScreenCapturer with named knobs: every capture returns
// distinct bytes ("frame SERIAL N", N counting every capture); while hold
// is set, a capture announces itself on started and waits for hold to be
// closed or a value on it.
type fakeScreens struct {
	n       atomic.Int64
	hold    atomic.Pointer[chan struct{}]
	started chan int64
}

func newFakeScreens() *fakeScreens { return &fakeScreens{started: make(chan int64, 1)} }

func (f *fakeScreens) CaptureScreen(ctx context.Context, serial string) ([]byte, error) {
	n := f.n.Add(1)
	if h := f.hold.Load(); h != nil {
		select {
		case f.started <- n:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-*h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []byte(fmt.Sprintf("frame %s %d", serial, n)), nil
}

// stepped makes every capture wait for a value on the returned channel.
func (f *fakeScreens) stepped() chan struct{} {
	c := make(chan struct{})
	f.hold.Store(&c)
	return c
}

func next(t *testing.T, w *service.ScreenWatch) service.ScreenFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("next frame: %v", err)
	}
	return f
}

func tenant(t *testing.T, id string) agent.Scope {
	t.Helper()
	sc, err := agent.Tenant(id)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// Two viewers of one device share ONE capture loop (each frame captured
// once, the same bytes handed to both); the loop runs until the last viewer
// leaves, and no capture starts after that.
func TestScreenSharedLoopStopsWithLastViewer(t *testing.T) {
	f := newFixture(t)
	cam := newFakeScreens()
	svc := f.newService("serve:a", func(c *service.Config) { c.Screens = cam; c.ScreenInterval = time.Millisecond })
	start(t, svc)
	step := cam.stepped()
	ctx := context.Background()
	w1, err := svc.WatchScreen(ctx, agent.Admin(), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	w2, err := svc.WatchScreen(ctx, agent.Admin(), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	if st := svc.ScreenStats(); st.Viewers != 2 {
		t.Fatalf("stats %+v, want 2 viewers", st)
	}
	for i := 1; i <= 5; i++ {
		n := <-cam.started
		step <- struct{}{}
		a, b := next(t, w1), next(t, w2)
		if a.Seq != uint64(i) || b.Seq != a.Seq || !bytes.Equal(a.PNG, []byte(fmt.Sprintf("frame emulator-5554 %d", n))) || &a.PNG[0] != &b.PNG[0] {
			t.Fatalf("frame %d: viewers got seq %d %q and seq %d %q, want the same capture %d", i, a.Seq, a.PNG, b.Seq, b.PNG, n)
		}
	}
	if st := svc.ScreenStats(); st.Loops != 1 || st.Captured != 5 {
		t.Fatalf("two viewers: stats %+v, want 1 loop and 5 captures", st)
	}
	w1.Close()
	<-cam.started
	step <- struct{}{}
	if fr := next(t, w2); fr.Seq != 6 {
		t.Fatalf("after one viewer left: seq %d, want 6", fr.Seq)
	}
	if st := svc.ScreenStats(); st.Loops != 1 || st.Viewers != 1 {
		t.Fatalf("one viewer left: stats %+v, want the loop running for the other", st)
	}
	w2.Close()
	waitFor(t, "the loop to stop", func() bool { return svc.ScreenStats().Loops == 0 })
	captures := cam.n.Load()
	if st := svc.ScreenStats(); st.Viewers != 0 {
		t.Errorf("stats %+v after the last viewer left", st)
	}
	// The loop's goroutine has returned: no capture can start any more.
	if n := cam.n.Load(); n != captures {
		t.Errorf("%d captures after the loop stopped", n-captures)
	}
	if _, err := w2.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after Close: %v", err)
	}
}

// A viewer that does not take its frames loses the older ones: its mailbox
// holds one frame, the newest, never a queue, and the fast viewer of the
// same device gets every frame.
func TestScreenSlowViewerDropsFrames(t *testing.T) {
	f := newFixture(t)
	cam := newFakeScreens()
	svc := f.newService("serve:a", func(c *service.Config) { c.Screens = cam; c.ScreenInterval = time.Millisecond })
	start(t, svc)
	step := cam.stepped()
	ctx := context.Background()
	fast, err := svc.WatchScreen(ctx, agent.Admin(), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := svc.WatchScreen(ctx, agent.Admin(), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const frames = 10
	for i := 1; i <= frames; i++ {
		<-cam.started
		step <- struct{}{}
		if fr := next(t, fast); fr.Seq != uint64(i) {
			t.Fatalf("fast viewer: seq %d, want %d", fr.Seq, i)
		}
		if q := slow.Queued(); q != 1 {
			t.Fatalf("slow viewer after %d frames: %d queued, want 1 (the newest)", i, q)
		}
	}
	if fr := next(t, slow); fr.Seq != frames {
		t.Errorf("slow viewer: seq %d, want the newest (%d)", fr.Seq, frames)
	}
	if d := slow.Dropped(); d != frames-1 {
		t.Errorf("slow viewer dropped %d frames, want %d", d, frames-1)
	}
	if d := fast.Dropped(); d != 0 {
		t.Errorf("fast viewer dropped %d frames", d)
	}
	if st := svc.ScreenStats(); st.Dropped != frames-1 {
		t.Errorf("stats %+v, want %d dropped", st, frames-1)
	}
}

// Tenancy: a tenant watches only a device its run holds; another tenant is
// refused (ErrForbidden). When the run ends and its lease is released, the
// watch ends (ErrScreenLeaseChanged), and a frame whose capture began
// under the old lease and ended after the release reaches no one.
func TestScreenTenancyAndHandover(t *testing.T) {
	f := newFixture(t)
	cam := newFakeScreens()
	svc := f.newService("serve:a", func(c *service.Config) { c.Screens = cam; c.ScreenInterval = 5 * time.Millisecond })
	start(t, svc)
	ctx := context.Background()
	id := submit(t, svc, "emulator-5554") // tenant t1 (prepare)
	f.node.waitStarted(t, id)
	ls, err := f.store.ActiveLeases(ctx, agent.Admin())
	if err != nil || len(ls) != 1 {
		t.Fatalf("active leases %v %v", ls, err)
	}
	token := ls[0].FencingToken

	if _, err := svc.WatchScreen(ctx, tenant(t, "t2"), "emulator-5554"); !errors.Is(err, agent.ErrForbidden) {
		t.Fatalf("t2 watching t1's device: %v, want ErrForbidden", err)
	}
	if _, err := svc.WatchScreen(ctx, tenant(t, "t1"), "emulator-5556"); !errors.Is(err, agent.ErrForbidden) {
		t.Fatalf("t1 watching a device it does not hold: %v, want ErrForbidden", err)
	}
	for _, bad := range []string{"", "a b", string(make([]byte, 256))} {
		if _, err := svc.WatchScreen(ctx, agent.Admin(), bad); agent.Classify(err).ID != agent.ErrInvalidRequest {
			t.Errorf("serial %q: %v, want invalid_request_error", bad, err)
		}
	}
	w, err := svc.WatchScreen(ctx, tenant(t, "t1"), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if fr := next(t, w); fr.FencingToken != token || w.FencingToken != token {
		t.Fatalf("t1's frame under lease %d (watch %d), want %d", fr.FencingToken, w.FencingToken, token)
	}

	// A capture in flight while the lease is released.
	hold := make(chan struct{})
	cam.hold.Store(&hold)
	for len(cam.started) > 0 {
		<-cam.started
	}
	inFlight := <-cam.started
	close(f.node.gate(id))
	waitFor(t, "the lease released", func() bool {
		ls, err := f.store.ActiveLeases(ctx, agent.Admin())
		return err == nil && len(ls) == 0
	})
	close(hold)
	lost := []byte(fmt.Sprintf("frame emulator-5554 %d", inFlight))
	for {
		fr, err := w.Next(ctx)
		if err != nil {
			if !errors.Is(err, service.ErrScreenLeaseChanged) {
				t.Fatalf("t1's watch ended with %v, want ErrScreenLeaseChanged", err)
			}
			break
		}
		if fr.FencingToken != token || bytes.Equal(fr.PNG, lost) {
			t.Fatalf("t1 got frame %q under lease %d after its lease ended (the capture in flight at the release was %d)", fr.PNG, fr.FencingToken, inFlight)
		}
	}
	cam.hold.Store(nil)
	if _, err := svc.WatchScreen(ctx, tenant(t, "t1"), "emulator-5554"); !errors.Is(err, agent.ErrForbidden) {
		t.Errorf("t1 watching after its run ended: %v, want ErrForbidden", err)
	}
	a, err := svc.WatchScreen(ctx, agent.Admin(), "emulator-5554")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if fr := next(t, a); fr.FencingToken != 0 {
		t.Errorf("admin's frame of a free device under lease %d", fr.FencingToken)
	}
}

// The caps: MaxScreenViewersPerTenant watches of one tenant, then
// ErrScreenViewers.
func TestScreenViewerCap(t *testing.T) {
	f := newFixture(t)
	cam := newFakeScreens()
	svc := f.newService("serve:a", func(c *service.Config) { c.Screens = cam })
	start(t, svc)
	var ws []*service.ScreenWatch
	defer func() {
		for _, w := range ws {
			w.Close()
		}
	}()
	for i := range service.MaxScreenViewersPerTenant {
		w, err := svc.WatchScreen(context.Background(), agent.Admin(), fmt.Sprintf("emulator-%d", 5554+2*(i%4)))
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		ws = append(ws, w)
	}
	if _, err := svc.WatchScreen(context.Background(), agent.Admin(), "emulator-5554"); !errors.Is(err, service.ErrScreenViewers) {
		t.Errorf("watch over the cap: %v, want ErrScreenViewers", err)
	}
	waitFor(t, "one loop per device", func() bool { return svc.ScreenStats().Loops == 4 })
}
