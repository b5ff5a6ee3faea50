package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator"
)

// emulatorFlags are the flags of `emulator list|start|stop`.
type emulatorFlags struct {
	storeFlags
	ADBServer string `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	Command   string `help:"Emulator command line in place of the SDK's emulator binary (default: $SCREENGRAPH_EMULATOR, else $ANDROID_SDK_ROOT or $ANDROID_HOME/emulator/emulator), e.g. 'screengraph-agent emulator sim'." name:"emulator-cmd"`
	Output    string `help:"Output format: text or json." default:"text" enum:"text,json"`
}

func (f emulatorFlags) manager() (*emulator.Manager, error) {
	dir, err := f.dir()
	if err != nil {
		return nil, err
	}
	cmd, err := emulator.ParseCommand(f.Command)
	if err != nil {
		return nil, err
	}
	return emulator.ForDataDir(dir, adbAddr(f.ADBServer), cmd), nil
}

// fail prints err in the agent error format under --output json and returns
// an exitError (exit 1) either way.
func (f emulatorFlags) fail(what string, err error) error {
	e := agent.Classify(err)
	if f.Output == "json" {
		rep := agent.ErrorReport{Error: e.Error(), Errors: []agent.ErrorEntry{{
			Category: agent.CategoryExecutionFailure, NodeID: what, Message: e.Error(), Fixable: e.Retryable,
			Context: map[string]any{"error_id": e.ID, "retryable": e.Retryable}}},
			Execution:  agent.Execution{Steps: []agent.ExecutionStep{{NodeID: what, Status: agent.StepFailed}}},
			Checkpoint: agent.Checkpoint{CompletedNodes: []string{}, FailedNode: what}}
		if e.Code != "" {
			rep.Errors[0].Context["error_code"] = e.Code
		}
		_ = printJSON(rep)
	}
	return exitError{code: 1, err: fmt.Errorf("%s: %w", what, e)}
}

type emulatorListCmd struct {
	emulatorFlags
}

// avdRow is one AVD of `emulator list`.
type avdRow struct {
	emulator.AVDInfo
	Running []string `json:"running"`
}

func (c *emulatorListCmd) Run(ctx context.Context) error {
	m, err := c.manager()
	if err != nil {
		return err
	}
	names, err := m.ListAVDs(ctx)
	if err != nil {
		return c.fail("emulator list", err)
	}
	ins, err := m.Instances(ctx)
	if err != nil {
		return c.fail("emulator list", err)
	}
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
	if c.Output == "json" {
		return printJSON(map[string]any{"avds": rows, "emulators": ins})
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

type emulatorStartCmd struct {
	emulatorFlags
	Name         string        `arg:"" help:"AVD name (see 'emulator list')."`
	ReadOnly     bool          `help:"Boot another instance beside a running one (-read-only: no snapshot saved)." name:"read-only"`
	Cold         bool          `help:"Cold boot (-no-snapshot-load) instead of a quick boot from the default_boot snapshot."`
	SaveSnapshot bool          `help:"Let the emulator save default_boot on exit (without it: -no-snapshot-save)." name:"save-snapshot"`
	Timeout      time.Duration `help:"Bound of the boot." default:"3m"`
}

// startResult is what `emulator start --output json` prints.
type startResult struct {
	AVD            string `json:"avd"`
	Serial         string `json:"serial"`
	BootMode       string `json:"bootMode"`
	BootMillis     int64  `json:"bootMillis"`
	ColdBootReason string `json:"coldBootReason,omitempty"`
}

func (c *emulatorStartCmd) Run(ctx context.Context) error {
	m, err := c.manager()
	if err != nil {
		return err
	}
	res, err := m.Boot(ctx, device.BootRequest{AVD: c.Name, ReadOnly: c.ReadOnly, ColdBoot: c.Cold, SaveSnapshot: c.SaveSnapshot,
		Timeout: c.Timeout, Progress: func(l string) { fmt.Fprintln(os.Stderr, " ", l) }})
	if err != nil {
		return c.fail("emulator start", err)
	}
	out := startResult{AVD: c.Name, Serial: res.Serial, BootMode: string(res.Mode), BootMillis: res.Took.Milliseconds(), ColdBootReason: res.ColdBootReason}
	if c.Output == "json" {
		return printJSON(out)
	}
	fmt.Printf("%s %s (%s boot, %d ms)", out.Serial, out.AVD, strings.ToLower(out.BootMode), out.BootMillis)
	if out.ColdBootReason != "" {
		fmt.Printf(": %s", out.ColdBootReason)
	}
	fmt.Println()
	return nil
}

type emulatorStopCmd struct {
	emulatorFlags
	Serial string `arg:"" help:"Emulator serial (emulator-PORT)."`
}

func (c *emulatorStopCmd) Run(ctx context.Context) error {
	m, err := c.manager()
	if err != nil {
		return err
	}
	if err := m.Stop(ctx, c.Serial); err != nil {
		return c.fail("emulator stop", err)
	}
	if c.Output == "json" {
		return printJSON(map[string]any{"serial": c.Serial, "stopped": true})
	}
	fmt.Printf("%s stopped\n", c.Serial)
	return nil
}
