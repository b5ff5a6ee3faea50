package main

import (
	"context"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// loadProfile reads a profile file, or a shipped profile by name.
func loadProfile(ref string) (android.Profile, error) { return sim.LoadProfile(ref) }

type simCmd struct {
	Count     int    `help:"How many simulated emulators to start." default:"1"`
	Port      int    `help:"Console port of the first emulator (even); its adb port is PORT+1 and its serial emulator-PORT. The next ones take PORT+2, PORT+4, …" default:"5554"`
	Profile   string `help:"Device profile: a YAML/JSON file, or the name of a shipped one (default, api29, api30, api33, slow-boot, never-boots, quickboot, snapshot-fails, unauthorized, unauthorized-forever, crash)." default:"default"`
	ADBServer string `help:"adb server HOST:PORT to register with (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`

	EmulatorArgs []string `arg:"" optional:"" name:"emulator-flags" help:"The real emulator binary's flags, single-dash (-avd NAME -port P -no-window -no-audio -no-boot-anim -read-only -no-snapshot-save -no-snapshot-load -no-snapshot -wipe-data -gpu MODE -accel MODE, -list-avds; @NAME): run one simulated emulator for that AVD in place of the SDK's emulator (AVDs from $ANDROID_AVD_HOME or ~/.android/avd; config.ini key screengraph.simProfile names the profile)."`
}

func (s *simCmd) Run(ctx context.Context, g *Globals) error {
	log := g.logger()
	if len(s.EmulatorArgs) > 0 {
		code := sim.RunEmulator(ctx, s.EmulatorArgs, sim.RunEmulatorConfig{Stdout: os.Stdout, Stderr: os.Stderr, LoadProfile: loadProfile, Log: log})
		if code != 0 {
			return cli.ExitError{Code: code, Err: fmt.Errorf("emulator exited with code %d", code)}
		}
		return nil
	}
	prof, err := loadProfile(s.Profile)
	if err != nil {
		return err
	}
	return sim.RunFleet(ctx, sim.FleetConfig{Count: s.Count, ConsolePort: s.Port, ADBServer: adbAddr(s.ADBServer), Profile: prof, Log: log, Out: os.Stdout})
}
