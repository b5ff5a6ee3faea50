// Command screengraph-agent is the ScreenGraph device agent: it prepares Android
// devices for automated exploration through the adb server and Appium. This
// file only wires commands; the work is in the packages.
package main

import (
	"context"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
)

// Globals are flags every command takes.
type Globals struct {
	LogLevel string `help:"Log level: debug, info, warn, error." default:"info" enum:"debug,info,warn,error"`
	LogJSON  bool   `help:"Log JSON lines instead of console text." name:"log-json"`
	// Token is sent by the client commands (token.go, client.go).
	Token string `help:"API token the client commands send to the daemon (Authorization: Bearer); see token create." env:"SCREENGRAPH_TOKEN"`
}

type commands struct {
	Globals
	Serve    serveCmd    `cmd:"" help:"Run the daemon: setup chains on every device of this host, controlled over HTTP, NATS and the CLI."`
	Run      runCmd      `cmd:"" help:"Run the setup chain (EnsureDevice, ProvisionApp, LaunchOrAttach, WaitIdle) on one device."`
	Devices  devicesCmd  `cmd:"" help:"List every device the adb server knows, with state, model, API level and boot readiness."`
	Emulator emulatorCmd `cmd:"" help:"Emulators: list, start and stop AVDs; run simulated ones."`
	Runs     runsCmd     `cmd:"" help:"Inspect runs (through the daemon when one answers, else the embedded store); resume one without a daemon."`
	Cancel   cancelCmd   `cmd:"" help:"Ask the daemon to cancel a run (at its next node boundary)."`
	Pause    pauseCmd    `cmd:"" help:"Ask the daemon to pause a run at its next node boundary."`
	Resume   resumeCmd   `cmd:"" help:"Ask the daemon to resume a paused run."`
	Policy   policyCmd   `cmd:"" help:"Policies of runs on the daemon."`
	Appium   appiumCmd   `cmd:"" help:"The local Appium server runs start."`
	// Tenancy (token.go).
	Token      tokenCmd      `cmd:"" help:"API tokens scoped to a tenant, or admin: create (printed once), list, revoke."`
	NATSConfig natsConfigCmd `cmd:"" name:"nats-config" help:"Print the authorization block of a nats-server config (users and permissions per token) for an external cluster."`
	Migrate    migrateCmd    `cmd:"" help:"Apply the embedded schema migrations to a fleet's Postgres (serve does too, at start)."`
	// Installation (version.go, setup.go).
	Version  versionCmd  `cmd:"" help:"Print the version, commit, build date and Go version, and those of the adb server, Appium and the uiautomator2 driver found."`
	Setup    setupCmd    `cmd:"" help:"Install what the agent drives: setup appium."`
	Examples examplesCmd `cmd:"" help:"Write the walkthrough's inputs into DIR: run.json (pointing at DIR/demo-v2.apk), policy-v2.yaml and the signed demo APKs (demo-v1.apk, demo-v2.apk)."`
	Doctor   doctorCmd   `cmd:"" help:"Check what this host needs (adb server, devices, Appium and its driver, SDK, emulator, KVM, data dir, ports; Postgres, clock skew and NATS in fleet mode): ok/warn/fail lines with fixes; exit 1 on a fail. Takes serve's flags and config."`
}

type emulatorCmd struct {
	List  emulatorListCmd  `cmd:"" help:"List the AVDs (emulator -list-avds) and the running emulators with the AVD each runs."`
	Start emulatorStartCmd `cmd:"" help:"Boot an AVD headless on a free port pair and wait until it is boot-ready."`
	Stop  emulatorStopCmd  `cmd:"" help:"Stop an emulator: the console's kill, else adb emu kill."`
	Sim   simCmd           `cmd:"" help:"Start simulated Android emulators that speak the real ADB protocol and register with an adb server."`
}

func (g Globals) logger() zerolog.Logger {
	return agentd.NewLogger(os.Stderr, g.LogLevel, g.LogJSON)
}

func main() {
	var c commands
	parser, err := kong.New(&c,
		kong.Name("screengraph-agent"),
		kong.Description("The ScreenGraph device agent: prepares Android devices through adb and Appium."),
		kong.Vars{"default_listen": DefaultListen})
	if err != nil {
		fmt.Fprintln(os.Stderr, "screengraph-agent:", err)
		os.Exit(1)
	}
	kctx, err := parser.Parse(cli.CommandLine(os.Args)[1:])
	if err != nil {
		// The error (with kong's closest-flag suggestion) first, then one
		// line pointing at the command's help: ~90 lines of usage before
		// it buried the line that says what was wrong.
		fmt.Fprintln(os.Stderr, "screengraph-agent: error:", agent.RedactString(err.Error()))
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cli.HelpCommand(err))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	clientToken = c.Globals.Token // tenancy: the client commands' Bearer token
	if err := kctx.Run(&c.Globals); err != nil {
		fmt.Fprintln(os.Stderr, "screengraph-agent:", agent.RedactString(err.Error()))
		os.Exit(cli.ExitCode(err))
	}
}
