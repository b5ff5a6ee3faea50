package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"os"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/agent/retention"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// storeFlags locate the embedded store.
type storeFlags struct {
	DataDir string `help:"Data directory of the embedded store (default: ~/.local/share/screengraph-agent)." name:"data-dir" type:"path"`
}

func (f storeFlags) dir() (string, error) {
	if f.DataDir != "" {
		return f.DataDir, nil
	}
	return sqlite.DataDir()
}

// open opens the data dir's embedded store for reading
// (agentd.OpenExistingStore: a data dir with no agent.db is refused).
func (f storeFlags) open(ctx context.Context) (*sqlite.Store, error) {
	dir, err := f.dir()
	if err != nil {
		return nil, err
	}
	hint := "pass --data-dir DIR of a daemon's data, or --server URL of a running daemon"
	if f.DataDir == "" {
		hint = "no daemon answers at " + defaultServer + " either: start `screengraph-agent serve`, or " + hint
	}
	return agentd.OpenExistingStore(ctx, dir, hint)
}

type runsCmd struct {
	List    runsListCmd    `cmd:"" help:"List runs, newest first."`
	Show    runsShowCmd    `cmd:"" help:"Show one run: status, latest step, and the error report when it failed."`
	Events  runsEventsCmd  `cmd:"" help:"A run's events in sequence order."`
	Inspect runsInspectCmd `cmd:"" help:"Step N of a run: its snapshot and the events committed with it."`
	// Artifacts: evidence through the daemon's API (runs_artifacts.go).
	Artifacts runsArtifactsCmd `cmd:"" help:"A run's evidence artifacts (screenshot, UI hierarchy, logcat, ANR traces) from the daemon; --download DIR saves them."`
	Submit    runsSubmitCmd    `cmd:"" help:"Submit a setup run to the daemon from flags (--device, --package, --apk, ...) or -f run.json; print its id, or with --follow its progress until it ends (exit 0 only when FINISHED)."`
	Resume    runsResumeCmd    `cmd:"" help:"Resume an unfinished run from its last snapshot, without a daemon."`
	Prune     runsPruneCmd     `cmd:"" help:"Delete ended runs older than --older-than with their events, outbox rows, snapshots, control rows and lease history; runs with unpublished outbox rows are kept and listed. Opens the store itself: works with or without a daemon."`
}

type outputFlag struct {
	Output string `help:"Output format: text or json." default:"text" enum:"text,json"`
}

// The runs commands read through the daemon's HTTP API, each written once
// against the client (runsClient): the daemon of --server (or
// SCREENGRAPH_SERVER), or the default one when no --data-dir is given and it
// answers; otherwise the API served in this process over the data dir's
// embedded store.

type runsListCmd struct {
	storeFlags
	serverFlags
	outputFlag
	Limit  int    `help:"At most this many runs (through a daemon: 1 to 1000)." default:"20"`
	Cursor string `help:"Continue after a previous page: the cursor it printed (nextCursor)."`
	Serial string `help:"Only runs on this device serial."`
	Status string `help:"Only runs with these statuses (comma-separated: PENDING,RUNNING,PAUSED,CANCELED_REQUESTED,CANCELED,FINISHED,FAILED)."`
}

func (c *runsListCmd) Run(ctx context.Context) error {
	return c.withRuns(ctx, c.storeFlags, func(cl *client.Client) error {
		page, err := cl.ListRuns(ctx, client.ListOptions{Limit: c.Limit, Serial: c.Serial, Status: c.Status, Cursor: c.Cursor})
		if err != nil {
			return c.failHTTP("runs list", err)
		}
		if c.Output == "json" {
			return render.PrintJSON(page)
		}
		runs := make([]agent.Run, 0, len(page.Runs))
		for _, s := range page.Runs {
			runs = append(runs, client.SummaryRun(s))
		}
		if err := render.WriteRuns(runs); err != nil {
			return err
		}
		render.PrintNextPage(page.NextCursor)
		return nil
	})
}

type runsShowCmd struct {
	storeFlags
	serverFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *runsShowCmd) Run(ctx context.Context) error {
	return c.withRuns(ctx, c.storeFlags, func(cl *client.Client) error {
		d, snap, snapErr, err := latestStep(ctx, cl, c.RunID)
		if err != nil {
			return c.failHTTP("runs show", err)
		}
		return render.PrintRunDetail(c.Output, d, snap, snapErr)
	})
}

