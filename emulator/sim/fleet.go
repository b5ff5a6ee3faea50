package sim

import (
	"context"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// FleetConfig is `emulator sim`'s: Count simulated emulators of Profile, the
// first on console port ConsolePort (even; its adb port the next), the next
// ones 2 ports further each, registered with the adb server at ADBServer
// (host:port). Out gets one line per emulator started (serial, ports,
// profile).
type FleetConfig struct {
	Count       int
	ConsolePort int
	ADBServer   string
	Profile     android.Profile
	Log         zerolog.Logger
	Out         io.Writer
}

// RunFleet starts fc's emulators and runs them until ctx ends or each was
// killed through its console; then it closes them. An emulator that fails to
// start stops the ones before it and is the error.
func RunFleet(ctx context.Context, fc FleetConfig) error {
	if fc.Count < 1 {
		return fmt.Errorf("--count must be at least 1")
	}
	var emus []*Emulator
	defer func() {
		for _, e := range emus {
			e.Close()
		}
	}()
	for i := 0; i < fc.Count; i++ {
		e, _, err := Launch(ctx, LaunchConfig{
			ConsolePort: fc.ConsolePort + 2*i,
			ADBServer:   fc.ADBServer,
			Profile:     fc.Profile,
			Log:         fc.Log,
		})
		if err != nil {
			return err
		}
		emus = append(emus, e)
		fmt.Fprintf(fc.Out, "%s adb-port=%d console-port=%d profile=%s\n", e.Serial(), e.ADBPort(), e.ConsolePort(), fc.Profile.Name)
	}
	fc.Log.Info().Int("count", len(emus)).Msg("simulated emulators running; SIGINT or SIGTERM stops them")
	select {
	case <-ctx.Done():
	case <-allDone(emus):
	}
	return nil
}

// allDone is closed once every emulator has stopped (each by its console's kill).
func allDone(emus []*Emulator) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for _, e := range emus {
			<-e.Done()
		}
		close(ch)
	}()
	return ch
}
