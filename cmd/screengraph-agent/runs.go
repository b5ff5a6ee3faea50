package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/agent/retention"
	"github.com/screengraph/screengraph-agent/nodes"
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

// open opens the embedded store of the data dir. The runs commands read a
// store, they never create one: a data dir with no agent.db is an
// invalid_request_error naming the path (an empty table there read as "no
// runs" when the user meant another data dir or a daemon that was down).
func (f storeFlags) open(ctx context.Context) (*sqlite.Store, error) {
	dir, err := f.dir()
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "agent.db")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		hint := "pass --data-dir DIR of a daemon's data, or --server URL of a running daemon"
		if f.DataDir == "" {
			hint = "no daemon answers at " + defaultServer + " either: start `screengraph-agent serve`, or " + hint
		}
		return nil, agent.Errorf(agent.ErrInvalidRequest, "no local store at %s (%s)", p, hint)
	}
	return sqlite.Open(ctx, p, sqlite.Options{})
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

// The runs commands read through the daemon when --server is given (or
// SCREENGRAPH_SERVER), or when no --data-dir is given and a daemon answers
// at the default address; otherwise they read the local embedded store.

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
	if cl := c.daemonFor(ctx, c.storeFlags); cl != nil {
		return c.viaDaemon(ctx, cl)
	}
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	f := agent.RunFilter{Serial: c.Serial}
	if c.Limit > 0 {
		f.Limit = c.Limit + 1 // one more: whether a next page exists
	}
	for _, s := range strings.Split(c.Status, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.Status = append(f.Status, agent.RunStatus(strings.ToUpper(s)))
		}
	}
	if c.Cursor != "" {
		k, err := agent.ParseRunCursor("--cursor", c.Cursor)
		if err != nil {
			return err
		}
		f.After = &k
	}
	runs, err := st.ListRuns(ctx, agent.Admin(), f)
	if err != nil {
		return err
	}
	next := ""
	if c.Limit > 0 && len(runs) > c.Limit {
		runs = runs[:c.Limit]
		next = runs[c.Limit-1].Key().Cursor()
	}
	if c.Output == "json" {
		if runs == nil {
			runs = []agent.Run{}
		}
		out := map[string]any{"runs": runs}
		if next != "" {
			out["nextCursor"] = next
		}
		return printJSON(out)
	}
	if err := writeRuns(runs); err != nil {
		return err
	}
	printNextPage(next)
	return nil
}

// printNextPage tells (on stderr, so the table stays parseable) how to list
// the page after this one.
func printNextPage(cursor string) {
	if cursor != "" {
		fmt.Fprintf(os.Stderr, "more runs: runs list --cursor %s\n", cursor)
	}
}

// writeRuns prints runs as a table.
func writeRuns(runs []agent.Run) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN ID\tSTATUS\tSERIAL\tGRAPH\tCREATED\tTOOK")
	for _, r := range runs {
		took := "-"
		if r.Status.Terminal() {
			took = r.UpdatedAt.Sub(r.CreatedAt).Round(time.Millisecond).String()
		}
		graph := r.Graph
		if graph == "" {
			graph = "-" // the daemon's run list does not name the graph
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Status, r.Serial, graph, r.CreatedAt.UTC().Format(time.RFC3339), took)
	}
	return w.Flush()
}

type runsShowCmd struct {
	storeFlags
	serverFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *runsShowCmd) Run(ctx context.Context) error {
	if cl := c.daemonFor(ctx, c.storeFlags); cl != nil {
		return c.viaDaemon(ctx, cl)
	}
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	// The chain's structure only (no device is driven): the error report
	// lists its nodes in order.
	g, err := nodes.NewSetupGraph(nodes.SetupDeps{})
	if err != nil {
		return err
	}
	d, err := httpapi.Detail(ctx, localRuns{st}, agent.Admin(), g, c.RunID)
	if err != nil {
		return fmt.Errorf("run %s: %w", c.RunID, err)
	}
	snap, err := st.LatestSnapshot(ctx, agent.Admin(), c.RunID)
	return c.print(d, snap, err)
}

// localRuns reads a run from the embedded store for httpapi.Detail, as the
// run service does (runs show without a daemon).
type localRuns struct{ st *sqlite.Store }

func (l localRuns) Get(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error) {
	return l.st.GetRun(ctx, sc, runID)
}

func (l localRuns) Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error) {
	return l.st.Events(ctx, sc, runID, after)
}

func (l localRuns) LatestState(ctx context.Context, sc agent.Scope, runID string) (agent.RunState, error) {
	snap, err := l.st.LatestSnapshot(ctx, sc, runID)
	if err != nil {
		return agent.RunState{}, err
	}
	return agent.DecodeRunState(snap)
}

