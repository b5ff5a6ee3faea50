// Package storetest is the contract every agent.Store implementation passes
// (the embedded SQLite store, Postgres, any in-memory fake): call
// Run(t, newStore) from the implementation's tests. It depends on the agent
// package only, so a store outside snapshots/ can use it too.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// NewRun returns a PENDING run of tenant with a fresh ULID.
func NewRun(tenant, serial string) agent.Run {
	return agent.Run{
		RunID:         ulid.Make().String(),
		TenantID:      tenant,
		ProjectID:     "01HZX0PROJECT12345678",
		Status:        agent.RunPending,
		Serial:        serial,
		Graph:         "setup",
		Input:         json.RawMessage(`{"deviceConfiguration":{"platformName":"android","deviceName":"` + serial + `"},"driverReusePolicy":"REUSE_OR_CREATE"}`),
		PolicyVersion: 1,
	}
}

// Event returns a complete envelope of run r at sequence seq with a fresh
// eventId, sealed by agent.Event.Seal (sha256 over
// eventId|runId|sequence|kind|RFC 8785 payload). It panics on a payload that
// is not valid JSON: a bug in the test.
func Event(r agent.Run, seq int64, kind string, payload string) agent.Event {
	e := agent.Event{
		EventID:   ulid.Make().String(),
		RunID:     r.RunID,
		TenantID:  r.TenantID,
		ProjectID: r.ProjectID,
		Sequence:  seq,
		TS:        agent.FormatTS(time.Now()),
		Kind:      kind,
		Version:   agent.EventVersion,
		Payload:   json.RawMessage(payload),
	}
	if err := e.Seal(); err != nil {
		panic(err)
	}
	return e
}

// NodeStep returns the step of one node: started, one token_delta, finished
// at sequences from, from+1, from+2, and the snapshot of stepOrdinal.
func NodeStep(r agent.Run, from int64, stepOrdinal int, node string) agent.Step {
	p := fmt.Sprintf(`{"nodeName":%q,"stepOrdinal":%d}`, node, stepOrdinal)
	return agent.Step{
		RunID: r.RunID,
		Events: []agent.Event{
			Event(r, from, agent.KindNodeStarted, p),
			Event(r, from+1, agent.KindNodeTokenDelta, `{"line":"adb shell getprop sys.boot_completed -> 1"}`),
			Event(r, from+2, agent.KindNodeFinished, p),
		},
		Snapshot: &agent.Snapshot{
			RunID: r.RunID, StepOrdinal: stepOrdinal, NodeName: node, ResumeToken: ulid.Make().String(),
			State: json.RawMessage(fmt.Sprintf(`{"next":"after-%s","artifacts":{"apk":"s3://bucket/app.apk"}}`, node)),
		},
	}
}

// Run runs the contract against stores made by newStore (a fresh, empty,
// migrated store per call; newStore registers its own cleanup).
func Run(t *testing.T, newStore func(t *testing.T) agent.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s agent.Store)
	}{
		{"Runs", testRuns},
		{"ListRunsPages", testListRunsPages},
		{"CommitStep", testCommitStep},
		{"CommitStepPolicyVersion", testCommitStepPolicyVersion},
		{"CommitStepCASFailureWritesNothing", testCASFailureWritesNothing},
		{"CommitStepDuplicateSequenceWritesNothing", testDuplicateSequence},
		{"CommitStepGapAndInvalid", testGapAndInvalid},
		{"CommitStepDuplicateSnapshotWritesNothing", testDuplicateSnapshot},
		{"CommitStepSnapshotBelowLatestWritesNothing", testSnapshotBelowLatest},
		{"UniqueRunSequenceConcurrent", testUniqueSequenceConcurrent},
		{"OutboxUniqueWhileUnpublished", testOutbox},
		{"ConcurrentTerminalCAS", testConcurrentTerminalCAS},
		{"ConcurrentTerminalCommitStep", testConcurrentTerminalCommit},
		{"Snapshots", testSnapshots},
		{"Control", testControl},
		{"ControlExactlyOnce", testControlExactlyOnce},
		{"KV", testKV},
		{"EventsAfter", testEventsAfter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tc.fn(t, s)
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

func mustCreate(t *testing.T, s agent.Store, r agent.Run) agent.Run {
	t.Helper()
	if err := s.CreateRun(ctx(t), r); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	got, err := s.GetRun(ctx(t), agent.Admin(), r.RunID)
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	return got
}

func mustCommit(t *testing.T, s agent.Store, st agent.Step) {
	t.Helper()
	if err := s.CommitStep(ctx(t), st); err != nil {
		t.Fatalf("CommitStep: %v", err)
	}
}

// sameJSON compares JSON semantically: Postgres JSONB does not keep bytes.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(want) == 0 && len(got) == 0 {
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: stored JSON %q does not parse: %v", what, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want JSON %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func sameEvent(t *testing.T, got, want agent.Event) {
	t.Helper()
	gp, wp := got.Payload, want.Payload
	got.Payload, want.Payload = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("event = %+v, want %+v", got, want)
	}
	sameJSON(t, "payload of "+want.EventID, gp, wp)
}

func state(t *testing.T, s agent.Store, runID string) (status agent.RunStatus, events []agent.Event, outbox []agent.OutboxRow, snaps int) {
	t.Helper()
	r, err := s.GetRun(ctx(t), agent.Admin(), runID)
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	events, err = s.Events(ctx(t), agent.Admin(), runID, 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	all, err := s.Unpublished(ctx(t), 10000)
	if err != nil {
		t.Fatalf("Unpublished: %v", err)
	}
	for _, o := range all {
		if o.RunID == runID {
			outbox = append(outbox, o)
		}
	}
	if sn, err := s.LatestSnapshot(ctx(t), agent.Admin(), runID); err == nil {
		snaps = sn.StepOrdinal + 1
	} else if !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("LatestSnapshot: %v", err)
	}
	return r.Status, events, outbox, snaps
}

