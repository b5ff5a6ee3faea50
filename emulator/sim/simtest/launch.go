package simtest

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// Launch starts a simulated emulator with profile p registered with srv, on a
// free port pair, and closes it when the test ends. It does not wait for the
// device state: faults may make "device" the wrong thing to wait for.
func Launch(t testing.TB, srv *ADBServer, p android.Profile) (*sim.Emulator, *android.Device) {
	t.Helper()
	e, dev, err := sim.Launch(context.Background(), sim.LaunchConfig{ADBServer: srv.Addr(), Profile: p, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dev
}

// Profile returns a shipped profile (fixtures/profiles/<name>.yaml).
func Profile(t testing.TB, name string) android.Profile {
	t.Helper()
	b, err := fixtures.Profile(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := android.ParseProfile(name, b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// LaunchWith starts a simulated emulator from cfg, registered with srv (its
// ADBServer is set to srv), on a free port pair unless cfg.ConsolePort is
// set, and closes it when the test ends. Use it for the console's settings
// (AVDName, ConsoleTokenPath, ReadOnly, Snapshots).
func LaunchWith(t testing.TB, srv *ADBServer, cfg sim.LaunchConfig) (*sim.Emulator, *android.Device) {
	t.Helper()
	cfg.ADBServer = srv.Addr()
	e, dev, err := sim.Launch(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, dev
}
