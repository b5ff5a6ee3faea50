package service

import (
	"context"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// queueOnly is an agent.RunQueue with nothing queued.
type queueOnly struct{}

func (queueOnly) QueuedRuns(context.Context, agent.QueueQuery) ([]agent.Run, error) { return nil, nil }
func (queueOnly) SeeDevices(context.Context, []string) error                        { return nil }
func (queueOnly) UnseenRuns(context.Context, time.Duration, int) ([]agent.Run, error) {
	return nil, nil
}
func (queueOnly) CountQueued(context.Context, string, int) (int, error) { return 0, nil }

// A queue signal (a new run's device name, a released lease's device key,
// in the queue's normal form) wakes a daemon that reaches a device of that
// name, and no other once it has listed its devices (issue 26 part 4: the
// wake-up storm); before its first listing every signal wakes it.
func TestQueueWakesOnlyForReachedNames(t *testing.T) {
	s := &Service{cfg: Config{HostID: "host-a"}}
	if !s.wakesFor("emulator-5556") {
		t.Error("before its first listing, a signal did not wake the daemon")
	}
	r := &round{s: s, ctx: t.Context(), busy: map[string]bool{"emulator-5554": true},
		cands: []Candidate{{Serial: "emulator-5554", ID: "Dev1", Model: "Pixel 7", APILevel: 34}, {Serial: "emulator-5556"}}}
	if _, err := r.readQueue(queueOnly{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"emulator-5554": true, "host-a/emulator-5554": true, "dev1/emulator-5554": true, "pixel_7": true, "android-34": true,
		"emulator-5556": true, "host-a/emulator-5556": true,
		"emulator-5558": false, "host-b/emulator-5554": false, "pixel_8": false,
	} {
		if got := s.wakesFor(name); got != want {
			t.Errorf("wakesFor(%q) = %v, want %v", name, got, want)
		}
	}
}