func testRuns(t *testing.T, s agent.Store) {
	runs := createRuns(t, s)
	// Defaults: status PENDING, created/updated now.
	d := NewRun("T3", "emulator-5558")
	d.Status = ""
	before := time.Now().Add(-time.Second)
	got := mustCreate(t, s, d)
	if got.Status != agent.RunPending || got.CreatedAt.Before(before) || !got.UpdatedAt.Equal(got.CreatedAt) {
		t.Errorf("defaults: status %q created %v updated %v", got.Status, got.CreatedAt, got.UpdatedAt)
	}

	if _, err := s.GetRun(ctx(t), agent.Admin(), ulid.Make().String()); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("GetRun(unknown) err = %v, want ErrNotFound", err)
	}
	dup := NewRun("T-other", "x")
	dup.RunID = runs[0].RunID
	if err := s.CreateRun(ctx(t), dup); err == nil {
		t.Errorf("CreateRun(duplicate id) = nil, want an error")
	}
	if r, _ := s.GetRun(ctx(t), agent.Admin(), runs[0].RunID); r.TenantID != "01HZX0TENANT1234567890" {
		t.Errorf("duplicate CreateRun overwrote the run: tenant %q", r.TenantID)
	}
	checkListRuns(t, s, runs)
}

// createRuns creates three runs of one tenant a minute apart (serials
// emulator-5554, emulator-5556, emulator-5554), each followed by a run of
// tenant T2 created now, and checks each reads back as written.
func createRuns(t *testing.T, s agent.Store) []agent.Run {
	base := time.Date(2025, 10, 23, 12, 0, 0, 123456000, time.UTC)
	var runs []agent.Run
	for i, serial := range []string{"emulator-5554", "emulator-5556", "emulator-5554"} {
		r := NewRun("01HZX0TENANT1234567890", serial)
		r.CreatedAt = base.Add(time.Duration(i) * time.Minute)
		r.UpdatedAt = r.CreatedAt
		got := mustCreate(t, s, r)
		sameJSON(t, "input", got.Input, r.Input)
		got.Input, r.Input = nil, nil
		if !got.CreatedAt.Equal(r.CreatedAt) || !got.UpdatedAt.Equal(r.UpdatedAt) {
			t.Errorf("times = %v/%v, want %v", got.CreatedAt, got.UpdatedAt, r.CreatedAt)
		}
		got.CreatedAt, got.UpdatedAt, r.CreatedAt, r.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("GetRun = %+v, want %+v", got, r)
		}
		runs = append(runs, got)
		runs[len(runs)-1].RunID = r.RunID
		mustCreate(t, s, NewRun("T2", "other")) // created now: newer than all three
	}
	return runs
}

// checkListRuns: ListRuns' filters (serial, status, limit) over the runs
// of testRuns (runs are createRuns'), newest first.
func checkListRuns(t *testing.T, s agent.Store, runs []agent.Run) {
	list := mustList(t, s, agent.RunFilter{Serial: "emulator-5554"})
	if ids := runIDs(list); !slices.Equal(ids, []string{runs[2].RunID, runs[0].RunID}) {
		t.Errorf("ListRuns(serial) = %v, want newest first %v", ids, []string{runs[2].RunID, runs[0].RunID})
	}
	if err := s.SetStatus(ctx(t), runs[1].RunID, []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
		t.Fatal(err)
	}
	list = mustList(t, s, agent.RunFilter{Status: []agent.RunStatus{agent.RunRunning, agent.RunPaused}})
	if ids := runIDs(list); !slices.Equal(ids, []string{runs[1].RunID}) {
		t.Errorf("ListRuns(RUNNING|PAUSED) = %v, want [%s]", ids, runs[1].RunID)
	}
	if list = mustList(t, s, agent.RunFilter{Limit: 2}); len(list) != 2 {
		t.Errorf("ListRuns(limit 2) returned %d runs", len(list))
	}
	all := mustList(t, s, agent.RunFilter{})
	if len(all) != 7 {
		t.Errorf("ListRuns() returned %d runs, want 7", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].CreatedAt.After(all[i-1].CreatedAt) {
			t.Errorf("ListRuns not newest first at %d: %v after %v", i, all[i].CreatedAt, all[i-1].CreatedAt)
		}
	}
}

// mustList is ListRuns as admin; the test fails on an error.
func mustList(t *testing.T, s agent.Store, f agent.RunFilter) []agent.Run {
	t.Helper()
	list, err := s.ListRuns(ctx(t), agent.Admin(), f)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func runIDs(rs []agent.Run) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.RunID)
	}
	return out
}

func testCommitStep(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("01HZX0TENANT1234567890", "emulator-5554"))
	start := agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 1, agent.KindRunStarted, `{"graph":"setup"}`)},
		StatusFrom: []agent.RunStatus{agent.RunPending}, StatusTo: agent.RunRunning}
	mustCommit(t, s, start)
	step := NodeStep(r, 2, 0, "EnsureDevice")
	mustCommit(t, s, step)

	status, events, outbox, _ := state(t, s, r.RunID)
	if status != agent.RunRunning {
		t.Errorf("status = %s, want RUNNING (CAS in the step)", status)
	}
	want := append(slices.Clone(start.Events), step.Events...)
	if len(events) != len(want) {
		t.Fatalf("Events = %d events, want %d", len(events), len(want))
	}
	for i := range want {
		sameEvent(t, events[i], want[i])
	}
	if last, err := s.LastSequence(ctx(t), r.RunID); err != nil || last != 4 {
		t.Errorf("LastSequence = %d, %v; want 4", last, err)
	}
	checkOutboxRows(t, r, outbox, want)
	sn, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sn.RunID != r.RunID || sn.NodeName != "EnsureDevice" || sn.ResumeToken != step.Snapshot.ResumeToken || sn.CreatedAt.IsZero() {
		t.Errorf("Snapshot = %+v", sn)
	}
	sameJSON(t, "snapshot state", sn.State, step.Snapshot.State)

	// A step with nothing but a CAS is allowed.
	if err := s.CommitStep(ctx(t), agent.Step{RunID: r.RunID, StatusFrom: []agent.RunStatus{agent.RunRunning}, StatusTo: agent.RunPaused}); err != nil {
		t.Fatalf("CAS-only step: %v", err)
	}
	if got, _ := s.GetRun(ctx(t), agent.Admin(), r.RunID); got.Status != agent.RunPaused || got.UpdatedAt.Before(r.UpdatedAt) {
		t.Errorf("after CAS-only step: %+v", got)
	}
	// Unknown run.
	other := NewRun("T", "x")
	if err := s.CommitStep(ctx(t), NodeStep(other, 1, 0, "EnsureDevice")); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("CommitStep(unknown run) = %v, want ErrNotFound", err)
	}
}