// latestStep reads a run's detail and the snapshot of its latest step
// (snapErr agent.ErrNotFound when it has none); err is the run's.
func latestStep(ctx context.Context, cl *client.Client, runID string) (d httpapi.RunDetail, snap agent.Snapshot, snapErr, err error) {
	if d, err = cl.Run(ctx, runID); err != nil {
		return d, snap, nil, err
	}
	// Each step commits one agent.node.finished: the latest step is Steps-1.
	snapErr = agent.ErrNotFound
	if d.Steps > 0 {
		snap, snapErr = cl.Step(ctx, runID, d.Steps-1)
	}
	return d, snap, snapErr, nil
}

type runsEventsCmd struct {
	storeFlags
	serverFlags
	RunID  string `arg:"" help:"The run's ULID."`
	After  int64  `help:"Only events with a sequence above this." default:"0"`
	Follow bool   `help:"Print each event as it is committed until the run ends (json: one event a line)." short:"f"`
	outputFlag
}

func (c *runsEventsCmd) Run(ctx context.Context) error {
	return c.withRuns(ctx, c.storeFlags, func(cl *client.Client) error {
		if c.Follow {
			if err := cl.Follow(ctx, c.RunID, c.After, render.EventPrinter(c.Output)); err != nil {
				return c.failHTTP("runs events", err)
			}
			return nil
		}
		evs, err := cl.Events(ctx, c.RunID, c.After)
		if err != nil {
			return c.failHTTP("runs events", err)
		}
		if c.Output == "json" {
			return render.PrintJSON(map[string]any{"events": evs})
		}
		return snapshots.WriteEvents(os.Stdout, render.RedactEvents(evs))
	})
}

type runsInspectCmd struct {
	storeFlags
	serverFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
	Step  int    `help:"Step ordinal (0-based); -1 means the latest." default:"-1"`
}

func (c *runsInspectCmd) Run(ctx context.Context) error {
	return c.withRuns(ctx, c.storeFlags, func(cl *client.Client) error {
		d, err := cl.Run(ctx, c.RunID)
		if err != nil {
			return c.failHTTP("runs inspect", err)
		}
		n := c.Step
		if n < 0 {
			n = d.Steps - 1
		}
		if n < 0 || n >= d.Steps {
			return c.failHTTP("runs inspect", snapshots.NoStep(c.RunID, n, d.Steps))
		}
		v := snapshots.StepView{Run: client.RunRow(d), LastSequence: int64(d.Events)}
		if v.Snapshot, err = cl.Step(ctx, c.RunID, n); err != nil {
			if errors.Is(err, agent.ErrNotFound) {
				err = snapshots.NoStep(c.RunID, n, d.Steps) // the run is known: the step is not
			}
			return c.failHTTP(fmt.Sprintf("runs inspect step %d", n), err)
		}
		// The step's node events (started, token deltas, finished).
		evs, err := cl.Events(ctx, c.RunID, 0)
		if err != nil {
			return c.failHTTP("runs inspect", err)
		}
		v.Events = cli.StepEvents(evs, n)
		if c.Output == "json" {
			return render.PrintJSON(v)
		}
		v.Snapshot.State = agent.RedactJSON(v.Snapshot.State)
		v.Events = render.RedactEvents(v.Events)
		return snapshots.WriteStepView(os.Stdout, v)
	})
}

type runsPruneCmd struct {
	tokenStoreFlags
	outputFlag
	OlderThan time.Duration `help:"Delete runs whose last status change (their end) is older than this, e.g. 720h." name:"older-than" required:""`
	BatchSize int           `help:"Runs deleted per transaction." name:"batch-size" default:"500"`
}

func (c *runsPruneCmd) Run(ctx context.Context) error {
	if c.OlderThan <= 0 {
		return c.fail("runs prune", agent.Errorf(agent.ErrInvalidRequest, "--older-than must be > 0, not %v", c.OlderThan))
	}
	if c.BatchSize <= 0 || c.BatchSize > 5000 {
		return c.fail("runs prune", agent.Errorf(agent.ErrInvalidRequest, "--batch-size must be 1 to 5000, not %d", c.BatchSize))
	}
	st, err := c.open(ctx)
	if err != nil {
		return c.fail("runs prune", err)
	}
	defer st.Close()
	res, err := (&retention.Cleaner{Store: st, Retention: c.OlderThan, BatchSize: c.BatchSize}).Pass(ctx, time.Now())
	if err != nil {
		return c.fail("runs prune", agent.Wrap(agent.ErrProcess, err, "prune (deleted %d runs before the failure)", res.Runs))
	}
	return render.Pruned(c.Output, res, c.OlderThan)
}
