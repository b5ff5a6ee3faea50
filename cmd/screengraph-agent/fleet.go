package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
)

// reachable lists the device names this daemon can drive, for the fleet
// scheduler: the serials its adb server has in state "device", and the AVD
// names its emulator SDK can boot (read at most every 30 s: `emulator
// -list-avds` starts a process).
type reachable struct {
	h *host

	mu      sync.Mutex
	avds    []string
	avdsAt  time.Time
	dataDir string
	adbAddr string
}

func (r *reachable) devices(ctx context.Context) (map[string]bool, error) {
	infos, err := r.h.adb.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("adb server: %w", err)
	}
	out := map[string]bool{}
	for _, d := range infos {
		if d.State == adb.StateDevice {
			out[d.Serial] = true
		}
	}
	for _, n := range r.avdNames(ctx) {
		out[n] = true
	}
	return out, nil
}

func (r *reachable) avdNames(ctx context.Context) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.avdsAt) < 30*time.Second {
		return r.avds
	}
	r.avdsAt = time.Now()
	r.avds = nil
	m, err := newEmulators(r.dataDir, r.adbAddr, "")
	if err != nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if names, err := m.ListAVDs(lctx); err == nil {
		r.avds = names
	}
	return r.avds
}

// probeDevice is the quarantine's health probe: the device answers a shell
// command and reports sys.boot_completed=1.
func probeDevice(c *adb.Client) func(ctx context.Context, serial string) error {
	return func(ctx context.Context, serial string) error {
		out, err := c.ShellOutput(ctx, serial, "getprop sys.boot_completed")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "1" {
			return fmt.Errorf("sys.boot_completed is %q, not 1", strings.TrimSpace(out))
		}
		return nil
	}
}