// checkOutboxRows: run r's outbox holds one unpublished row per event of
// want, in order, on the run's subject, its body the event's envelope.
func checkOutboxRows(t *testing.T, r agent.Run, outbox []agent.OutboxRow, want []agent.Event) {
	t.Helper()
	if len(outbox) != len(want) {
		t.Fatalf("outbox has %d rows, want %d", len(outbox), len(want))
	}
	for i, o := range outbox {
		e := want[i]
		if o.Sequence != e.Sequence || o.EventID != e.EventID || o.PublishedAt != nil {
			t.Errorf("outbox[%d] = %+v, want sequence %d event %s unpublished", i, o, e.Sequence, e.EventID)
		}
		if wantSubj := "agent.events." + r.TenantID + "." + r.RunID; o.Subject != wantSubj {
			t.Errorf("outbox[%d].Subject = %q, want %q", i, o.Subject, wantSubj)
		}
		var body agent.Event
		if err := json.Unmarshal(o.Body, &body); err != nil {
			t.Fatalf("outbox body is not an event envelope: %v", err)
		}
		sameEvent(t, body, e)
	}
}

func testCASFailureWritesNothing(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	mustCommit(t, s, agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 1, agent.KindRunStarted, `{}`)},
		StatusFrom: []agent.RunStatus{agent.RunPending}, StatusTo: agent.RunRunning})
	st := NodeStep(r, 2, 0, "EnsureDevice")
	st.Events = append(st.Events, Event(r, 5, agent.KindRunFinished, `{}`))
	st.StatusFrom = []agent.RunStatus{agent.RunPending, agent.RunPaused} // run is RUNNING
	st.StatusTo = agent.RunFinished
	err := s.CommitStep(ctx(t), st)
	if !errors.Is(err, agent.ErrStatusConflict) {
		t.Fatalf("CommitStep with failing CAS = %v, want ErrStatusConflict", err)
	}
	status, events, outbox, snaps := state(t, s, r.RunID)
	if status != agent.RunRunning || len(events) != 1 || len(outbox) != 1 || snaps != 0 {
		t.Errorf("after failed CAS: status %s, %d events, %d outbox rows, %d snapshots; want RUNNING, 1, 1, 0", status, len(events), len(outbox), snaps)
	}
	if _, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, 0); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("snapshot of the failed step exists: %v", err)
	}
	// The same step succeeds with the right from-set.
	st.StatusFrom = []agent.RunStatus{agent.RunRunning}
	mustCommit(t, s, st)
	if status, events, outbox, snaps = state(t, s, r.RunID); status != agent.RunFinished || len(events) != 5 || len(outbox) != 5 || snaps != 1 {
		t.Errorf("after retried step: status %s, %d events, %d outbox rows, %d snapshots", status, len(events), len(outbox), snaps)
	}
}

func testDuplicateSequence(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	mustCommit(t, s, NodeStep(r, 1, 0, "EnsureDevice")) // 1..3
	st := NodeStep(r, 3, 1, "ProvisionApp")             // 3..5: 3 is taken
	st.StatusFrom, st.StatusTo = []agent.RunStatus{agent.RunPending}, agent.RunRunning
	err := s.CommitStep(ctx(t), st)
	if !errors.Is(err, agent.ErrSequenceTaken) {
		t.Fatalf("CommitStep(taken sequence) = %v, want ErrSequenceTaken", err)
	}
	status, events, outbox, snaps := state(t, s, r.RunID)
	if status != agent.RunPending || len(events) != 3 || len(outbox) != 3 || snaps != 1 {
		t.Errorf("after duplicate sequence: status %s, %d events, %d outbox, latest step+1 %d; want PENDING, 3, 3, 1", status, len(events), len(outbox), snaps)
	}
	for _, e := range st.Events {
		for _, got := range events {
			if got.EventID == e.EventID {
				t.Errorf("event %s of the rejected step was written", e.EventID)
			}
		}
	}
	// Re-sending an already committed step (same events) is also rejected.
	if err := s.CommitStep(ctx(t), NodeStep(r, 1, 5, "X")); !errors.Is(err, agent.ErrSequenceTaken) {
		t.Errorf("CommitStep(1..3 again) = %v, want ErrSequenceTaken", err)
	}
}

func testGapAndInvalid(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	bad := map[string]agent.Step{
		"gap after last": NodeStep(r, 4, 0, "EnsureDevice"),
		"gap inside": {RunID: r.RunID, Events: []agent.Event{
			Event(r, 1, agent.KindNodeStarted, `{}`), Event(r, 3, agent.KindNodeFinished, `{}`)}},
		"other tenant": {RunID: r.RunID, Events: []agent.Event{func() agent.Event {
			e := Event(r, 1, agent.KindRunStarted, `{}`)
			e.TenantID = "someone-else"
			return e
		}()}},
		"bad checksum": {RunID: r.RunID, Events: []agent.Event{func() agent.Event {
			e := Event(r, 1, agent.KindRunStarted, `{"a":1}`)
			e.Payload = json.RawMessage(`{"a":2}`)
			return e
		}()}},
		"event of other run": {RunID: r.RunID, Events: []agent.Event{Event(NewRun("T", "y"), 1, agent.KindRunStarted, `{}`)}},
	}
	for name, st := range bad {
		if err := s.CommitStep(ctx(t), st); err == nil {
			t.Errorf("CommitStep(%s) = nil, want an error", name)
		}
	}
	if _, events, outbox, snaps := state(t, s, r.RunID); len(events) != 0 || len(outbox) != 0 || snaps != 0 {
		t.Errorf("rejected steps wrote %d events, %d outbox rows, %d snapshots", len(events), len(outbox), snaps)
	}
}

