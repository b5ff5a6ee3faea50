package snapshots_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/internal/testenv"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

func TestInspectAndReplay(t *testing.T) {
	ctx := t.Context()
	s := testenv.Embedded(t)
	r := storetest.NewRun("T", "emulator-5554")
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	// run.started has no snapshot: it belongs to no step.
	if err := s.CommitStep(ctx, agent.Step{RunID: r.RunID, Events: []agent.Event{storetest.Event(r, 1, agent.KindRunStarted, `{}`)},
		StatusFrom: []agent.RunStatus{agent.RunPending}, StatusTo: agent.RunRunning}); err != nil {
		t.Fatal(err)
	}
	steps := []agent.Step{storetest.NodeStep(r, 2, 0, "EnsureDevice"), storetest.NodeStep(r, 5, 1, "ProvisionApp")}
	for _, st := range steps {
		if err := s.CommitStep(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	sn, evs, err := snapshots.Replay(ctx, s, r.RunID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if sn.NodeName != "ProvisionApp" || len(evs) != 3 || evs[0].EventID != steps[1].Events[0].EventID || evs[2].Sequence != 7 {
		t.Errorf("Replay(1) = %+v, %d events", sn, len(evs))
	}
	v, err := snapshots.InspectStep(ctx, s, r.RunID, -1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Snapshot.StepOrdinal != 1 || v.LastSequence != 7 || v.Run.Status != agent.RunRunning {
		t.Errorf("InspectStep(latest) = %+v", v)
	}
	v0, err := snapshots.InspectStep(ctx, s, r.RunID, 0)
	if err != nil || len(v0.Events) != 3 || v0.Events[0].Sequence != 2 {
		t.Errorf("InspectStep(0) = %+v, %v", v0, err)
	}
	var buf bytes.Buffer
	if err := snapshots.WriteStepView(&buf, v0); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"step 0  node EnsureDevice", "agent.node.started", "agent.node.finished", steps[0].Events[1].EventID, `"next":"after-EnsureDevice"`} {
		if !strings.Contains(out, want) {
			t.Errorf("step view lacks %q:\n%s", want, out)
		}
	}
	if _, err := snapshots.InspectStep(ctx, s, r.RunID, 5); !errors.Is(err, agent.ErrNotFound) ||
		!strings.Contains(err.Error(), "run "+r.RunID+" has no step 5 (steps 0..1)") {
		t.Errorf("InspectStep(5) = %v, want ErrNotFound naming step 5", err)
	}
	all, err := snapshots.RunEvents(ctx, s, r.RunID, 0)
	if err != nil || len(all) != 7 {
		t.Errorf("RunEvents = %d, %v", len(all), err)
	}
	if _, err := snapshots.RunEvents(ctx, s, ulid.Make().String(), 0); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("RunEvents(unknown) = %v", err)
	}
	buf.Reset()
	snapshots.WriteEvents(&buf, all)
	if lines := strings.Count(buf.String(), "\n"); lines != 8 {
		t.Errorf("events table has %d lines, want header + 7:\n%s", lines, buf.String())
	}
}

// A token_delta's text is printed whole in the events table (issue 16: it
// was cut at 80 bytes).
func TestWriteEventsWholePayload(t *testing.T) {
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 5) + "END"
	payload := `{"node":"Agent","text":"` + text + `"}`
	var buf bytes.Buffer
	if err := snapshots.WriteEvents(&buf, []agent.Event{{Sequence: 3, Kind: "agent.token_delta", EventID: ulid.Make().String(), Payload: []byte(payload)}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), payload) {
		t.Errorf("events table cuts the payload (%d bytes):\n%s", len(payload), buf.String())
	}
}
