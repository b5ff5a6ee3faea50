// Package render renders what the screengraph-agent commands print: tables,
// run details, followed events and progress, JSON (always through
// agent.RedactJSON) and the agent error format of a failed call. The main
// package maps flags to calls; this package holds the output, so each
// command's output is written once whichever daemon (or in-process API)
// answered.
package render

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator"
	"github.com/screengraph/screengraph-agent/nodes"
)

// PrintJSON prints v as indented JSON with its secrets redacted
// (agent.RedactJSON: URL userinfo, signed-URL query parameters, secret-named
// keys). Every `--output json` goes through it; the store keeps the run
// input as submitted (resume needs it), the CLI never shows its credentials.
func PrintJSON(v any) error {
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

// RedactEvents returns copies of evs whose payloads are redacted, for the
// text output (events written before redaction existed may hold secrets).
func RedactEvents(evs []agent.Event) []agent.Event {
	out := make([]agent.Event, len(evs))
	for i, e := range evs {
		e.Payload = agent.RedactJSON(e.Payload)
		out[i] = e
	}
	return out
}

// PrintNextPage tells (on stderr, so the table stays parseable) how to list
// the page after this one.
func PrintNextPage(cursor string) {
	if cursor != "" {
		fmt.Fprintf(os.Stderr, "more runs: runs list --cursor %s\n", cursor)
	}
}

// WriteRuns prints runs as a table.
func WriteRuns(runs []agent.Run) error {
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

// PrintRunDetail shows a run's detail: under --output json the run row, its latest
// state, last sequence, node timings and (FAILED) error report; as text the
// run's fields, each node attempt with its outcome and duration, and the
// error report of a FAILED run (the agent error format, indented JSON).
func PrintRunDetail(output string, d httpapi.RunDetail, snap agent.Snapshot, snapErr error) error {
	r := client.RunRow(d)
	var state *agent.RunState
	if snapErr == nil {
		if rs, err := agent.DecodeRunState(snap); err == nil {
			state = &rs
		}
	}
	last := int64(d.Events) // sequences are 1..n without gaps
	if output == "json" {
		return PrintJSON(map[string]any{"run": r, "state": state, "lastSequence": last, "nodes": d.Nodes, "error": d.Error})
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

// ErrorBody is what `--output json` prints for a failed call: the daemon's
// body as it sent it, else the agent error format of err.
func ErrorBody(err error) any {
	var ae *client.Error
	if errors.As(err, &ae) && json.Valid(ae.Body) && len(bytes.TrimSpace(ae.Body)) > 0 {
		return ae.Body
	}
	return httpapi.ErrorBody(err, "")
}

// EventPrinter prints followed events as they arrive: a table row each
// (text) or one JSON object a line (json), redacted. The payload is printed
// whole (a token_delta's text is what the reader follows).
func EventPrinter(output string) func(agent.Event) error {
	header := false
	return func(e agent.Event) error {
		e.Payload = agent.RedactJSON(e.Payload)
		if output == "json" {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(os.Stdout, "%s\n", agent.RedactJSON(b))
			return err
		}
		if !header {
			fmt.Fprintf(os.Stdout, "%-5s  %-24s  %-30s  %-26s  %-13s  %s\n", "SEQ", "TS", "KIND", "EVENT ID", "CHECKSUM", "PAYLOAD")
			header = true
		}
		_, err := fmt.Fprintf(os.Stdout, "%-5d  %-24s  %-30s  %-26s  %-13s  %s\n", e.Sequence, e.TS, e.Kind, e.EventID, clip(e.Checksum, 12), e.Payload)
		return err
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ProgressView prints a followed run as it goes: one line per node start,
// progress/log line and node end, each with the time since the run started,
// and the final status with the failure's error id and summary. Under json
// it prints each event as one JSON line instead (EventPrinter).
type ProgressView struct {
	w     io.Writer
	json  func(agent.Event) error
	now   func() time.Time
	start time.Time
	node  string
	// Status is the run's end once its end event was seen.
	Status agent.RunStatus
}

func NewProgressView(w io.Writer, asJSON bool, now func() time.Time) *ProgressView {
	v := &ProgressView{w: w, now: now}
	if asJSON {
		v.json = EventPrinter("json")
	}
	return v
}

// Event prints e (the view's callback of client.Follow): one line of text,
// or its JSON line; events the text view does not show print nothing. A
// closed writer is not an error (the reader went away).
func (v *ProgressView) Event(e agent.Event) error {
	if v.start.IsZero() {
		v.start = v.now()
	}
	switch e.Kind {
	case agent.KindRunFinished:
		v.Status = agent.RunFinished
	case agent.KindRunFailed:
		v.Status = agent.RunFailed
	case agent.KindRunCanceled:
		v.Status = agent.RunCanceled
	}
	if v.json != nil {
		return v.json(e)
	}
	line, ok := v.line(e)
	if !ok {
		return nil
	}
	el := fmt.Sprintf("%7.1fs", v.now().Sub(v.start).Seconds())
	_, err := fmt.Fprintf(v.w, "%s  %s\n", el, strings.ReplaceAll(line, "\n", " "))
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// line is the text line of e; false for an event the view does not show.
func (v *ProgressView) line(e agent.Event) (string, bool) {
	switch e.Kind {
	case agent.KindRunStarted:
		var p agent.RunStartedPayload
		_ = json.Unmarshal(e.Payload, &p)
		return fmt.Sprintf("run started on %s (policy %d)", p.Serial, p.PolicyVersion), true
	case agent.KindNodeStarted:
		var p agent.NodeStartedPayload
		_ = json.Unmarshal(e.Payload, &p)
		v.node = p.NodeName
		return fmt.Sprintf("%-15s started (attempt %d)", p.NodeName, p.Attempt), true
	case agent.KindNodeTokenDelta:
		var p agent.TokenDeltaPayload
		_ = json.Unmarshal(e.Payload, &p)
		pct := ""
		if p.Percent != nil {
			pct = fmt.Sprintf(" %.0f%%", *p.Percent)
		}
		return fmt.Sprintf("%-15s %s%s", p.NodeName, agent.RedactString(p.Text), pct), true
	case agent.KindNodeFinished:
		return nodeFinishedLine(e), true
	case agent.KindRunFinished, agent.KindRunFailed, agent.KindRunCanceled:
		return runEndedLine(e), true
	case agent.KindRunPaused:
		return "run PAUSED (resume it with `screengraph-agent resume " + e.RunID + "`)", true
	case agent.KindRunResumed:
		return "run resumed", true
	}
	return "", false
}

// nodeFinishedLine is an agent.node.finished's line: the node, its outcome
// and time, and a failure's error id and summary (redacted).
func nodeFinishedLine(e agent.Event) string {
	var p agent.NodeFinishedPayload
	_ = json.Unmarshal(e.Payload, &p)
	line := fmt.Sprintf("%-15s %s in %.1f s", p.NodeName, p.NodeExecutionOutcomeStatus, float64(p.DurationMillis)/1000)
	if p.ErrorID != nil {
		line += ": " + string(*p.ErrorID)
		if p.HumanReadableFailureSummary != nil {
			line += ": " + agent.RedactString(*p.HumanReadableFailureSummary)
		}
	}
	return line
}

// runEndedLine is a run end event's line: the status, the failed node, the
// error id and summary (redacted), the node a cancel came before.
func runEndedLine(e agent.Event) string {
	var p agent.RunEndedPayload
	_ = json.Unmarshal(e.Payload, &p)
	line := "run " + string(p.Status)
	if p.FailedNode != "" {
		line += " at " + p.FailedNode
	}
	if p.ErrorID != nil {
		line += ": " + string(*p.ErrorID)
	}
	if p.Summary != "" {
		line += ": " + agent.RedactString(p.Summary)
	}
	if p.CanceledBeforeNode != "" {
		line += " before " + p.CanceledBeforeNode
	}
	return line
}

// Summarize picks the node-specific part of an output for the text report.
func Summarize(raw json.RawMessage) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return string(raw)
	}
	for _, k := range []string{"deviceRuntimeContext", "applicationProvisioningOutcome", "applicationForegroundContext", "uiStabilityAssessment"} {
		if v, ok := obj[k]; ok {
			if k == "deviceRuntimeContext" {
				var d map[string]any
				json.Unmarshal(v, &d)
				delete(d, "capabilitiesEcho")
				b, _ := json.Marshal(d)
				return string(b)
			}
			return string(v)
		}
	}
	return string(raw)
}

// Category is the agent error format category of e: api_validation for an
// invalid request, execution_failure otherwise.
func Category(e *agent.Error) string {
	if e.ID == agent.ErrInvalidRequest {
		return agent.CategoryAPIValidation
	}
	return agent.CategoryExecutionFailure
}

// Emulators prints `emulator list`: each AVD of names (m.DescribeAVD) with
// the serials of the instances ins running it, then the running emulators;
// under json {"avds": [...], "emulators": [...]}.
func Emulators(output string, m *emulator.Manager, names []string, ins []emulator.Instance) error {
	rows := make([]avdRow, 0, len(names))
	for _, n := range names {
		info, _ := m.DescribeAVD(n)
		r := avdRow{AVDInfo: info, Running: []string{}}
		for _, in := range ins {
			if in.AVD == n {
				r.Running = append(r.Running, in.Serial)
			}
		}
		rows = append(rows, r)
	}
	if ins == nil {
		ins = []emulator.Instance{}
	}
	if output == "json" {
		return PrintJSON(map[string]any{"avds": rows, "emulators": ins})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AVD\tAPI\tDISPLAY\tRUNNING")
	for _, r := range rows {
		run := strings.Join(r.Running, ", ")
		if run == "" {
			run = "-"
		}
		api, disp := "-", "-"
		if r.APILevel > 0 {
			api = fmt.Sprint(r.APILevel)
		}
		if r.Display != "" {
			disp = r.Display
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Name, api, disp, run)
	}
	if len(ins) > 0 {
		fmt.Fprintln(w, "\nSERIAL\tSTATE\tAVD\tBOOTED HERE")
		for _, in := range ins {
			booted := "-"
			if in.Booted != nil {
				booted = "since " + in.Booted.BootedAt.Format(time.RFC3339)
			}
			avd := in.AVD
			if avd == "" {
				avd = "?"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", in.Serial, in.State, avd, booted)
		}
	}
	return w.Flush()
}

// avdRow is one AVD of `emulator list`.
type avdRow struct {
	emulator.AVDInfo
	Running []string `json:"running"`
}

// FailureReport is the agent error format of a command's failure e (what:
// the command, as the failed node), for --output json.
func FailureReport(what string, e *agent.Error) agent.ErrorReport {
	rep := agent.ErrorReport{Error: e.Error(), Errors: []agent.ErrorEntry{{
		Category: agent.CategoryExecutionFailure, NodeID: what, Message: e.Error(), Fixable: e.Retryable,
		Context: map[string]any{"error_id": e.ID, "retryable": e.Retryable}}},
		Execution:  agent.Execution{Steps: []agent.ExecutionStep{{NodeID: what, Status: agent.StepFailed}}},
		Checkpoint: agent.Checkpoint{CompletedNodes: []string{}, FailedNode: what}}
	if e.Code != "" {
		rep.Errors[0].Context["error_code"] = e.Code
	}
	return rep
}

// Devices prints GET /v1/devices: serial, state, model, API level,
// readiness (and quarantine) and lease holder; under json {"devices": [...]}.
func Devices(output string, devs []service.Device) error {
	if output == "json" {
		return PrintJSON(map[string]any{"devices": devs})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERIAL\tSTATE\tMODEL\tAPI\tREADINESS\tHELD BY")
	for _, s := range devs {
		api, model, held := "-", s.Model, s.HeldBy
		if s.APILevel > 0 {
			api = fmt.Sprint(s.APILevel)
		}
		if model == "" {
			model = "-"
		}
		if held == "" {
			held = "-"
		}
		readiness := s.Readiness
		if s.Quarantined {
			readiness += " (quarantined: " + s.QuarantineReason + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Serial, s.State, model, api, readiness, held)
	}
	return w.Flush()
}

// DeviceSummaries prints what the adb server says of its devices (no
// daemon): serial, state, model, API level and Android release, boot
// readiness; under json {"devices": [...]}.
func DeviceSummaries(output string, list []device.Summary) error {
	if output == "json" {
		if list == nil {
			list = []device.Summary{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"devices": list})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERIAL\tSTATE\tMODEL\tAPI\tBOOT")
	for _, s := range list {
		api := "-"
		if s.APILevel > 0 {
			api = fmt.Sprintf("%d (Android %s)", s.APILevel, s.Release)
		}
		boot := "ready"
		if !s.BootReady {
			boot = "not ready: " + s.BootDetail
		}
		model := s.Model
		if model == "" {
			model = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Serial, s.State, model, api, boot)
	}
	return w.Flush()
}

// Tokens prints `token list`: id, tenant, admin, created, revoked (never
// the token); under json a bare array.
func Tokens(output string, ts []agent.APIToken) error {
	if ts == nil {
		ts = []agent.APIToken{}
	}
	if output == "json" {
		// A bare array: a key named like "tokens" would be redacted whole.
		return PrintJSON(ts)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTENANT\tADMIN\tCREATED\tREVOKED")
	for _, t := range ts {
		rev := "-"
		if t.RevokedAt != nil {
			rev = t.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%s\n", t.ID, t.TenantID, t.Admin, t.CreatedAt.Format(time.RFC3339), rev)
	}
	return w.Flush()
}

// ErrRunNotFinished is RunOutcome's error for a run that ended otherwise
// than FINISHED (its report was printed).
type ErrRunNotFinished struct {
	RunID  string
	Status agent.RunStatus
}

func (e ErrRunNotFinished) Error() string { return fmt.Sprintf("run %s %s", e.RunID, e.Status) }

// RunOutcome prints how a run driven in this process (`run`) ended: node
// outputs and timings on success; the agent error format of the failure
// otherwise (secrets redacted), then ErrRunNotFinished. took is the chain's
// time, total with the set-up.
func RunOutcome(ctx context.Context, output string, st agent.Store, g *agent.Graph, runID string, status agent.RunStatus, took, total time.Duration) error {
	sn, err := st.LatestSnapshot(ctx, agent.Admin(), runID)
	if err != nil {
		return err
	}
	rs, err := agent.DecodeRunState(sn)
	if err != nil {
		return err
	}
	if status != agent.RunFinished {
		rep, err := agent.NewErrorReport(g, rs)
		if err != nil && !errors.Is(err, agent.ErrNoFailure) {
			return err
		}
		if errors.Is(err, agent.ErrNoFailure) {
			rep = agent.ErrorReport{Error: "run " + string(status)}
		}
		if output == "json" {
			PrintJSON(struct {
				RunID  string          `json:"runId"`
				Status agent.RunStatus `json:"status"`
				agent.ErrorReport
			}{runID, status, rep})
		} else {
			fmt.Fprintf(os.Stderr, "run %s %s after %v: %s\n", runID, status, took.Round(time.Millisecond), agent.RedactString(rep.Error))
		}
		return ErrRunNotFinished{RunID: runID, Status: status}
	}
	if output == "json" {
		return PrintJSON(map[string]any{"success": true, "runId": runID, "status": status,
			"tookMillis": took.Milliseconds(), "outputs": agent.Redact(rs.Outputs)})
	}
	evs, _ := st.Events(ctx, agent.Admin(), runID, 0)
	started := map[string]time.Time{}
	for _, e := range evs {
		ts, _ := time.Parse(agent.TimestampLayout, e.TS)
		var p struct {
			NodeName string `json:"nodeName"`
		}
		json.Unmarshal(e.Payload, &p)
		switch e.Kind {
		case agent.KindNodeStarted:
			started[p.NodeName] = ts
		case agent.KindNodeFinished:
			fmt.Fprintf(os.Stderr, "  %-15s done in %v\n", p.NodeName, ts.Sub(started[p.NodeName]).Round(time.Millisecond))
		}
	}
	for _, name := range g.NodeNames() {
		fmt.Printf("%s: %s\n", name, Summarize(rs.Outputs[name]))
	}
	fmt.Printf("run %s FINISHED in %v (%d events; %v with set-up)\n", runID, took.Round(time.Millisecond), len(evs), total.Round(time.Millisecond))
	return nil
}

// RunRefused prints, in the agent error format of `run --output json`, a
// run refused before it started (bad flags or input, no device, a lease
// that could not be waited for): every node not_executed, the failed node
// the one whose input was refused (nodes.InputError), if any; secrets
// redacted.
func RunRefused(err error) {
	e := agent.Classify(err)
	node := ""
	var ie *nodes.InputError
	if errors.As(err, &ie) {
		node = ie.Node
	}
	steps := []map[string]any{}
	for _, n := range []string{nodes.NodeEnsureDevice, nodes.NodeProvisionApp, nodes.NodeLaunchOrAttach, nodes.NodeWaitIdle} {
		steps = append(steps, map[string]any{"node_id": n, "status": "not_executed", "cached": false})
	}
	PrintJSON(map[string]any{
		"success": false,
		"error":   agent.RedactString(e.Error()),
		"errors": []map[string]any{{"category": Category(e), "node_id": node,
			"message": agent.RedactString(e.Error()), "fixable": Category(e) == agent.CategoryAPIValidation || e.Retryable, "error_id": e.ID}},
		"execution":  map[string]any{"steps": steps},
		"checkpoint": map[string]any{"completed_nodes": []string{}, "failed_node": node},
	})
}