func testDuplicateSnapshot(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	first := NodeStep(r, 1, 0, "EnsureDevice")
	mustCommit(t, s, first)
	again := NodeStep(r, 4, 0, "EnsureDevice") // step 0 again
	again.StatusFrom, again.StatusTo = []agent.RunStatus{agent.RunPending}, agent.RunRunning
	if err := s.CommitStep(ctx(t), again); err == nil {
		t.Fatal("CommitStep(step 0 twice) = nil, want an error")
	}
	status, events, outbox, _ := state(t, s, r.RunID)
	if status != agent.RunPending || len(events) != 3 || len(outbox) != 3 {
		t.Errorf("after duplicate snapshot: status %s, %d events, %d outbox rows; want PENDING, 3, 3", status, len(events), len(outbox))
	}
	sn, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, 0)
	if err != nil || sn.ResumeToken != first.Snapshot.ResumeToken {
		t.Errorf("step 0 snapshot = %+v, %v; want the first one", sn, err)
	}
}

// testSnapshotBelowLatest: a run's snapshots are committed in step order
// (snapshots.ErrSnapshotTaken, migration 00014): a step ordinal below the
// latest snapshot's is refused, though no snapshot has it, and nothing of
// the step is written.
func testSnapshotBelowLatest(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	mustCommit(t, s, NodeStep(r, 1, 0, "EnsureDevice"))
	mustCommit(t, s, NodeStep(r, 4, 2, "LaunchOrAttach"))
	if err := s.CommitStep(ctx(t), NodeStep(r, 7, 1, "ProvisionApp")); err == nil {
		t.Fatal("CommitStep(step 1 after step 2) = nil, want an error")
	}
	if _, events, _, _ := state(t, s, r.RunID); len(events) != 6 {
		t.Errorf("after a snapshot below the latest: %d events, want 6", len(events))
	}
	if _, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, 1); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Snapshot(1) = %v, want ErrNotFound", err)
	}
	mustCommit(t, s, NodeStep(r, 7, 3, "WaitIdle"))
}

func testUniqueSequenceConcurrent(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CommitStep(context.Background(), NodeStep(r, 1, i, "EnsureDevice"))
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, agent.ErrSequenceTaken):
			t.Errorf("losing CommitStep err = %v, want ErrSequenceTaken", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d concurrent commits of sequences 1..3 won, want exactly 1", wins, n)
	}
	_, events, outbox, _ := state(t, s, r.RunID)
	if len(events) != 3 || len(outbox) != 3 {
		t.Errorf("%d events, %d outbox rows, want 3 and 3", len(events), len(outbox))
	}
}

func testOutbox(t *testing.T, s agent.Store) {
	a := mustCreate(t, s, NewRun("T", "emulator-5554"))
	b := mustCreate(t, s, NewRun("T", "emulator-5556"))
	mustCommit(t, s, NodeStep(b, 1, 0, "EnsureDevice"))
	mustCommit(t, s, NodeStep(a, 1, 0, "EnsureDevice"))
	mustCommit(t, s, NodeStep(a, 4, 1, "ProvisionApp"))

	rows := mustUnpublished(t, s)
	checkOrdered(t, rows, 9)
	if got, _ := s.Unpublished(ctx(t), 4); len(got) != 4 || got[0].EventID != rows[0].EventID {
		t.Errorf("Unpublished(4) = %d rows", len(got))
	}
	// Mark the first run's first two rows.
	first := rows[0].RunID
	for _, o := range rows[:2] {
		if err := s.MarkPublished(ctx(t), o.RunID, o.Sequence); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkPublished(ctx(t), first, 1); err != nil {
		t.Errorf("MarkPublished twice = %v, want nil (idempotent)", err)
	}
	if err := s.MarkPublished(ctx(t), first, 99); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("MarkPublished(no row) = %v, want ErrNotFound", err)
	}
	rows2 := mustUnpublished(t, s)
	checkOrdered(t, rows2, 7)
	if rows2[0].RunID != first || rows2[0].Sequence != 3 {
		t.Errorf("after marking 1..2, first unpublished = %s/%d, want %s/3", rows2[0].RunID, rows2[0].Sequence, first)
	}
	checkMarkPublishedUpTo(t, s, rows2[len(rows2)-1].RunID) // the run with 3 unpublished rows
	checkRequeue(t, s, first)
}

// checkMarkPublishedUpTo marks the 3 unpublished rows of run other up to
// sequence 2, twice (the second marks none), then the third, leaving
// testOutbox's 4 rows of the first run; for stores that can.
func checkMarkPublishedUpTo(t *testing.T, s agent.Store, other string) {
	um, ok := s.(interface {
		MarkPublishedUpTo(ctx context.Context, runID string, upTo int64) (int, error)
	})
	if !ok {
		return
	}
	if n, err := um.MarkPublishedUpTo(ctx(t), other, 2); err != nil || n != 2 {
		t.Errorf("MarkPublishedUpTo(2) = %d, %v; want 2", n, err)
	}
	if n, err := um.MarkPublishedUpTo(ctx(t), other, 2); err != nil || n != 0 {
		t.Errorf("MarkPublishedUpTo(2) again = %d, %v; want 0", n, err)
	}
	if err := s.MarkPublished(ctx(t), other, 3); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.Unpublished(ctx(t), 100); len(left) != 4 {
		t.Errorf("after marking the other run: %d unpublished, want 4", len(left))
	}
}

