package service

import (
	"testing"
	"time"
)

// The fleet's started runs are read once per heartbeat, and a round that a
// tick starts a hair early still reads them: without the half-tick slack a
// read due at 1 s is skipped at 999 ms and waits for the next tick, so a
// killed daemon's run is taken over a tick late (TestFleetChaos).
func TestStartedDueToleratesTickJitter(t *testing.T) {
	for _, c := range []struct {
		heartbeat, tick time.Duration
		after           time.Duration
		due             bool
	}{
		{time.Second, time.Second, 999 * time.Millisecond, true},
		{time.Second, time.Second, 400 * time.Millisecond, false},
		{10 * time.Second, time.Second, 9*time.Second + 400*time.Millisecond, false},
		{10 * time.Second, time.Second, 9*time.Second + 600*time.Millisecond, true},
	} {
		s := &Service{cfg: Config{Heartbeat: c.heartbeat, Tick: c.tick}}
		t0 := time.Unix(1_800_000_000, 0)
		if !s.startedDue(t0) {
			t.Fatal("the first round does not read the started runs")
		}
		if got := s.startedDue(t0.Add(c.after)); got != c.due {
			t.Errorf("heartbeat %v, tick %v: due %v after the last read = %v, want %v", c.heartbeat, c.tick, c.after, got, c.due)
		}
	}
}
