package render

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/cmd/internal/hostcheck"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
)

// Artifacts prints `runs artifacts`: json, {"artifacts": [...]} with each
// artifact's saved path (saved, by artifact id; omitted when not saved);
// text, a table with the path last.
func Artifacts(output string, arts []httpapi.ArtifactView, saved map[string]string) error {
	if output == "json" {
		type entry struct {
			httpapi.ArtifactView
			Path string `json:"path,omitempty"`
		}
		out := []entry{}
		for _, a := range arts {
			out = append(out, entry{a, saved[a.ArtifactID]})
		}
		return PrintJSON(map[string]any{"artifacts": out})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ARTIFACT\tKIND\tNODE\tSTEP\tTYPE\tBYTES\tSHA256\tCREATED\tSAVED")
	for _, a := range arts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", a.ArtifactID, a.Kind, a.Node, a.StepOrdinal, a.ContentType, a.Bytes, a.SHA256[:12], a.CreatedAt, saved[a.ArtifactID])
	}
	return tw.Flush()
}

// Doctor prints `doctor`'s report: json, the report; text, a line a check
// (status, name, detail) and its fix under it. When a check failed, a line
// on stderr counts them.
func Doctor(output string, r hostcheck.Report) error {
	if output == "json" {
		if err := PrintJSON(r); err != nil {
			return err
		}
	} else {
		for _, ch := range r.Checks {
			fmt.Printf("%-4s  %-20s %s\n", ch.Status, ch.Name, ch.Detail)
			if ch.Fix != "" {
				fmt.Printf("      %-20s fix: %s\n", "", ch.Fix)
			}
		}
	}
	if r.Failed() {
		n := 0
		for _, ch := range r.Checks {
			if ch.Status == hostcheck.Fail {
				n++
			}
		}
		fmt.Fprintf(os.Stderr, "doctor: %d of %d checks failed\n", n, len(r.Checks))
	}
	return nil
}

// Migrated prints what `migrate` applied: json, the result; text, the
// versions applied and the schema's version.
func Migrated(output string, res postgres.MigrateResult) error {
	if output == "json" {
		return PrintJSON(res)
	}
	if len(res.Applied) == 0 {
		fmt.Printf("schema current at version %d\n", res.Version)
		return nil
	}
	vs := make([]string, len(res.Applied))
	for i, v := range res.Applied {
		vs[i] = fmt.Sprint(v)
	}
	fmt.Printf("applied %s; schema at version %d\n", strings.Join(vs, ", "), res.Version)
	return nil
}

// EmulatorStart is what `emulator start --output json` prints.
type EmulatorStart struct {
	AVD            string `json:"avd"`
	Serial         string `json:"serial"`
	BootMode       string `json:"bootMode"`
	BootMillis     int64  `json:"bootMillis"`
	ColdBootReason string `json:"coldBootReason,omitempty"`
}

// EmulatorStarted prints the emulator `emulator start` booted: json,
// EmulatorStart; text, one line with its serial, AVD, boot mode and time,
// and why it booted cold.
func EmulatorStarted(output, avd string, res device.BootResult) error {
	out := EmulatorStart{AVD: avd, Serial: res.Serial, BootMode: string(res.Mode), BootMillis: res.Took.Milliseconds(), ColdBootReason: res.ColdBootReason}
	if output == "json" {
		return PrintJSON(out)
	}
	fmt.Printf("%s %s (%s boot, %d ms)", out.Serial, out.AVD, strings.ToLower(out.BootMode), out.BootMillis)
	if out.ColdBootReason != "" {
		fmt.Printf(": %s", out.ColdBootReason)
	}
	fmt.Println()
	return nil
}

// Pruned prints what `runs prune` deleted (runs ended more than olderThan
// ago) and the runs it kept: json, the result; text, two lines.
func Pruned(output string, res agent.PruneResult, olderThan time.Duration) error {
	if output == "json" {
		return PrintJSON(res)
	}
	fmt.Printf("deleted %d runs ended more than %v ago: %d events, %d outbox rows, %d snapshots, %d control rows, %d leases\n",
		res.Runs, olderThan, res.Events, res.Outbox, res.Snapshots, res.Controls, res.Leases)
	if res.Held > 0 {
		fmt.Printf("kept %d such runs: outbox rows not yet published (or a lease still active); they go once the relay published them: %s\n",
			res.Held, strings.Join(res.HeldRuns, " "))
	}
	return nil
}