// checkRequeue requeues run first's 2 published rows from sequence 1, then
// again (none: a row is unique while unpublished); for stores that can.
func checkRequeue(t *testing.T, s agent.Store, first string) {
	rq, ok := s.(interface {
		Requeue(ctx context.Context, runID string, fromSequence int64) (int, error)
	})
	if !ok {
		return
	}
	before, _ := s.Unpublished(ctx(t), 100)
	n, err := rq.Requeue(ctx(t), first, 1)
	if err != nil || n != 2 {
		t.Fatalf("Requeue(from 1) = %d, %v; want 2 (only published rows)", n, err)
	}
	if n, err := rq.Requeue(ctx(t), first, 1); err != nil || n != 0 {
		t.Errorf("Requeue again = %d, %v; want 0: rows are unique while unpublished", n, err)
	}
	checkOrdered(t, mustUnpublished(t, s), len(before)+2)
}

// mustUnpublished is Unpublished(100); the test fails on an error.
func mustUnpublished(t *testing.T, s agent.Store) []agent.OutboxRow {
	t.Helper()
	rows, err := s.Unpublished(ctx(t), 100)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// checkOrdered: n rows, ordered by (run, sequence), no (run, sequence) twice.
func checkOrdered(t *testing.T, rows []agent.OutboxRow, n int) {
	t.Helper()
	if len(rows) != n {
		t.Errorf("Unpublished = %d rows, want %d", len(rows), n)
	}
	for i := 1; i < len(rows); i++ {
		p, c := rows[i-1], rows[i]
		if c.RunID < p.RunID || c.RunID == p.RunID && c.Sequence <= p.Sequence {
			t.Errorf("Unpublished not ordered by (run, sequence) or duplicated at %d: %s/%d after %s/%d", i, c.RunID, c.Sequence, p.RunID, p.Sequence)
		}
	}
}

var nonTerminal = []agent.RunStatus{agent.RunPending, agent.RunRunning, agent.RunPaused, agent.RunCancelRequested}

func testConcurrentTerminalCAS(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	if err := s.SetStatus(ctx(t), r.RunID, []agent.RunStatus{agent.RunPending}, agent.RunRunning); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStatus(ctx(t), r.RunID, []agent.RunStatus{agent.RunPending}, agent.RunRunning); !errors.Is(err, agent.ErrStatusConflict) {
		t.Errorf("SetStatus(PENDING->RUNNING) on a RUNNING run = %v, want ErrStatusConflict", err)
	}
	if err := s.SetStatus(ctx(t), ulid.Make().String(), nonTerminal, agent.RunFailed); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("SetStatus(unknown run) = %v, want ErrNotFound", err)
	}
	const n = 16
	terminals := []agent.RunStatus{agent.RunFinished, agent.RunFailed, agent.RunCanceled}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.SetStatus(context.Background(), r.RunID, nonTerminal, terminals[i%3])
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("goroutines %d and %d both won the terminal CAS", winner, i)
			}
			winner = i
		case !errors.Is(err, agent.ErrStatusConflict):
			t.Errorf("losing SetStatus = %v, want ErrStatusConflict", err)
		}
	}
	if winner < 0 {
		t.Fatal("no goroutine won the terminal CAS")
	}
	if got, _ := s.GetRun(ctx(t), agent.Admin(), r.RunID); got.Status != terminals[winner%3] {
		t.Errorf("status = %s, want the winner's %s", got.Status, terminals[winner%3])
	}
}

func testConcurrentTerminalCommit(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	mustCommit(t, s, agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 1, agent.KindRunStarted, `{}`)},
		StatusFrom: []agent.RunStatus{agent.RunPending}, StatusTo: agent.RunRunning})
	const n = 12
	kinds := map[agent.RunStatus]string{agent.RunFinished: agent.KindRunFinished, agent.RunFailed: agent.KindRunFailed, agent.RunCanceled: agent.KindRunCanceled}
	terminals := []agent.RunStatus{agent.RunFinished, agent.RunFailed, agent.RunCanceled}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		to := terminals[i%3]
		// Half of them race with a sequence that is free, half with a CAS that
		// must fail once anyone won: either way exactly one terminal event.
		st := agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 2, kinds[to], `{}`)}, StatusFrom: nonTerminal, StatusTo: to}
		go func() {
			defer wg.Done()
			errs[i] = s.CommitStep(context.Background(), st)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, agent.ErrStatusConflict) && !errors.Is(err, agent.ErrSequenceTaken):
			t.Errorf("losing terminal CommitStep = %v, want ErrStatusConflict or ErrSequenceTaken", err)
		}
	}
	status, events, outbox, _ := state(t, s, r.RunID)
	if wins != 1 || len(events) != 2 || len(outbox) != 2 {
		t.Fatalf("%d winners, %d events, %d outbox rows; want 1, 2, 2", wins, len(events), len(outbox))
	}
	if kinds[status] != events[1].Kind {
		t.Errorf("status %s but terminal event %s", status, events[1].Kind)
	}
}

func testSnapshots(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	if _, err := s.LatestSnapshot(ctx(t), agent.Admin(), r.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("LatestSnapshot(none) = %v, want ErrNotFound", err)
	}
	nodes := []string{"EnsureDevice", "ProvisionApp", "LaunchOrAttach", "WaitIdle"}
	var steps []agent.Step
	for i, node := range nodes {
		st := NodeStep(r, int64(1+3*i), i, node)
		mustCommit(t, s, st)
		steps = append(steps, st)
	}
	for i, st := range steps {
		sn, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, i)
		if err != nil {
			t.Fatalf("Snapshot(%d): %v", i, err)
		}
		if sn.StepOrdinal != i || sn.NodeName != nodes[i] || sn.ResumeToken != st.Snapshot.ResumeToken {
			t.Errorf("Snapshot(%d) = %+v", i, sn)
		}
		sameJSON(t, "state", sn.State, st.Snapshot.State)
	}
	latest, err := s.LatestSnapshot(ctx(t), agent.Admin(), r.RunID)
	if err != nil || latest.StepOrdinal != 3 || latest.NodeName != "WaitIdle" {
		t.Errorf("LatestSnapshot = %+v, %v; want step 3 WaitIdle", latest, err)
	}
	if _, err := s.Snapshot(ctx(t), agent.Admin(), r.RunID, 4); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Snapshot(4) = %v, want ErrNotFound", err)
	}
	checkStepEvents(t, s, r.RunID)
}

