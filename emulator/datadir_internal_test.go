package emulator

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestForDataDir: a host's emulators keep their state beside its store,
// register with its adb server, and run the command given.
func TestForDataDir(t *testing.T) {
	dir := t.TempDir()
	m := ForDataDir(dir, "127.0.0.1:15037", []string{"sg", "emulator", "sim"})
	if m.cfg.StateDir != filepath.Join(dir, "emulators") || m.cfg.ADBServer != "127.0.0.1:15037" ||
		!slices.Equal(m.cfg.Command, []string{"sg", "emulator", "sim"}) {
		t.Errorf("config: %+v", m.cfg)
	}
}
