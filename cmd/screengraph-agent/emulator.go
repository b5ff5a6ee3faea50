package main

import (
	"context"
	"fmt"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

type simCmd struct {
	Count     int    `help:"How many simulated emulators to start." default:"1"`
	Port      int    `help:"Console port of the first emulator (even); its adb port is PORT+1 and its serial emulator-PORT. The next ones take PORT+2, PORT+4, …" default:"5554"`
	Profile   string `help:"Device profile (YAML or JSON); default: a booted API 34 emulator with a demo app." type:"existingfile"`
	ADBServer string `help:"adb server HOST:PORT to register with (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
}

func (s *simCmd) Run(ctx context.Context, g *Globals) error {
	log := g.logger()
	prof := android.DefaultProfile()
	if s.Profile != "" {
		p, err := android.LoadProfile(s.Profile)
		if err != nil {
			return err
		}
		prof = p
	}
	if s.Count < 1 {
		return fmt.Errorf("--count must be at least 1")
	}
	var emus []*sim.Emulator
	defer func() {
		for _, e := range emus {
			e.Close()
		}
	}()
	for i := 0; i < s.Count; i++ {
		e, _, err := sim.Launch(ctx, sim.LaunchConfig{
			ConsolePort: s.Port + 2*i,
			ADBServer:   adbAddr(s.ADBServer),
			Profile:     prof,
			Log:         log,
		})
		if err != nil {
			return err
		}
		emus = append(emus, e)
		fmt.Printf("%s adb-port=%d profile=%s\n", e.Serial(), e.ADBPort(), prof.Name)
	}
	log.Info().Int("count", len(emus)).Msg("simulated emulators running; SIGINT or SIGTERM stops them")
	<-ctx.Done()
	return nil
}
