// Package hostcheck checks what a device host needs to run the agent (the
// `screengraph-agent doctor` command): the adb server and its devices, Appium
// and its uiautomator2 driver, the Android SDK, emulator and AVDs, KVM, the
// data dir, the daemon's ports, and in fleet mode Postgres (with the clock
// skew against it) and NATS. Each check gives ok, warn or fail with what to fix.
package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/emulator"
)

// Status of a check.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Check is one line of the report: {name, status, detail, fix}.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is `doctor --output json`: {"checks": [...]}.
type Report struct {
	Checks []Check `json:"checks"`
}

// Failed reports whether any check failed.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Config is what serve would run with (its flags and config file).
type Config struct {
	ADBServer    string // host:port
	DataDir      string
	AppiumURL    string // an external Appium; "" = the local one serve starts
	AppiumBinary string
	Listen       string // serve's HTTP address
	NATSListen   string // the in-process NATS server's address ("" with NATSURL)
	NATSURL      string
	DatabaseURL  string
	// Env is the environment the SDK lookups read; nil means os.Environ().
	Env []string
	// KVM is the KVM device; "" means /dev/kvm.
	KVM string
	// MaxClockSkew is the skew against Postgres that fails; 0 means 2 s.
	MaxClockSkew time.Duration
}

// Run runs every check; a check that cannot run is a fail with its reason.
// Secrets in details (URL credentials) are redacted.
func Run(ctx context.Context, cfg Config) Report {
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.KVM == "" {
		cfg.KVM = "/dev/kvm"
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = 2 * time.Second
	}
	var r Report
	add := func(cs ...Check) {
		for _, c := range cs {
			c.Detail = agent.RedactString(c.Detail)
			r.Checks = append(r.Checks, c)
		}
	}
	add(checkADB(ctx, cfg)...)
	add(checkAppium(ctx, cfg)...)
	add(checkSDK(ctx, cfg)...)
	add(checkKVM(cfg))
	add(checkDataDir(cfg.DataDir))
	add(checkPorts(cfg)...)
	if cfg.DatabaseURL != "" {
		add(checkPostgres(ctx, cfg)...)
	}
	if cfg.NATSURL != "" {
		add(checkNATS(ctx, cfg.NATSURL))
	}
	return r
}

func checkADB(ctx context.Context, cfg Config) []Check {
	c := adb.New(cfg.ADBServer)
	vctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	v, err := c.ServerVersion(vctx)
	if err != nil {
		return []Check{{Name: "adb server", Status: Fail, Detail: fmt.Sprintf("%s: %v", cfg.ADBServer, err),
			Fix: "start it: adb -P " + port(cfg.ADBServer) + " start-server (Debian: apt-get install adb), or pass --adb-server HOST:PORT"}}
	}
	out := []Check{{Name: "adb server", Status: OK, Detail: fmt.Sprintf("%s, protocol version %d", cfg.ADBServer, v)}}
	dctx, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	devs, err := adbdevice.Describe(dctx, c, 5*time.Second)
	switch {
	case err != nil:
		out = append(out, Check{Name: "devices", Status: Fail, Detail: err.Error(), Fix: "adb devices -l; restart the adb server"})
	case len(devs) == 0:
		out = append(out, Check{Name: "devices", Status: Warn, Detail: "no device on the adb server",
			Fix: "attach a device, start an emulator (screengraph-agent emulator start AVD) or a simulated one (screengraph-agent emulator sim)"})
	default:
		for _, d := range devs {
			ch := Check{Name: "device " + d.Serial, Status: OK, Detail: fmt.Sprintf("state %s, model %s, API %d", d.State, d.Model, d.APILevel)}
			switch {
			case d.State == "unauthorized":
				ch.Status, ch.Fix = Warn, "accept the USB debugging prompt on the device"
			case d.State != "device":
				ch.Status, ch.Fix = Warn, "reconnect it (adb reconnect) or restart the emulator"
			case !d.BootReady:
				ch.Status, ch.Detail, ch.Fix = Warn, ch.Detail+", not boot-ready: "+d.BootDetail, "wait for the boot to finish"
			}
			out = append(out, ch)
		}
	}
	return out
}

