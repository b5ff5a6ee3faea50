package main

import (
	"context"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
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
// a cli.ExitError (exit 1) either way.
func (f emulatorFlags) fail(what string, err error) error {
	e := agent.Classify(err)
	if f.Output == "json" {
		_ = render.PrintJSON(render.FailureReport(what, e))
	}
	return cli.ExitError{Code: 1, Err: fmt.Errorf("%s: %w", what, e)}
}

type emulatorListCmd struct {
	emulatorFlags
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
	return render.Emulators(c.Output, m, names, ins)
}

type emulatorStartCmd struct {
	emulatorFlags
	Name         string        `arg:"" help:"AVD name (see 'emulator list')."`
	ReadOnly     bool          `help:"Boot another instance beside a running one (-read-only: no snapshot saved)." name:"read-only"`
	Cold         bool          `help:"Cold boot (-no-snapshot-load) instead of a quick boot from the default_boot snapshot."`
	SaveSnapshot bool          `help:"Let the emulator save default_boot on exit (without it: -no-snapshot-save)." name:"save-snapshot"`
	Timeout      time.Duration `help:"Bound of the boot." default:"3m"`
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
	return render.EmulatorStarted(c.Output, c.Name, res)
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
		return render.PrintJSON(map[string]any{"serial": c.Serial, "stopped": true})
	}
	fmt.Printf("%s stopped\n", c.Serial)
	return nil
}
