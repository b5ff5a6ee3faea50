package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// The queue's NOTIFYs name the device in the queue's normal form
// (migration 00013): a new run its device name, a released lease its
// device key. With the empty payload of 00008 every daemon woke for every
// run and release (issue 26 part 4's wake-up storm).
func TestQueueNotifyNamesTheDevice(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "LISTEN "+postgres.QueueChannel); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no queue NOTIFY: %v", err)
		}
		return n.Payload
	}
	r := storetest.NewRun("T", " Pixel 7 Pro ")
	if err := s.CreateRun(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "pixel_7_pro" {
		t.Errorf("new run: payload %q, want %q", got, "pixel_7_pro")
	}
	l, err := s.AcquireLease(t.Context(), "Host-A/Emulator-5554", "serve:a", r.RunID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(t.Context(), l.Serial, l.FencingToken, agent.LeaseFinished); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "host-a/emulator-5554" {
		t.Errorf("released lease: payload %q, want %q", got, "host-a/emulator-5554")
	}
}

// A store whose daemon filters the queue's wake-ups (FilterQueueWakes)
// is woken by a run for a name it accepts, not by one for another name.
func TestQueueWakesOnlyForAcceptedNames(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The listener's first wake-up says it listens.
	select {
	case <-s.QueueChanged():
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up when the listener began")
	}
	// The listener asks the filter of each signal in order: when it asks
	// about "mine", its decision on "other-device" is made, and nothing
	// may have woken the queue yet.
	wokenEarly := make(chan bool, 1)
	s.FilterQueueWakes(func(name string) bool {
		if name == "mine" {
			select {
			case <-s.QueueChanged():
				wokenEarly <- true
			default:
				wokenEarly <- false
			}
			return true
		}
		return false
	})
	for _, serial := range []string{"Other Device", "mine"} {
		if err := s.CreateRun(t.Context(), storetest.NewRun("T", serial)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case early := <-wokenEarly:
		if early {
			t.Error("a run for another device's name woke the queue")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the filter was never asked about mine")
	}
	select {
	case <-s.QueueChanged():
	case <-time.After(5 * time.Second):
		t.Fatal("a run for an accepted name did not wake the queue")
	}
}

// A signal that names nothing (an empty payload) is shown to the filter as
// "" and wakes the queue whatever the filter answers: a daemon that reads
// only the names its wake-ups named learns from it to read every name.
func TestQueueFilterSeesSignalsNamingNothing(t *testing.T) {
	url := testenv.PostgresURL(t)
	s, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-s.QueueChanged():
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up when the listener began")
	}
	asked := make(chan string, 4)
	s.FilterQueueWakes(func(name string) bool {
		asked <- name
		return false
	})
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `SELECT pg_notify($1, '')`, postgres.QueueChannel); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-asked:
		if name != "" {
			t.Errorf("the filter was asked about %q, want \"\"", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the filter was not asked about a signal naming nothing")
	}
	select {
	case <-s.QueueChanged():
	case <-time.After(5 * time.Second):
		t.Fatal("a signal naming nothing did not wake the queue")
	}
}

// A relay claims the runs its own store committed at once and another
// daemon's only in a sweep (at most every postgres.SweepEvery after an
// empty one): every relay of the fleet no longer races for every run's
// head (issue 26 part 4). A run whose daemon died is still taken.
func TestClaimOwnRunsSweepOthers(t *testing.T) {
	url := testenv.PostgresURL(t)
	a, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(t.Context(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	claim := func(s *postgres.Store) []string {
		t.Helper()
		c, err := s.ClaimOutbox(t.Context(), 8, 64)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		acked := map[string]int64{}
		for _, run := range c.Runs() {
			ids = append(ids, run[0].RunID)
			acked[run[0].RunID] = run[len(run)-1].Sequence
		}
		if len(ids) > 0 {
			if _, err := c.Finish(t.Context(), acked); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	// b sweeps the empty outbox: its next sweep is a SweepEvery away.
	if got := claim(b); len(got) != 0 {
		t.Fatalf("empty outbox: b claimed %v", got)
	}
	x := storetest.NewRun("T", "emulator-5554")
	if err := a.CreateRun(t.Context(), x); err != nil {
		t.Fatal(err)
	}
	if err := a.CommitStep(t.Context(), storetest.NodeStep(x, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	if got := claim(b); len(got) != 0 {
		t.Errorf("b claimed %v, a's run, outside a sweep", got)
	}
	if got := claim(a); len(got) != 1 || got[0] != x.RunID {
		t.Errorf("a claimed %v, want its own run %s", got, x.RunID)
	}
	// A run committed through a store whose relay never claims (its daemon
	// died): b's sweep takes it.
	dead, err := postgres.Open(t.Context(), url, postgres.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	y := storetest.NewRun("T", "emulator-5556")
	if err := dead.CreateRun(t.Context(), y); err != nil {
		t.Fatal(err)
	}
	if err := dead.CommitStep(t.Context(), storetest.NodeStep(y, 1, 0, "EnsureDevice")); err != nil {
		t.Fatal(err)
	}
	dead.Close()
	deadline := time.Now().Add(5 * postgres.SweepEvery)
	for {
		got := claim(b)
		if len(got) == 1 && got[0] == y.RunID {
			break
		}
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("b claimed %v, want the dead daemon's run %s within a few sweeps", got, y.RunID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rows, err := a.Unpublished(t.Context(), 10); err != nil || len(rows) != 0 {
		t.Errorf("unpublished left: %v, %v", rows, err)
	}
}

// The fleet sweeps the outbox once per SweepEvery whatever its number of
// daemons: the turn is one row of agent_kv, taken by the first daemon
// whose check finds it a SweepEvery old (a sweep walks every unpublished
// row; each of N daemons sweeping was N walks a second).
func TestFleetSweepTurnIsShared(t *testing.T) {
	url := testenv.PostgresURL(t)
	var stores []*postgres.Store
	for range 3 {
		s, err := postgres.Open(t.Context(), url, postgres.Options{NoListen: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	turns := func() (n int) {
		for _, s := range stores {
			ok, err := postgres.FleetSweepDue(s, t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				n++
			}
		}
		return n
	}
	if n := turns(); n != 1 {
		t.Fatalf("first round: %d daemons got the sweep, want 1", n)
	}
	if n := turns(); n != 0 {
		t.Fatalf("at once again: %d daemons got the sweep, want 0", n)
	}
	deadline := time.Now().Add(5 * postgres.SweepEvery)
	for {
		n := turns()
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d daemons got the sweep in one round, want 1 once a SweepEvery passed", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
