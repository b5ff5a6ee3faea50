package emulator

import (
	"context"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestAdbEmuKillFallback: `adb -s emulator-P emu kill` (Stop's fallback when the
// console cannot be used) ends the emulator and the device leaves the adb server.
func TestAdbEmuKillFallback(t *testing.T) {
	srv := simtest.StartADBServer(t)
	home, avdHome := t.TempDir(), t.TempDir()
	simtest.CreateAVD(t, avdHome, simtest.AVD{Name: "Pixel_7", Profile: "quickboot"})
	env := append(srv.EmulatorEnv(home, avdHome), "ANDROID_SDK_ROOT="+simtest.BuildEmulator(t), EnvCommand+"=")
	m := New(Config{ADBServer: srv.Addr(), Env: env, StateDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := m.Boot(ctx, device.BootRequest{AVD: "Pixel_7", ColdBoot: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.adbEmuKill(ctx, r.Serial); err != nil {
		t.Fatal(err)
	}
	if !m.waitGone(ctx, r.Serial, 10*time.Second) {
		t.Fatalf("%s still listed after adb emu kill", r.Serial)
	}
	// Reap forgets what is gone.
	if st, _ := m.loadState(); len(st) != 1 {
		t.Fatalf("state %v", st)
	}
	if killed, err := m.Reap(ctx, 0); err != nil || len(killed) != 0 {
		t.Fatalf("reap: %v %v", killed, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := m.loadState()
		if len(st) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state still has %v", st)
		}
		time.Sleep(100 * time.Millisecond)
		m.Reap(ctx, 0)
	}
}
