package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// StepView is what `runs inspect RUN_ID --step N` shows: the run, step N's
// snapshot and the events committed with it.
type StepView struct {
	Run          agent.Run      `json:"run"`
	Snapshot     agent.Snapshot `json:"snapshot"`
	Events       []agent.Event  `json:"events"`
	LastSequence int64          `json:"lastSequence"` // the run's, for context
}

// ErrNoStepEvents: the store cannot tell which events belong to a step (it
// does not implement StepEventer).
var ErrNoStepEvents = errors.New("store does not record events per step")

// Replay returns step N's snapshot and the events committed with it, in
// sequence order: what a replay of step N starts from and must reproduce.
// Errors wrap agent.ErrNotFound (no such run or step) or ErrNoStepEvents.
func Replay(ctx context.Context, st agent.Store, runID string, stepOrdinal int) (agent.Snapshot, []agent.Event, error) {
	se, ok := st.(StepEventer)
	if !ok {
		return agent.Snapshot{}, nil, ErrNoStepEvents
	}
	sn, err := st.Snapshot(ctx, agent.Admin(), runID, stepOrdinal)
	if err != nil {
		return sn, nil, err
	}
	evs, err := se.StepEvents(ctx, runID, stepOrdinal)
	return sn, evs, err
}

// NoStep is the not-found error of a known run without step n (of steps
// committed, ordinals 0..steps-1): it names the step, not the run, as
// unknown. n < 0 asks for the latest step of a run with none yet.
func NoStep(runID string, n, steps int) error {
	switch {
	case steps <= 0:
		return fmt.Errorf("run %s has no step yet: %w", runID, agent.ErrNotFound)
	case n < 0:
		n = steps - 1
	}
	return fmt.Errorf("run %s has no step %d (steps 0..%d): %w", runID, n, steps-1, agent.ErrNotFound)
}

// InspectStep builds the StepView of step N; stepOrdinal < 0 means the
// latest step. Read-only. Errors: agent.ErrNotFound for an unknown run, or
// NoStep's for a step the run does not have.
func InspectStep(ctx context.Context, st agent.Store, runID string, stepOrdinal int) (StepView, error) {
	var v StepView
	r, err := st.GetRun(ctx, agent.Admin(), runID)
	if err != nil {
		return v, err
	}
	v.Run = r
	latest, err := st.LatestSnapshot(ctx, agent.Admin(), runID)
	steps := latest.StepOrdinal + 1
	if errors.Is(err, agent.ErrNotFound) {
		steps, err = 0, nil
	}
	if err != nil {
		return v, err
	}
	if stepOrdinal < 0 {
		stepOrdinal = steps - 1
	}
	if stepOrdinal < 0 || stepOrdinal >= steps {
		return v, NoStep(runID, stepOrdinal, steps)
	}
	if v.Snapshot, v.Events, err = Replay(ctx, st, runID, stepOrdinal); err != nil {
		return v, err
	}
	v.LastSequence, err = st.LastSequence(ctx, runID)
	return v, err
}

// RunEvents is `runs events RUN_ID`: the run's events after sequence after,
// in order. Unlike Store.Events it fails with agent.ErrNotFound for an
// unknown run instead of returning nothing.
func RunEvents(ctx context.Context, st agent.Store, runID string, after int64) ([]agent.Event, error) {
	if _, err := st.GetRun(ctx, agent.Admin(), runID); err != nil {
		return nil, err
	}
	return st.Events(ctx, agent.Admin(), runID, after)
}

// WriteEvents writes events as a table: SEQ, TS, KIND, EVENT ID, CHECKSUM
// (first 12 hex digits), PAYLOAD (whole: a token_delta's text is what the
// reader came for, and the payload is compact JSON, so it stays on its line).
func WriteEvents(w io.Writer, evs []agent.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTS\tKIND\tEVENT ID\tCHECKSUM\tPAYLOAD")
	for _, e := range evs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Sequence, e.TS, e.Kind, e.EventID, short(e.Checksum, 12), string(e.Payload))
	}
	return tw.Flush()
}

// WriteStepView writes v as text: the run line, the snapshot, its events.
func WriteStepView(w io.Writer, v StepView) error {
	fmt.Fprintf(w, "run %s  tenant %s  status %s  serial %s  graph %s  policy v%d  last sequence %d\n",
		v.Run.RunID, v.Run.TenantID, v.Run.Status, v.Run.Serial, v.Run.Graph, v.Run.PolicyVersion, v.LastSequence)
	fmt.Fprintf(w, "step %d  node %s  resumeToken %s  at %s\n",
		v.Snapshot.StepOrdinal, v.Snapshot.NodeName, v.Snapshot.ResumeToken, v.Snapshot.CreatedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "state %s\n", v.Snapshot.State)
	return WriteEvents(w, v.Events)
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