// checkStepEvents: step 2 of testSnapshots' run holds the events of
// sequences 7..9, and step 9 none; for stores that can tell a step's events.
func checkStepEvents(t *testing.T, s agent.Store, runID string) {
	se, ok := s.(interface {
		StepEvents(ctx context.Context, runID string, stepOrdinal int) ([]agent.Event, error)
	})
	if !ok {
		return
	}
	evs, err := se.StepEvents(ctx(t), runID, 2)
	if err != nil || len(evs) != 3 || evs[0].Sequence != 7 || evs[2].Sequence != 9 {
		t.Errorf("StepEvents(2) = %d events (%v), want sequences 7..9", len(evs), err)
	}
	if _, err := se.StepEvents(ctx(t), runID, 9); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("StepEvents(9) = %v, want ErrNotFound", err)
	}
}

// controlStep is a step of one event that takes the control requests ids.
func controlStep(r agent.Run, seq int64, ids ...string) agent.Step {
	return agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, seq, agent.KindNodeStarted, `{"nodeName":"EnsureDevice"}`)}, Controls: ids}
}

func controlIDs(cs []agent.Control) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func mustPending(t *testing.T, s agent.Store, runID string, want ...string) {
	t.Helper()
	got, err := s.PendingControl(ctx(t), runID)
	if err != nil || !slices.Equal(controlIDs(got), want) {
		t.Fatalf("PendingControl = %v, %v; want %v", controlIDs(got), err, want)
	}
}

func testControl(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	other := mustCreate(t, s, NewRun("T", "emulator-5556"))
	mustPending(t, s, r.RunID)
	ids := checkControlRequests(t, s, r, other)
	checkControlBacklog(t, s)

	// The step that honors requests takes them in its transaction.
	if err := s.CommitStep(ctx(t), controlStep(r, 1, ids[0], ids[1])); err != nil {
		t.Fatal(err)
	}
	mustPending(t, s, r.RunID, ids[2])
	// Taking one again, or another run's, fails and writes nothing.
	for _, st := range []agent.Step{controlStep(r, 2, ids[2], ids[0]), controlStep(r, 2, ids[2], ulid.Make().String())} {
		if err := s.CommitStep(ctx(t), st); !errors.Is(err, agent.ErrControlTaken) {
			t.Errorf("CommitStep taking a request that is not pending = %v, want ErrControlTaken", err)
		}
	}
	o, _ := s.PendingControl(ctx(t), other.RunID)
	if err := s.CommitStep(ctx(t), controlStep(r, 2, controlIDs(o)...)); !errors.Is(err, agent.ErrControlTaken) {
		t.Errorf("CommitStep taking another run's request = %v, want ErrControlTaken", err)
	}
	if last, _ := s.LastSequence(ctx(t), r.RunID); last != 1 {
		t.Errorf("LastSequence = %d after refused steps, want 1", last)
	}
	mustPending(t, s, r.RunID, ids[2])
	mustPending(t, s, other.RunID, controlIDs(o)...)
	checkControlCancel(t, s, r, ids[2])
}

// checkControlRequests records a pause, a policy switch and a resume of r
// (and a pause of other), checks the refusals (an unknown kind, a caller's
// id, an unknown run) and that reading them takes nothing. It returns the
// three ids, ULIDs in order.
func checkControlRequests(t *testing.T, s agent.Store, r, other agent.Run) []string {
	at := time.Date(2025, 10, 23, 12, 0, 0, 0, time.UTC)
	reqs := []agent.Control{
		{RunID: r.RunID, Kind: agent.KindPauseRequested, RequestedAt: at},
		{RunID: r.RunID, Kind: agent.KindPolicySwitchRequested, PolicyVersion: 3, RequestedAt: at.Add(time.Millisecond)},
		{RunID: r.RunID, Kind: agent.KindResumeRequested, RequestedAt: at.Add(2 * time.Millisecond)},
	}
	var ids []string
	for i, c := range reqs {
		got, err := s.RequestControl(ctx(t), c)
		if err != nil {
			t.Fatalf("RequestControl(%s): %v", c.Kind, err)
		}
		if _, err := ulid.ParseStrict(got.ID); err != nil || (i > 0 && got.ID <= ids[i-1]) {
			t.Fatalf("RequestControl id %q (%v): want a ULID after %v", got.ID, err, ids)
		}
		ids = append(ids, got.ID)
	}
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: other.RunID, Kind: agent.KindPauseRequested}); err != nil {
		t.Fatal(err)
	}
	checkControlRefusals(t, s, r)
	checkPendingAsRequested(t, s, reqs, ids)
	return ids
}

// checkControlRefusals: RequestControl refuses an unknown kind, an id set
// by the caller and an unknown run (ErrNotFound).
func checkControlRefusals(t *testing.T, s agent.Store, r agent.Run) {
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: r.RunID, Kind: "agent.run.explode"}); err == nil {
		t.Errorf("RequestControl(unknown kind) = nil, want an error")
	}
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: r.RunID, Kind: agent.KindPauseRequested, ID: ulid.Make().String()}); err == nil {
		t.Errorf("RequestControl(caller's id) = nil, want an error: ids are the store's")
	}
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: ulid.Make().String(), Kind: agent.KindCancelRequested}); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("RequestControl(unknown run) = %v, want ErrNotFound", err)
	}
}

// checkPendingAsRequested: the run's pending requests are reqs as
// recorded (ids), and reading them takes nothing.
func checkPendingAsRequested(t *testing.T, s agent.Store, reqs []agent.Control, ids []string) {
	runID := reqs[0].RunID
	got, err := s.PendingControl(ctx(t), runID)
	if err != nil || len(got) != len(reqs) {
		t.Fatalf("PendingControl = %v, %v; want %d requests", got, err, len(reqs))
	}
	for i := range reqs {
		if got[i].ID != ids[i] || got[i].RunID != reqs[i].RunID || got[i].Kind != reqs[i].Kind || got[i].PolicyVersion != reqs[i].PolicyVersion || !got[i].RequestedAt.Equal(reqs[i].RequestedAt) {
			t.Errorf("PendingControl[%d] = %+v, want %+v", i, got[i], reqs[i])
		}
	}
	mustPending(t, s, runID, ids...)
}

