package adbdevice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
// emulator-P serials), API level (getprop ro.build.version.sdk) and
// identity (DeviceID), read once per device connection (cached by serial
// and transport id, dropped when the connection is gone); and the AVDs the
// host can boot that no running emulator runs (listed at most every
// AVDsEvery, since listing starts a process). It is the daemon's
// service.DeviceIdentity too. Make one with NewReachable; safe for
// concurrent use.
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
	id       string // DeviceID; "" until the device answered
}

var (
	_ service.Reachability   = (*Reachable)(nil)
	_ service.DeviceIdentity = (*Reachable)(nil)
)

// AVDsEvery is how long a listing of the host's AVDs is reused (30 s).
const AVDsEvery = 30 * time.Second

// NewReachable lists the devices of the adb server c. listAVDs lists the
// AVD names the host can boot (`emulator -list-avds`; nil: none, a host
// without an SDK); a failing listing counts as none until the next one.
func NewReachable(c *adb.Client, listAVDs func(ctx context.Context) ([]string, error)) *Reachable {
	return &Reachable{adb: c, listAVDs: listAVDs, avdsEvery: AVDsEvery, now: time.Now}
}

// Candidates returns the reachable devices: each adb device in state
// "device" as its serial, with its identity (DeviceID), then each AVD not
// running as its name (Serial and AVD both the name, no ID). Errors: the
// adb server's, wrapped ("adb server: …"); a device whose identity cannot
// be read (it does not answer getprop yet) is left out and read again next
// time: keyed otherwise, its lease would not be the one other daemons take.
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
		if p.id == "" {
			continue
		}
		out = append(out, service.Candidate{Serial: d.Serial, ID: p.id, AVD: p.avd, Model: d.Model, Product: d.Product,
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

// DeviceID implements service.DeviceIdentity: the identity of the device
// with adb serial serial in state "device", read once per connection (see
// identity). Errors: service.ErrNoDevice when the adb server lists no such
// device in state "device"; the adb server's; one saying the device did not
// answer (it is asked again next time).
func (r *Reachable) DeviceID(ctx context.Context, serial string) (string, error) {
	infos, err := r.adb.Devices(ctx)
	if err != nil {
		return "", fmt.Errorf("adb server: %w", err)
	}
	for _, d := range infos {
		if d.Serial != serial || d.State != parse.StateDevice {
			continue
		}
		if p := r.propsOf(ctx, d.Serial+"#"+strconv.FormatInt(d.TransportID, 10), d.Serial); p.id != "" {
			return p.id, nil
		}
		return "", fmt.Errorf("device %s: its properties could not be read yet", serial)
	}
	return "", fmt.Errorf("device %s: %w", serial, service.ErrNoDevice)
}

// identityCmd prints what identifies a device whoever asks: its serial
// number properties (a phone's hardware serial) and the android_id the
// device generated at its first boot (an emulator's, whose serial number
// properties its image fixes).
const identityCmd = "getprop ro.serialno; getprop ro.boot.serialno; settings get secure android_id"

// identity is a device's id: 12 hex digits of a SHA-256 over identityCmd's
// three lines and the AVD name ("" but for emulators), the same for every
// daemon that reaches the device. "" until the device prints all of it: a
// device still booting answers getprop before its settings provider, and
// an id read without the android_id would differ from the one read after.
func identity(out, avd string) string {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(out, "\r\n", "\n"), "\n"), "\n")
	if len(lines) != 3 {
		return ""
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	if lines[2] == "" || lines[2] == "null" {
		return ""
	}
	sum := sha256.Sum256([]byte("screengraph device\x00" + strings.Join(lines, "\x00") + "\x00" + avd))
	return hex.EncodeToString(sum[:6])
}

// propsOf reads a device's AVD name, API level and identity once per
// connection; a device that does not answer (yet) is read again at the
// next round.
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
	out, err := r.adb.ShellOutput(gctx, serial, identityCmd)
	if err != nil {
		return p
	}
	if p.id = identity(out, p.avd); p.id == "" {
		return p
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
