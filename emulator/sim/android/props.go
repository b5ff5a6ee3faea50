package android

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Boot-phase properties: computed from the time since start, never stored.
const (
	propBootCompleted = "sys.boot_completed"
	propDevBoot       = "dev.bootcomplete"
	propBootAnim      = "init.svc.bootanim"
)

// fingerprintByAPI are build ids of Google emulator images (google_apis
// x86_64). The API 34 one is from a real sdk_gphone64_x86_64 image (see
// fixtures/captures/SOURCES.md); the others follow the same scheme with that
// release's build id.
var buildIDByAPI = map[int]string{
	29: "QSR1.210802.001", 30: "RSR1.201013.001", 31: "SE1A.220203.002", 32: "SE1B.220616.007",
	33: "TE1A.240213.009", 34: "UE1A.230829.036.A2", 35: "AE3A.240806.005",
}

// buildNumberByAPI are the incremental build numbers of the captured images
// (API 33: fixtures/captures/getprop-single/api33-emulator-ro.build.fingerprint.txt).
var buildNumberByAPI = map[int]string{33: "12342917", 34: "11596452"}

func staticProps(p Profile) map[string]string {
	buildID := buildIDByAPI[p.APILevel]
	if buildID == "" {
		buildID = "UE1A.230829.036.A2"
	}
	num := buildNumberByAPI[p.APILevel]
	if num == "" {
		num = "11596452"
	}
	fp := fmt.Sprintf("google/%s/%s:%s/%s/%s:userdebug/dev-keys", p.Product, p.DeviceName, p.Release, buildID, num)
	m := map[string]string{
		"ro.build.version.sdk":            strconv.Itoa(p.APILevel),
		"ro.build.version.release":        p.Release,
		"ro.build.version.codename":       "REL",
		"ro.build.version.preview_sdk":    "0",
		"ro.build.id":                     buildID,
		"ro.build.display.id":             p.Product + "-userdebug " + p.Release + " " + buildID + " " + num + " dev-keys",
		"ro.build.type":                   "userdebug",
		"ro.build.tags":                   "dev-keys",
		"ro.build.fingerprint":            fp,
		"ro.build.characteristics":        "emulator",
		"ro.product.model":                p.Model,
		"ro.product.name":                 p.Product,
		"ro.product.device":               p.DeviceName,
		"ro.product.brand":                "google",
		"ro.product.manufacturer":         "Google",
		"ro.product.board":                "goldfish_x86_64",
		"ro.product.cpu.abi":              "x86_64",
		"ro.product.cpu.abilist":          "x86_64,arm64-v8a",
		"ro.product.cpu.abilist64":        "x86_64,arm64-v8a",
		"ro.product.cpu.abilist32":        "",
		"ro.product.locale":               "en-US",
		"ro.hardware":                     "ranchu",
		"ro.kernel.qemu":                  "1",
		"ro.boot.qemu":                    "1",
		"ro.boot.hardware":                "ranchu",
		"ro.debuggable":                   "1",
		"ro.secure":                       "1",
		"ro.adb.secure":                   "1",
		"ro.sf.lcd_density":               strconv.Itoa(p.Density),
		"ro.serialno":                     "EMULATOR34X1X1X0",
		"ro.boot.serialno":                "EMULATOR34X1X1X0",
		"persist.sys.timezone":            "GMT",
		"persist.sys.usb.config":          "adb",
		"sys.usb.config":                  "adb",
		"service.adb.root":                "0",
		"init.svc.adbd":                   "running",
		"init.svc.zygote":                 "running",
		"gsm.operator.alpha":              "T-Mobile",
		"gsm.sim.state":                   "LOADED",
		"net.bt.name":                     "Android",
		"wifi.interface":                  "wlan0",
		"dalvik.vm.heapsize":              "512m",
		"ro.opengles.version":             "196610",
		"ro.zygote":                       "zygote64",
		"ro.crypto.state":                 "encrypted",
		"ro.treble.enabled":               "true",
		"ro.vndk.version":                 strconv.Itoa(p.APILevel),
		"ro.system.build.version.sdk":     strconv.Itoa(p.APILevel),
		"ro.product.first_api_level":      strconv.Itoa(p.APILevel),
		"ro.build.version.security_patch": "2023-09-05",
	}
	for k, v := range p.Props {
		m[k] = v
	}
	return m
}

// bootAnimLag is how long after sys.boot_completed the boot animation stops
// (the bootanim service exits once the launcher draws; it is last on a real boot).
func (d *Device) bootAnimLag() time.Duration {
	lag := d.profile.BootDuration / 10
	if lag > time.Second {
		lag = time.Second
	}
	return lag
}

