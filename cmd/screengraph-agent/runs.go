package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// storeFlags locate the embedded store.
type storeFlags struct {
	DataDir string `help:"Data directory of the embedded store (default: ~/.local/share/screengraph-agent)." name:"data-dir" type:"path"`
}

func (f storeFlags) dir() (string, error) {
	if f.DataDir != "" {
		return f.DataDir, nil
	}
	return snapshots.DataDir()
}

func (f storeFlags) open(ctx context.Context) (*snapshots.Embedded, error) {
	dir, err := f.dir()
	if err != nil {
		return nil, err
	}
	return snapshots.OpenEmbedded(ctx, filepath.Join(dir, "agent.db"), snapshots.EmbeddedOptions{})
}

type runsCmd struct {
	List    runsListCmd    `cmd:"" help:"List runs, newest first."`
	Show    runsShowCmd    `cmd:"" help:"Show one run: status, latest step, and the error report when it failed."`
	Events  runsEventsCmd  `cmd:"" help:"A run's events in sequence order."`
	Inspect runsInspectCmd `cmd:"" help:"Step N of a run: its snapshot and the events committed with it."`
}

type outputFlag struct {
	Output string `help:"Output format: text or json." default:"text" enum:"text,json"`
}

// printJSON prints v as indented JSON with its secrets redacted
// (agent.RedactJSON: URL userinfo, signed-URL query parameters, secret-named
// keys). Every `--output json` goes through it; the store keeps the run
// input as submitted (resume needs it), the CLI never shows its credentials.
func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, agent.RedactJSON(b), "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = os.Stdout.Write(buf.Bytes())
	return err
}

// redactEvents returns copies of evs whose payloads are redacted, for the
// text output (events written before redaction existed may hold secrets).
func redactEvents(evs []agent.Event) []agent.Event {
	out := make([]agent.Event, len(evs))
	for i, e := range evs {
		e.Payload = agent.RedactJSON(e.Payload)
		out[i] = e
	}
	return out
}

type runsListCmd struct {
	storeFlags
	outputFlag
	Limit  int    `help:"At most this many runs." default:"20"`
	Serial string `help:"Only runs on this device serial."`
}

func (c *runsListCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	runs, err := st.ListRuns(ctx, agent.RunFilter{Limit: c.Limit, Serial: c.Serial})
	if err != nil {
		return err
	}
	if c.Output == "json" {
		if runs == nil {
			runs = []agent.Run{}
		}
		return printJSON(map[string]any{"runs": runs})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN ID\tSTATUS\tSERIAL\tGRAPH\tCREATED\tTOOK")
	for _, r := range runs {
		took := "-"
		if r.Status.Terminal() {
			took = r.UpdatedAt.Sub(r.CreatedAt).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Status, r.Serial, r.Graph, r.CreatedAt.UTC().Format(time.RFC3339), took)
	}
	return w.Flush()
}

type runsShowCmd struct {
	storeFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *runsShowCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := st.GetRun(ctx, c.RunID)
	if err != nil {
		return fmt.Errorf("run %s: %w", c.RunID, err)
	}
	var state *agent.RunState
	if sn, err := st.LatestSnapshot(ctx, c.RunID); err == nil {
		if rs, err := agent.DecodeRunState(sn); err == nil {
			state = &rs
		}
	}
	last, _ := st.LastSequence(ctx, c.RunID)
	if c.Output == "json" {
		return printJSON(map[string]any{"run": r, "state": state, "lastSequence": last})
	}
	fmt.Printf("run %s\nstatus %s\nserial %s\ngraph %s\ntenant %s\npolicy v%d\ncreated %s\nupdated %s\nevents %d\n",
		r.RunID, r.Status, r.Serial, r.Graph, r.TenantID, r.PolicyVersion,
		r.CreatedAt.UTC().Format(time.RFC3339Nano), r.UpdatedAt.UTC().Format(time.RFC3339Nano), last)
	if state != nil {
		for _, n := range state.Completed {
			fmt.Printf("completed %s (step %d)\n", n.Node, n.StepOrdinal)
		}
	}
	return nil
}

type runsEventsCmd struct {
	storeFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
	After int64  `help:"Only events with a sequence above this." default:"0"`
}

func (c *runsEventsCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	evs, err := snapshots.RunEvents(ctx, st, c.RunID, c.After)
	if err != nil {
		return fmt.Errorf("run %s: %w", c.RunID, err)
	}
	if c.Output == "json" {
		if evs == nil {
			evs = []agent.Event{}
		}
		return printJSON(map[string]any{"events": evs})
	}
	return snapshots.WriteEvents(os.Stdout, redactEvents(evs))
}

type runsInspectCmd struct {
	storeFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
	Step  int    `help:"Step ordinal (0-based); -1 means the latest." default:"-1"`
}

func (c *runsInspectCmd) Run(ctx context.Context) error {
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := snapshots.InspectStep(ctx, st, c.RunID, c.Step)
	if err != nil {
		return fmt.Errorf("run %s step %d: %w", c.RunID, c.Step, err)
	}
	if c.Output == "json" {
		return printJSON(v)
	}
	v.Snapshot.State = agent.RedactJSON(v.Snapshot.State)
	v.Events = redactEvents(v.Events)
	return snapshots.WriteStepView(os.Stdout, v)
}