// checkControlBacklog: a run's pending requests are bounded by
// agent.MaxPendingControl (ErrControlBacklog beyond).
func checkControlBacklog(t *testing.T, s agent.Store) {
	b := mustCreate(t, s, NewRun("T", "emulator-5558"))
	for range agent.MaxPendingControl {
		if _, err := s.RequestControl(ctx(t), agent.Control{RunID: b.RunID, Kind: agent.KindResumeRequested}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RequestControl(ctx(t), agent.Control{RunID: b.RunID, Kind: agent.KindResumeRequested}); !errors.Is(err, agent.ErrControlBacklog) {
		t.Errorf("request %d = %v, want ErrControlBacklog", agent.MaxPendingControl+1, err)
	}
}

// checkControlCancel cancels r, whose request pending is still pending: the
// status moves with the request, a terminal commit must take every pending
// request, and an ended run refuses requests and records nothing.
func checkControlCancel(t *testing.T, s agent.Store, r agent.Run, pending string) {
	// A cancel moves the status in the same transaction as it is recorded.
	cancel, err := s.RequestControl(ctx(t), agent.Control{RunID: r.RunID, Kind: agent.KindCancelRequested})
	if err != nil {
		t.Fatal(err)
	}
	if run, _ := s.GetRun(ctx(t), agent.Admin(), r.RunID); run.Status != agent.RunCancelRequested {
		t.Errorf("status after a cancel request = %s, want CANCELED_REQUESTED", run.Status)
	}
	// A terminal commit must take every pending request.
	end := agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 2, agent.KindRunCanceled, `{"status":"CANCELED"}`)},
		StatusFrom: []agent.RunStatus{agent.RunCancelRequested}, StatusTo: agent.RunCanceled, Controls: []string{pending}, NoOtherControl: true}
	if err := s.CommitStep(ctx(t), end); !errors.Is(err, agent.ErrControlPending) {
		t.Fatalf("terminal CommitStep leaving a request pending = %v, want ErrControlPending", err)
	}
	if run, _ := s.GetRun(ctx(t), agent.Admin(), r.RunID); run.Status != agent.RunCancelRequested {
		t.Errorf("status after a refused terminal commit = %s", run.Status)
	}
	mustPending(t, s, r.RunID, pending, cancel.ID)
	end.Controls = append(end.Controls, cancel.ID)
	if err := s.CommitStep(ctx(t), end); err != nil {
		t.Fatal(err)
	}
	mustPending(t, s, r.RunID)
	// After the run ended a request is refused and nothing recorded.
	for _, k := range []string{agent.KindPauseRequested, agent.KindCancelRequested} {
		if _, err := s.RequestControl(ctx(t), agent.Control{RunID: r.RunID, Kind: k}); !errors.Is(err, agent.ErrRunTerminal) {
			t.Errorf("RequestControl(%s) of an ended run = %v, want ErrRunTerminal", k, err)
		}
	}
	mustPending(t, s, r.RunID)
	if run, _ := s.GetRun(ctx(t), agent.Admin(), r.RunID); run.Status != agent.RunCanceled {
		t.Errorf("status = %s, want CANCELED", run.Status)
	}
}

// testControlExactlyOnce races requests against an engine that takes them
// and ends the run: every request is either taken by exactly one commit or
// refused with ErrRunTerminal, and none is left pending.
func testControlExactlyOnce(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("T", "emulator-5554"))
	// Each sender sends until a request is refused (or at most each).
	const senders, each = 6, 100
	var wg sync.WaitGroup
	tally := controlTally{accepted: map[string]bool{}}
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tally.send(t, s, r.RunID, each)
		}()
	}
	taken := takeControlsThenEnd(t, s, r)
	wg.Wait()
	for id := range tally.accepted {
		if taken[id] != 1 {
			t.Errorf("request %s accepted and taken %d times, want once", id, taken[id])
		}
	}
	for id := range taken {
		if !tally.accepted[id] {
			t.Errorf("request %s taken but never accepted", id)
		}
	}
	if len(tally.accepted)+tally.refused+tally.backlog != tally.sent {
		t.Errorf("%d accepted + %d refused + %d backlog, want %d", len(tally.accepted), tally.refused, tally.backlog, tally.sent)
	}
	mustPending(t, s, r.RunID)
	t.Logf("%d requests accepted and taken once, %d refused after the end, %d refused as backlog", len(tally.accepted), tally.refused, tally.backlog)
	checkConcurrentTake(t, s)
}

// controlTally counts the pause requests of testControlExactlyOnce's
// senders by outcome.
type controlTally struct {
	mu       sync.Mutex
	accepted map[string]bool // by id
	refused  int             // ErrRunTerminal
	backlog  int             // ErrControlBacklog
	sent     int
}

// send sends up to each pause requests for runID, until one is refused
// because the run ended.
func (c *controlTally) send(t *testing.T, s agent.Store, runID string, each int) {
	for range each {
		ctl, err := s.RequestControl(context.Background(), agent.Control{RunID: runID, Kind: agent.KindPauseRequested})
		c.mu.Lock()
		c.sent++
		switch {
		case err == nil:
			c.accepted[ctl.ID] = true
		case errors.Is(err, agent.ErrRunTerminal):
			c.refused++
		case errors.Is(err, agent.ErrControlBacklog):
			c.backlog++
		default:
			t.Error(err)
		}
		c.mu.Unlock()
		if errors.Is(err, agent.ErrRunTerminal) {
			return
		}
	}
}

