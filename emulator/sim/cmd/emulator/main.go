// Command emulator is the simulated emulator standing in for the Android SDK's
// `emulator` binary: the same single-dash flags (`-avd NAME -port P
// -no-window -read-only -no-snapshot-save ...`, `-list-avds`), AVDs read from
// $ANDROID_AVD_HOME or ~/.android/avd, a console on port P and adbd on P+1
// registered with the adb server of ANDROID_ADB_SERVER_PORT. Tests build it
// as <sdk>/emulator/emulator (simtest.BuildEmulator) so that lifecycle code
// runs it exactly as it runs the real one. `screengraph-agent emulator sim
// -avd NAME ...` is the same program.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := zerolog.Nop()
	if os.Getenv("SCREENGRAPH_SIM_DEBUG") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	}
	code := sim.RunEmulator(ctx, os.Args[1:], sim.RunEmulatorConfig{Stdout: os.Stdout, Stderr: os.Stderr, Log: log})
	stop()
	os.Exit(code)
}
