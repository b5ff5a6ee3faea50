package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// reachable lists the devices this daemon can drive, for the scheduler
// (service.Candidate): the adb server's devices in state "device", with
// their model, product and device names (`adb devices -l`), AVD name and API
// level (getprop, read once per device connection: cached by serial and
// transport id), and the AVD names its emulator SDK can boot that are not
// running (read at most every 30 s: `emulator -list-avds` starts a process).
type reachable struct {
	h *host

	mu      sync.Mutex
	avds    []string
	avdsAt  time.Time
	props   map[string]deviceProps // by serial + "#" + transport id
	dataDir string
	adbAddr string
}

// deviceProps are what getprop says of one device connection.
type deviceProps struct {
	avd      string
	apiLevel int
}

func (r *reachable) devices(ctx context.Context) ([]service.Candidate, error) {
	infos, err := r.h.adb.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("adb server: %w", err)
	}
	var out []service.Candidate
	running := map[string]bool{}
	seen := map[string]bool{}
	for _, d := range infos {
		if d.State != adb.StateDevice {
			continue
		}
		key := d.Serial + "#" + strconv.FormatInt(d.TransportID, 10)
		seen[key] = true
		p := r.propsOf(ctx, key, d.Serial)
		if p.avd != "" {
			running[p.avd] = true
		}
		out = append(out, service.Candidate{Serial: d.Serial, AVD: p.avd, Model: d.Model, Product: d.Product,
			Device: d.Device, APILevel: p.apiLevel})
	}
	r.mu.Lock()
	for k := range r.props {
		if !seen[k] {
			delete(r.props, k) // gone: a device that comes back is read again
		}
	}
	r.mu.Unlock()
	for _, n := range r.avdNames(ctx) {
		if !running[n] {
			out = append(out, service.Candidate{Serial: n, AVD: n})
		}
	}
	return out, nil
}

// propsOf reads a device's AVD name and API level once per connection; a
// device that does not answer (yet) is read again at the next round.
func (r *reachable) propsOf(ctx context.Context, key, serial string) deviceProps {
	r.mu.Lock()
	p, ok := r.props[key]
	r.mu.Unlock()
	if ok {
		return p
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sdk, err := r.h.adb.ShellOutput(gctx, serial, "getprop ro.build.version.sdk")
	if err != nil {
		return p
	}
	p.apiLevel, _ = strconv.Atoi(strings.TrimSpace(sdk))
	if strings.HasPrefix(serial, "emulator-") {
		for _, prop := range []string{"ro.boot.qemu.avd_name", "ro.kernel.qemu.avd_name"} {
			out, err := r.h.adb.ShellOutput(gctx, serial, "getprop "+prop)
			if err != nil {
				return p
			}
			if p.avd = strings.TrimSpace(out); p.avd != "" {
				break
			}
		}
	}
	r.mu.Lock()
	if r.props == nil {
		r.props = map[string]deviceProps{}
	}
	r.props[key] = p
	r.mu.Unlock()
	return p
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