// sinceStart is the time since the device started, by its clock.
func (d *Device) sinceStart() time.Duration { return d.now().Sub(d.started) }

// Prop returns a system property's value, or "" when it is unset (as getprop
// prints an empty line). Boot-phase properties follow Profile.BootDuration:
// init.svc.bootanim is "running" until the boot ends, then "stopped";
// sys.boot_completed and dev.bootcomplete are unset until then, then "1".
func (d *Device) Prop(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.propLocked(name)
}

func (d *Device) propLocked(name string) string {
	switch name {
	case propBootCompleted, propDevBoot:
		if d.bootedLocked() {
			return "1"
		}
		return ""
	case propBootAnim:
		if d.bootedLocked() && d.sinceStart() >= d.profile.BootDuration+d.bootAnimLag() {
			return "stopped"
		}
		return "running"
	}
	return d.props[name]
}

func (d *Device) bootedLocked() bool {
	if d.profile.Faults.BootNeverCompletes {
		return false
	}
	if d.sinceStart() < d.profile.BootDuration {
		return false
	}
	if d.onBoot != nil {
		d.onBoot()
	}
	return true
}

// BootCompletedIn is how long after the device's start sys.boot_completed
// turns 1 (0 when it already has), and false when it never will.
func (d *Device) BootCompletedIn() (time.Duration, bool) {
	if d.profile.Faults.BootNeverCompletes {
		return 0, false
	}
	return max(d.profile.BootDuration-d.sinceStart(), 0), true
}

// Booted reports whether sys.boot_completed is "1".
func (d *Device) Booted() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bootedLocked()
}

// systemReady reports whether the framework services (activity, package,
// window) are registered: from half-way through the boot on, as on a real boot
// where system_server publishes them well before sys.boot_completed.
func (d *Device) systemReady() bool {
	return d.sinceStart() >= d.profile.BootDuration/2
}

// APILevel is ro.build.version.sdk.
func (d *Device) APILevel() int { return d.profile.APILevel }

// Banner is the system-identity string adbd sends in its CNXN message:
// "device::ro.product.name=…;ro.product.model=…;ro.product.device=…;features=…".
// The transport may replace the features list with the one it implements.
func (d *Device) Banner() string {
	return fmt.Sprintf("device::ro.product.name=%s;ro.product.model=%s;ro.product.device=%s;features=shell_v2,cmd,stat_v2",
		d.profile.Product, d.profile.Model, d.profile.DeviceName)
}

// allPropsLocked returns every set property, boot-phase ones included.
func (d *Device) allPropsLocked() map[string]string {
	m := make(map[string]string, len(d.props)+3)
	for k, v := range d.props {
		m[k] = v
	}
	for _, k := range []string{propBootCompleted, propDevBoot, propBootAnim} {
		if v := d.propLocked(k); v != "" {
			m[k] = v
		} else {
			delete(m, k)
		}
	}
	return m
}

// setProp sets a property the way `setprop` does: ro.* cannot be changed once set.
func (d *Device) setProp(name, value string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if strings.HasPrefix(name, "ro.") {
		if _, ok := d.props[name]; ok {
			return fmt.Errorf("read-only property")
		}
	}
	switch name {
	case propBootCompleted, propDevBoot, propBootAnim:
		return fmt.Errorf("property is controlled by init")
	}
	d.props[name] = value
	return nil
}

// getprop: no argument prints every property as "[key]: [value]" sorted by key;
// one argument prints its value (an empty line when unset); a second argument
// is the default for an unset property. Format: toybox getprop on API 29-34.
func cmdGetprop(c *Ctx) int {
	d := c.Device
	args := c.Args[1:]
	if len(args) == 0 {
		d.mu.Lock()
		m := d.allPropsLocked()
		d.mu.Unlock()
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, "[%s]: [%s]\n", k, m[k])
		}
		io.WriteString(c.Stdout, b.String())
		return 0
	}
	v := d.Prop(args[0])
	if v == "" && len(args) > 1 {
		v = args[1]
	}
	fmt.Fprintln(c.Stdout, v)
	return 0
}

// setprop NAME VALUE; errors as toybox prints them on stderr.
func cmdSetprop(c *Ctx) int {
	if len(c.Args) != 3 {
		fmt.Fprintln(c.Stderr, "usage: setprop NAME VALUE")
		return 1
	}
	if err := c.Device.setProp(c.Args[1], c.Args[2]); err != nil {
		fmt.Fprintf(c.Stderr, "setprop: failed to set property '%s' to '%s'\n", c.Args[1], c.Args[2])
		return 1
	}
	return 0
}

func init() {
	registerCommand("getprop", cmdGetprop)
	registerCommand("setprop", cmdSetprop)
}