func checkAppium(ctx context.Context, cfg Config) []Check {
	if cfg.AppiumURL != "" {
		c, err := appium.New(cfg.AppiumURL, appium.Options{Timeout: 3 * time.Second})
		if err == nil {
			_, err = c.Status(ctx)
		}
		if err != nil {
			return []Check{{Name: "appium", Status: Fail, Detail: fmt.Sprintf("%s: %v", cfg.AppiumURL, err), Fix: "start that Appium server, or drop --appium to let serve start a local one"}}
		}
		return []Check{{Name: "appium", Status: OK, Detail: cfg.AppiumURL + " answers /status (an external server: its drivers are not checked)"}}
	}
	in, err := appium.Locate(appium.LocateConfig{Bin: cfg.AppiumBinary, DataDir: cfg.DataDir})
	if err != nil {
		return []Check{{Name: "appium", Status: Fail, Detail: err.Error(), Fix: "screengraph-agent setup appium --data-dir " + cfg.DataDir}}
	}
	vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := in.Version(vctx)
	if err != nil {
		return []Check{{Name: "appium", Status: Fail, Detail: err.Error(), Fix: "reinstall: screengraph-agent setup appium (Appium 3 needs Node.js 20.19+)"}}
	}
	out := []Check{{Name: "appium", Status: OK, Detail: fmt.Sprintf("%s %s (%s)", in.Bin, v, in.Source)}}
	if v != appium.PinnedAppium {
		out[0].Status, out[0].Fix = Warn, "tested with Appium "+appium.PinnedAppium+": screengraph-agent setup appium"
	}
	home := in.Home
	if home == "" {
		home = "~/.appium"
	}
	dv, err := in.DriverVersion("appium-uiautomator2-driver")
	if err != nil {
		return append(out, Check{Name: "uiautomator2 driver", Status: Fail, Detail: "not installed in APPIUM_HOME " + home,
			Fix: "APPIUM_HOME=" + home + " " + in.Bin + " driver install uiautomator2@" + appium.PinnedUiAutomator2 + " (or screengraph-agent setup appium)"})
	}
	return append(out, Check{Name: "uiautomator2 driver", Status: OK, Detail: dv + " in APPIUM_HOME " + home})
}

func checkSDK(ctx context.Context, cfg Config) []Check {
	sdk := emulator.SDKRoot(cfg.Env)
	if sdk == "" {
		sdk = "/usr/lib/android-sdk" // Debian's adb package
	}
	out := []Check{}
	if st, err := os.Stat(sdk); err != nil || !st.IsDir() {
		out = append(out, Check{Name: "android sdk", Status: Warn, Detail: "no SDK at " + sdk,
			Fix: "set ANDROID_HOME to an Android SDK (only real emulators need one; devices and simulated emulators do not)"})
	} else {
		out = append(out, Check{Name: "android sdk", Status: OK, Detail: sdk})
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	avds, err := emulator.New(emulator.Config{Env: cfg.Env, ADBServer: cfg.ADBServer}).ListAVDs(actx)
	switch {
	case err != nil:
		out = append(out, Check{Name: "emulator", Status: Warn, Detail: err.Error(),
			Fix: "install the SDK's emulator package for real emulators; simulated ones need nothing (screengraph-agent emulator sim)"})
	case len(avds) == 0:
		out = append(out, Check{Name: "emulator", Status: Warn, Detail: "the emulator lists no AVD", Fix: "create one: avdmanager create avd ..."})
	default:
		out = append(out, Check{Name: "emulator", Status: OK, Detail: "AVDs: " + strings.Join(avds, ", ")})
	}
	return out
}

func checkKVM(cfg Config) Check {
	f, err := os.OpenFile(cfg.KVM, os.O_RDWR, 0)
	if err != nil {
		return Check{Name: "kvm", Status: Warn, Detail: fmt.Sprintf("%s: %v", cfg.KVM, err),
			Fix: "real x86 emulators need KVM: enable virtualization and add the user to the kvm group (simulated emulators do not need it)"}
	}
	f.Close()
	return Check{Name: "kvm", Status: OK, Detail: cfg.KVM + " is readable and writable"}
}

func checkDataDir(dir string) Check {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Check{Name: "data dir", Status: Fail, Detail: err.Error(), Fix: "pass a writable --data-dir"}
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return Check{Name: "data dir", Status: Fail, Detail: err.Error(), Fix: "make " + dir + " writable by this user, or pass another --data-dir"}
	}
	f.Close()
	os.Remove(f.Name())
	st, err := os.Stat(dir)
	if err != nil {
		return Check{Name: "data dir", Status: Fail, Detail: err.Error()}
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return Check{Name: "data dir", Status: Warn, Detail: fmt.Sprintf("%s is writable, mode %04o: other users can read the store and artifacts", dir, perm),
			Fix: "chmod 700 " + dir}
	}
	return Check{Name: "data dir", Status: OK, Detail: fmt.Sprintf("%s is writable, mode %04o", dir, st.Mode().Perm())}
}

