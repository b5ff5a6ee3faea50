package adbdevice

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// Reachable lists the devices a daemon can drive, for the scheduler
// (service.Config.Reachable): the adb server's devices in state "device",
// with their model, product and device names (`adb devices -l`), AVD name
// (getprop ro.boot.qemu.avd_name, else ro.kernel.qemu.avd_name, for
// emulator-P serials) and API level (getprop ro.build.version.sdk), read
// once per device connection (cached by serial and transport id, dropped
// when the connection is gone); and the AVDs the host can boot that no
// running emulator runs (listed at most every AVDsEvery, since listing
// starts a process). Make one with NewReachable; safe for concurrent use.
type Reachable struct {
	adb       *adb.Client
	listAVDs  func(ctx context.Context) ([]string, error)
	avdsEvery time.Duration
	now       func() time.Time

	mu     sync.Mutex
	avds   []string
	avdsAt time.Time
	props  map[string]deviceProps // by serial + "#" + transport id
}

// deviceProps are what getprop says of one device connection.
type deviceProps struct {
	avd      string
	apiLevel int
}

var _ service.Reachability = (*Reachable)(nil)

// AVDsEvery is how long a listing of the host's AVDs is reused (30 s).
const AVDsEvery = 30 * time.Second

// NewReachable lists the devices of the adb server c. listAVDs lists the
// AVD names the host can boot (`emulator -list-avds`; nil: none, a host
// without an SDK); a failing listing counts as none until the next one.
func NewReachable(c *adb.Client, listAVDs func(ctx context.Context) ([]string, error)) *Reachable {
	return &Reachable{adb: c, listAVDs: listAVDs, avdsEvery: AVDsEvery, now: time.Now}
}

// Candidates returns the reachable devices: each adb device in state
// "device" as its serial, then each AVD not running as its name (Serial
// and AVD both the name). Errors: the adb server's, wrapped ("adb server:
// …"); a device whose getprop fails is listed without AVD and API level
// and read again next time.
func (r *Reachable) Candidates(ctx context.Context) ([]service.Candidate, error) {
	infos, err := r.adb.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("adb server: %w", err)
	}
	var out []service.Candidate
	running := map[string]bool{}
	seen := map[string]bool{}
	for _, d := range infos {
		if d.State != parse.StateDevice {
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
func (r *Reachable) propsOf(ctx context.Context, key, serial string) deviceProps {
	r.mu.Lock()
	p, ok := r.props[key]
	r.mu.Unlock()
	if ok {
		return p
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sdk, err := r.adb.ShellOutput(gctx, serial, "getprop ro.build.version.sdk")
	if err != nil {
		return p
	}
	p.apiLevel, _ = strconv.Atoi(strings.TrimSpace(sdk))
	if strings.HasPrefix(serial, "emulator-") {
		for _, prop := range []string{"ro.boot.qemu.avd_name", "ro.kernel.qemu.avd_name"} {
			out, err := r.adb.ShellOutput(gctx, serial, "getprop "+prop)
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

func (r *Reachable) avdNames(ctx context.Context) []string {
	if r.listAVDs == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.avdsAt.IsZero() && r.now().Sub(r.avdsAt) < r.avdsEvery {
		return r.avds
	}
	r.avdsAt = r.now()
	r.avds = nil
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if names, err := r.listAVDs(lctx); err == nil {
		r.avds = names
	}
	return r.avds
}

// BootCompletedProbe is the quarantine's health probe
// (service.Config.Probe): the device answers a shell command and reports
// sys.boot_completed=1. Errors: the adb client's, or one naming the value.
type BootCompletedProbe struct {
	adb *adb.Client
}

var _ service.Prober = (*BootCompletedProbe)(nil)

// NewBootCompletedProbe probes the devices of the adb server c.
func NewBootCompletedProbe(c *adb.Client) *BootCompletedProbe { return &BootCompletedProbe{adb: c} }

// Probe returns nil when getprop sys.boot_completed on serial is 1; else an
// adb error (device_offline, ...) or one naming the value it read.
func (p *BootCompletedProbe) Probe(ctx context.Context, serial string) error {
	out, err := p.adb.ShellOutput(ctx, serial, "getprop sys.boot_completed")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != "1" {
		return fmt.Errorf("sys.boot_completed is %q, not 1", strings.TrimSpace(out))
	}
	return nil
}
