package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// loadProfile reads a profile file, or a shipped profile by name.
func loadProfile(ref string) (android.Profile, error) {
	if _, err := os.Stat(ref); err == nil {
		return android.LoadProfile(ref)
	}
	b, err := fixtures.Profile(ref)
	if err != nil {
		return android.Profile{}, fmt.Errorf("profile %q: no such file, and no shipped profile of that name (shipped: %s)", ref, strings.Join(fixtures.ProfileNames(), ", "))
	}
	return android.ParseProfile(ref, b)
}

type simCmd struct {
	Count     int    `help:"How many simulated emulators to start." default:"1"`
	Port      int    `help:"Console port of the first emulator (even); its adb port is PORT+1 and its serial emulator-PORT. The next ones take PORT+2, PORT+4, …" default:"5554"`
	Profile   string `help:"Device profile: a YAML/JSON file, or the name of a shipped one (default, api29, api30, api33, slow-boot, never-boots)." default:"default"`
	ADBServer string `help:"adb server HOST:PORT to register with (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
}

func (s *simCmd) Run(ctx context.Context, g *Globals) error {
	log := g.logger()
	prof, err := loadProfile(s.Profile)
	if err != nil {
		return err
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