// daemonRunning reports whether a daemon holds the data dir's lock.
func daemonRunning(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "daemon.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

func checkPorts(cfg Config) []Check {
	running := daemonRunning(cfg.DataDir)
	var out []Check
	for _, p := range []struct{ name, addr string }{{"http port", cfg.Listen}, {"nats port", cfg.NATSListen}} {
		if p.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", p.addr)
		switch {
		case err == nil:
			ln.Close()
			out = append(out, Check{Name: p.name, Status: OK, Detail: p.addr + " is free"})
		case running && errors.Is(err, syscall.EADDRINUSE):
			out = append(out, Check{Name: p.name, Status: OK, Detail: p.addr + " is in use by the daemon of this data dir"})
		default:
			out = append(out, Check{Name: p.name, Status: Fail, Detail: fmt.Sprintf("%s: %v", p.addr, err),
				Fix: "stop what listens there (ss -ltnp), or pass another address"})
		}
	}
	return out
}

func checkPostgres(ctx context.Context, cfg Config) []Check {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, cfg.DatabaseURL)
	if err != nil {
		return []Check{{Name: "postgres", Status: Fail, Detail: err.Error(), Fix: "check --database-url and that Postgres accepts this host"}}
	}
	defer conn.Close(context.Background())
	before := time.Now()
	var dbNow time.Time
	var version string
	if err := conn.QueryRow(cctx, "SELECT now(), current_setting('server_version')").Scan(&dbNow, &version); err != nil {
		return []Check{{Name: "postgres", Status: Fail, Detail: err.Error()}}
	}
	after := time.Now()
	out := []Check{{Name: "postgres", Status: OK, Detail: "reachable, version " + version}}
	// now() is the transaction's start: between before and after.
	mid := before.Add(after.Sub(before) / 2)
	skew := mid.Sub(dbNow)
	if skew < 0 {
		skew = -skew
	}
	ch := Check{Name: "clock skew", Status: OK, Detail: fmt.Sprintf("%v against Postgres (round trip %v)", skew.Round(time.Millisecond), after.Sub(before).Round(time.Millisecond))}
	if skew > cfg.MaxClockSkew {
		ch.Status, ch.Fix = Fail, "synchronize this host's clock (chrony, systemd-timesyncd): leases expire by the store's clock"
	}
	return append(out, ch)
}

func checkNATS(ctx context.Context, url string) Check {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return Check{Name: "nats", Status: Fail, Detail: err.Error(), Fix: "check --nats-url and the credentials in it"}
	}
	defer nc.Close()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		return Check{Name: "nats", Status: Fail, Detail: err.Error()}
	}
	return Check{Name: "nats", Status: OK, Detail: "connected to " + nc.ConnectedUrlRedacted() + ", server " + nc.ConnectedServerVersion()}
}

func port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "5037"
	}
	return p
}