// takeControlsThenEnd is the engine: it takes what is pending step by
// step; after a few steps it ends the run, retrying while a request it has
// not seen is pending. It returns how often each request was taken.
func takeControlsThenEnd(t *testing.T, s agent.Store, r agent.Run) map[string]int {
	taken := map[string]int{}
	seq := int64(1)
	for step := 0; ; step++ {
		pending, err := s.PendingControl(ctx(t), r.RunID)
		if err != nil {
			t.Fatal(err)
		}
		st := controlStep(r, seq, controlIDs(pending)...)
		if step >= 5 {
			st.Events = []agent.Event{Event(r, seq, agent.KindRunFinished, `{"status":"FINISHED"}`)}
			st.StatusFrom, st.StatusTo, st.NoOtherControl = []agent.RunStatus{agent.RunPending}, agent.RunFinished, true
		}
		err = s.CommitStep(ctx(t), st)
		if errors.Is(err, agent.ErrControlPending) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range st.Controls {
			taken[id]++
		}
		seq++
		if st.StatusTo != "" {
			return taken
		}
	}
}

// checkConcurrentTake: of concurrent commits that take the same requests,
// one wins and the others get ErrControlTaken.
func checkConcurrentTake(t *testing.T, s agent.Store) {
	r2 := mustCreate(t, s, NewRun("T", "emulator-5556"))
	var ids []string
	for range 5 {
		c, err := s.RequestControl(ctx(t), agent.Control{RunID: r2.RunID, Kind: agent.KindResumeRequested})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Steps without events: only the requests can conflict.
			errs[i] = s.CommitStep(context.Background(), agent.Step{RunID: r2.RunID, Controls: ids})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, agent.ErrControlTaken):
			t.Errorf("losing CommitStep = %v, want ErrControlTaken", err)
		}
	}
	if won != 1 {
		t.Errorf("%d of 4 concurrent steps took the same requests, want 1", won)
	}
	mustPending(t, s, r2.RunID)
}

func testKV(t *testing.T, s agent.Store) {
	if _, err := s.GetKV(ctx(t), "appium.session/emulator-5554"); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("GetKV(missing) = %v, want ErrNotFound", err)
	}
	vals := [][]byte{[]byte(`{"sessionId":"a1b2"}`), {0, 1, 2, 0xff, 0xfe}, {}}
	for _, v := range vals {
		if err := s.PutKV(ctx(t), "appium.session/emulator-5554", v); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetKV(ctx(t), "appium.session/emulator-5554")
		if err != nil || string(got) != string(v) {
			t.Errorf("GetKV = %q, %v; want %q", got, err, v)
		}
	}
	if err := s.PutKV(ctx(t), "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetKV(ctx(t), "appium.session/emulator-5554"); len(got) != 0 {
		t.Errorf("another key's Put changed this one: %q", got)
	}
}

func testEventsAfter(t *testing.T, s agent.Store) {
	a := mustCreate(t, s, NewRun("T", "emulator-5554"))
	b := mustCreate(t, s, NewRun("T", "emulator-5556"))
	mustCommit(t, s, NodeStep(a, 1, 0, "EnsureDevice"))
	mustCommit(t, s, NodeStep(b, 1, 0, "EnsureDevice"))
	mustCommit(t, s, NodeStep(a, 4, 1, "ProvisionApp"))
	for _, tc := range []struct {
		after int64
		want  []int64
	}{{0, []int64{1, 2, 3, 4, 5, 6}}, {2, []int64{3, 4, 5, 6}}, {5, []int64{6}}, {6, nil}, {100, nil}} {
		evs, err := s.Events(ctx(t), agent.Admin(), a.RunID, tc.after)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, e := range evs {
			if e.RunID != a.RunID {
				t.Errorf("Events(a) returned an event of run %s", e.RunID)
			}
			seqs = append(seqs, e.Sequence)
		}
		if !slices.Equal(seqs, tc.want) {
			t.Errorf("Events(after %d) = %v, want %v", tc.after, seqs, tc.want)
		}
	}
	if last, _ := s.LastSequence(ctx(t), b.RunID); last != 3 {
		t.Errorf("LastSequence(b) = %d, want 3", last)
	}
	if last, err := s.LastSequence(ctx(t), ulid.Make().String()); err != nil || last != 0 {
		t.Errorf("LastSequence(no events) = %d, %v; want 0", last, err)
	}
}

// A step that takes a policy switch (Step.PolicyVersion) sets the run row's
// policy_version in its transaction, so run lists agree with the run's
// detail; a step without one leaves it.
func testCommitStepPolicyVersion(t *testing.T, s agent.Store) {
	r := mustCreate(t, s, NewRun("01HZX0TENANT1234567890", "emulator-5554"))
	mustCommit(t, s, agent.Step{RunID: r.RunID, Events: []agent.Event{Event(r, 1, agent.KindRunStarted, `{"graph":"setup"}`)},
		StatusFrom: []agent.RunStatus{agent.RunPending}, StatusTo: agent.RunRunning})
	step := NodeStep(r, 2, 0, "EnsureDevice")
	mustCommit(t, s, step)
	if got, err := s.GetRun(ctx(t), agent.Admin(), r.RunID); err != nil || got.PolicyVersion != r.PolicyVersion {
		t.Fatalf("policy version %d (%v) after a step without a switch, want %d", got.PolicyVersion, err, r.PolicyVersion)
	}
	step = NodeStep(r, 5, 1, "ProvisionApp")
	step.PolicyVersion = r.PolicyVersion + 1
	mustCommit(t, s, step)
	got, err := s.GetRun(ctx(t), agent.Admin(), r.RunID)
	if err != nil || got.PolicyVersion != r.PolicyVersion+1 {
		t.Fatalf("policy version %d (%v) after the switch's step, want %d", got.PolicyVersion, err, r.PolicyVersion+1)
	}
	runs, err := s.ListRuns(ctx(t), agent.Admin(), agent.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range runs {
		if l.RunID == r.RunID && l.PolicyVersion != r.PolicyVersion+1 {
			t.Errorf("ListRuns shows policy version %d, want %d", l.PolicyVersion, r.PolicyVersion+1)
		}
	}
}