func (l localRuns) RunLease(ctx context.Context, sc agent.Scope, runID string) (agent.Lease, bool, error) {
	ls, err := l.st.LeasePage(ctx, sc, agent.LeaseQuery{RunID: runID, Limit: 1})
	if err != nil || len(ls) == 0 {
		return agent.Lease{}, false, err
	}
	return ls[0], true, nil
}

// print shows a run's detail: under --output json the run row, its latest
// state, last sequence, node timings and (FAILED) error report; as text the
// run's fields, each node attempt with its outcome and duration, and the
// error report of a FAILED run (the agent error format, indented JSON).
func (c *runsShowCmd) print(d httpapi.RunDetail, snap agent.Snapshot, snapErr error) error {
	r := client.RunRow(d)
	var state *agent.RunState
	if snapErr == nil {
		if rs, err := agent.DecodeRunState(snap); err == nil {
			state = &rs
		}
	}
	last := int64(d.Events) // sequences are 1..n without gaps
	if c.Output == "json" {
		return printJSON(map[string]any{"run": r, "state": state, "lastSequence": last, "nodes": d.Nodes, "error": d.Error})
	}
	writeShow(r, state, last)
	if d.TookMillis > 0 {
		fmt.Printf("took %.1f s\n", float64(d.TookMillis)/1000)
	}
	for _, n := range d.Nodes {
		line := fmt.Sprintf("node %-15s step %d attempt %d  %-7s %7.1f s", n.Node, n.StepOrdinal, n.Attempt, n.Outcome, float64(n.DurationMillis)/1000)
		if n.ErrorID != nil {
			line += "  " + *n.ErrorID
		}
		fmt.Println(line)
	}
	if d.Error != nil {
		b, err := json.MarshalIndent(d.Error, "", "  ")
		if err != nil {
			return err
		}
		fmt.Printf("error report:\n%s\n", agent.RedactJSON(b))
	}
	return nil
}

// writeShow prints a run, its completed nodes and its last sequence.
func writeShow(r agent.Run, state *agent.RunState, last int64) {
	fmt.Printf("run %s\nstatus %s\nserial %s\ngraph %s\ntenant %s\npolicy v%d\ncreated %s\nupdated %s\nevents %d\n",
		r.RunID, r.Status, r.Serial, r.Graph, r.TenantID, r.PolicyVersion,
		r.CreatedAt.UTC().Format(time.RFC3339Nano), r.UpdatedAt.UTC().Format(time.RFC3339Nano), last)
	if state != nil {
		for _, n := range state.Completed {
			fmt.Printf("completed %s (step %d)\n", n.Node, n.StepOrdinal)
		}
	}
}

type runsEventsCmd struct {
	storeFlags
	serverFlags
	outputFlag
	RunID  string `arg:"" help:"The run's ULID."`
	After  int64  `help:"Only events with a sequence above this." default:"0"`
	Follow bool   `help:"Print each event as it is committed until the run ends (json: one event a line)." short:"f"`
}

func (c *runsEventsCmd) Run(ctx context.Context) error {
	if cl := c.daemonFor(ctx, c.storeFlags); cl != nil {
		return c.viaDaemon(ctx, cl)
	}
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if c.Follow {
		return followLocal(ctx, st, c.RunID, c.After, eventPrinter(c.Output))
	}
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
	serverFlags
	outputFlag
	RunID string `arg:"" help:"The run's ULID."`
	Step  int    `help:"Step ordinal (0-based); -1 means the latest." default:"-1"`
}

func (c *runsInspectCmd) Run(ctx context.Context) error {
	if cl := c.daemonFor(ctx, c.storeFlags); cl != nil {
		return c.viaDaemon(ctx, cl)
	}
	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := snapshots.InspectStep(ctx, st, c.RunID, c.Step)
	if err != nil {
		return err // names the run or the step it lacks
	}
	if c.Output == "json" {
		return printJSON(v)
	}
	v.Snapshot.State = agent.RedactJSON(v.Snapshot.State)
	v.Events = redactEvents(v.Events)
	return snapshots.WriteStepView(os.Stdout, v)
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
	if c.Output == "json" {
		return printJSON(res)
	}
	fmt.Printf("deleted %d runs ended more than %v ago: %d events, %d outbox rows, %d snapshots, %d control rows, %d leases\n",
		res.Runs, c.OlderThan, res.Events, res.Outbox, res.Snapshots, res.Controls, res.Leases)
	if res.Held > 0 {
		fmt.Printf("kept %d such runs: outbox rows not yet published (or a lease still active); they go once the relay published them: %s\n",
			res.Held, strings.Join(res.HeldRuns, " "))
	}
	return nil
}
