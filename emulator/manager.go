package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
)

// Console port range of the emulator: even ports 5554..5682 (the emulator
// refuses -port outside it; adb scans 5555..5585 for the adb ports).
const (
	FirstConsolePort = 5554
	LastConsolePort  = 5682
)

// EnvConsolePorts names another console port range, "FIRST-LAST" (even
// ports), for emulators that accept it: tests running the simulated
// emulator in place of the real binary use ports above 20000, so they never
// take a developer's 5554..5584.
const EnvConsolePorts = "SCREENGRAPH_EMULATOR_PORTS"

// consolePorts is the range boot scans: $SCREENGRAPH_EMULATOR_PORTS, else
// FirstConsolePort..LastConsolePort.
func (m *Manager) consolePorts() (int, int) {
	if v := getenv(m.cfg.Env, EnvConsolePorts); v != "" {
		a, b, ok := strings.Cut(v, "-")
		first, err1 := strconv.Atoi(strings.TrimSpace(a))
		last, err2 := strconv.Atoi(strings.TrimSpace(b))
		if ok && err1 == nil && err2 == nil && first > 0 && first <= last && last < 65535 {
			return first + first%2, last
		}
	}
	return FirstConsolePort, LastConsolePort
}

// Config configures a Manager.
type Config struct {
	// Command replaces the emulator binary (e.g. {"/tmp/x/screengraph-agent",
	// "emulator", "sim"}); empty means $SCREENGRAPH_EMULATOR, then
	// <SDKRoot>/emulator/emulator, then `emulator` on PATH.
	Command []string
	// SDKRoot overrides $ANDROID_SDK_ROOT / $ANDROID_HOME.
	SDKRoot string
	// ADBServer is the adb server ("127.0.0.1:5037"); emulators are started
	// with its port in ANDROID_ADB_SERVER_PORT so they register with it.
	ADBServer string
	// Env is the environment of emulator processes and of the AVD/home
	// lookups; nil means the process environment.
	Env []string
	// StateDir keeps emulators.json (the emulators this host booted, with
	// their last use) and the emulator-P.log files; "" means a directory
	// under os.TempDir.
	StateDir string
	// PollInterval spaces the boot readiness probes; 0 means 50 ms (a probe
	// is three adb round trips, about 1 ms on a local emulator).
	PollInterval time.Duration
	// Now is the clock of the state file's times; nil means time.Now.
	Now func() time.Time
}

// Manager is the emulator lifecycle of one host. It implements device.Emulators.
type Manager struct {
	cfg  Config
	adb  *adb.Client
	mu   sync.Mutex
	busy map[int]bool // console ports being booted by this process
	avds struct {
		at    time.Time
		names []string
	}
}

var _ device.Emulators = (*Manager)(nil)

// New returns a Manager for cfg.
func New(cfg Config) *Manager {
	if cfg.ADBServer == "" {
		cfg.ADBServer = "127.0.0.1:5037"
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), "screengraph-emulators")
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	return &Manager{cfg: cfg, adb: adb.New(cfg.ADBServer), busy: map[int]bool{}}
}

func (m *Manager) now() time.Time {
	if m.cfg.Now != nil {
		return m.cfg.Now()
	}
	return time.Now()
}

// env is the emulator processes' environment: Config.Env with
// ANDROID_ADB_SERVER_PORT set to the adb server's port.
func (m *Manager) env() []string {
	env := m.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	if _, port, err := net.SplitHostPort(m.cfg.ADBServer); err == nil {
		env = setenv(env, "ANDROID_ADB_SERVER_PORT", port)
	}
	return env
}

// HasAVD reports whether name is an AVD: <AVD home>/NAME.ini exists, else
// it is one of ListAVDs (cached for 5 s); false without error on a host
// without an emulator binary and AVDs.
func (m *Manager) HasAVD(ctx context.Context, name string) (bool, error) {
	if name == "" || strings.HasPrefix(name, "emulator-") || strings.Contains(name, ":") {
		return false, nil // a serial, not an AVD name
	}
	// Fast path: the AVD home holds NAME.ini, which is what `emulator
	// -list-avds` lists (it scans the same directory); spawning the emulator
	// costs 50+ ms per run.
	if fileExists(filepath.Join(AVDHome(m.cfg.Env), name+".ini")) {
		return true, nil
	}
	m.mu.Lock()
	names, fresh := m.avds.names, m.now().Sub(m.avds.at) < 5*time.Second
	m.mu.Unlock()
	if !fresh {
		var err error
		if names, err = m.ListAVDs(ctx); err != nil {
			if agent.Classify(err).Code == CodeEmulatorNotFound {
				return false, nil // no SDK emulator on this host: no AVDs
			}
			return false, err
		}
		m.mu.Lock()
		m.avds.names, m.avds.at = names, m.now()
		m.mu.Unlock()
	}
	for _, n := range names {
		if n == name {
			return true, nil
		}
	}
	return false, nil
}

// Instance is one running emulator the adb server knows.
type Instance struct {
	Serial string `json:"serial"`
	// State is the adb state word (device, offline, ...).
	State string `json:"state"`
	// AVD is the console's `avd name`; "" when the console did not answer.
	AVD string `json:"avd,omitempty"`
	// Booted is set for emulators this host booted (from the state file).
	Booted *Booted `json:"booted,omitempty"`
}

// Instances lists the emulator-P devices of the adb server with the AVD each
// runs (console `avd name`, asked in parallel).
func (m *Manager) Instances(ctx context.Context) ([]Instance, error) {
	infos, err := m.adb.Devices(ctx)
	if err != nil {
		return nil, adbdevice.AgentError(err)
	}
	token, _ := ReadToken(homeDir(m.cfg.Env))
	st, _ := m.loadState()
	var out []Instance
	for _, in := range infos {
		if _, ok := ConsolePort(in.Serial); ok {
			out = append(out, Instance{Serial: in.Serial, State: string(in.State)})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		if b, ok := st[out[i].Serial]; ok {
			out[i].Booted = &b
		}
		wg.Add(1)
		go func(in *Instance) {
			defer wg.Done()
			port, _ := ConsolePort(in.Serial)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			c, err := DialConsole(cctx, port, token)
			if err != nil {
				return
			}
			defer c.Close()
			in.AVD, _ = c.AVDName(cctx)
		}(&out[i])
	}
	wg.Wait()
	return out, nil
}

// Running returns the serials of the running emulators of avd, online first.
func (m *Manager) Running(ctx context.Context, avd string) ([]string, error) {
	ins, err := m.Instances(ctx)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(ins, func(i, j int) bool {
		oi, oj := ins[i].State == string(parse.StateDevice), ins[j].State == string(parse.StateDevice)
		if oi != oj {
			return oi
		}
		return ins[i].Serial < ins[j].Serial
	})
	var out []string
	for _, in := range ins {
		if in.AVD == avd {
			out = append(out, in.Serial)
		}
	}
	return out, nil
}

// ConsolePort is P of an "emulator-P" serial.
func ConsolePort(serial string) (int, bool) {
	s, ok := strings.CutPrefix(serial, "emulator-")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(s)
	return p, err == nil && p > 0
}

// Console opens an authenticated console session to emulator-P.
func (m *Manager) Console(ctx context.Context, serial string) (*Console, error) {
	port, ok := ConsolePort(serial)
	if !ok {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "%q is not an emulator serial (emulator-PORT)", serial)
	}
	token, err := ReadToken(homeDir(m.cfg.Env))
	if err != nil {
		return nil, agent.Wrap(agent.ErrPermission, err, "console token")
	}
	return DialConsole(ctx, port, token)
}

// Stop kills emulator-P: the console's `kill`, else `adb -s emulator-P emu
// kill`, else SIGTERM to the process this host started; then it waits (up to
// 15 s) for the serial to leave the adb server's list. Not running is
// device_not_found.
func (m *Manager) Stop(ctx context.Context, serial string) error {
	if _, ok := ConsolePort(serial); !ok {
		return agent.Errorf(agent.ErrInvalidRequest, "%q is not an emulator serial (emulator-PORT)", serial)
	}
	st, _ := m.loadState()
	b, ours := st[serial]
	var how []string
	killed := false
	if c, err := m.Console(ctx, serial); err == nil {
		kerr := c.Kill(ctx)
		c.Close()
		if kerr == nil {
			killed = true
		} else {
			how = append(how, "console kill: "+kerr.Error())
		}
	} else {
		how = append(how, "console: "+err.Error())
	}
	if !killed {
		if err := m.adbEmuKill(ctx, serial); err == nil {
			killed = true
		} else {
			how = append(how, "adb emu kill: "+err.Error())
		}
	}
	if !killed && ours && b.PID > 0 && processAlive(b.PID) {
		if err := syscall.Kill(b.PID, syscall.SIGTERM); err == nil {
			killed = true
		} else {
			how = append(how, fmt.Sprintf("SIGTERM %d: %v", b.PID, err))
		}
	}
	if !killed {
		if ok, _ := m.known(ctx, serial); !ok {
			m.forget(serial)
			return agent.Errorf(agent.ErrDeviceNotFound, "%s is not running (%s)", serial, strings.Join(how, "; "))
		}
		return agent.Errorf(agent.ErrProcess, "could not kill %s: %s", serial, strings.Join(how, "; "))
	}
	gone := m.waitGone(ctx, serial, 15*time.Second)
	m.forget(serial)
	if !gone {
		return agent.Errorf(agent.ErrProcess, "%s was told to exit but the adb server still lists it after 15s", serial)
	}
	return nil
}

// adbEmuKill runs `adb -s SERIAL emu kill` against the manager's adb server.
func (m *Manager) adbEmuKill(ctx context.Context, serial string) error {
	bin := ""
	if sdk := SDKRoot(m.cfg.Env); sdk != "" {
		if p := filepath.Join(sdk, "platform-tools", "adb"); fileExists(p) {
			bin = p
		}
	}
	if bin == "" {
		p, err := exec.LookPath("adb")
		if err != nil {
			return err
		}
		bin = p
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := exec.CommandContext(cctx, bin, "-s", serial, "emu", "kill")
	c.Env = m.env()
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	if !strings.Contains(string(out), "OK") {
		return fmt.Errorf("answer %q", strings.TrimSpace(string(out)))
	}
	return nil
}

func (m *Manager) known(ctx context.Context, serial string) (bool, error) {
	infos, err := m.adb.Devices(ctx)
	if err != nil {
		return false, err
	}
	for _, in := range infos {
		if in.Serial == serial {
			return true, nil
		}
	}
	return false, nil
}

func (m *Manager) waitGone(ctx context.Context, serial string, bound time.Duration) bool {
	until := time.Now().Add(bound)
	for time.Now().Before(until) {
		if ok, err := m.known(ctx, serial); err == nil && !ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// Booted is what the state file keeps of an emulator this host booted.
type Booted struct {
	AVD      string    `json:"avd"`
	PID      int       `json:"pid"`
	ReadOnly bool      `json:"readOnly,omitempty"`
	Log      string    `json:"log,omitempty"`
	BootedAt time.Time `json:"bootedAt"`
	LastUsed time.Time `json:"lastUsed"`
}

// stateMu serializes this process's state file writes; an flock(2) of
// emulators.json.lock serializes them with other processes' (serve and a
// one-shot run on one host), so neither loses the other's entries.
var stateMu sync.Mutex

func (m *Manager) statePath() string { return filepath.Join(m.cfg.StateDir, "emulators.json") }

func (m *Manager) loadState() (map[string]Booted, error) {
	st := map[string]Booted{}
	b, err := os.ReadFile(m.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return map[string]Booted{}, nil // a torn file: start over
	}
	return st, nil
}

func (m *Manager) updateState(fn func(map[string]Booted)) error {
	stateMu.Lock()
	defer stateMu.Unlock()
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(m.statePath()+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close() // drops the flock
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	st, _ := m.loadState()
	fn(st)
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := m.statePath() + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, m.statePath())
}

func (m *Manager) forget(serial string) {
	_ = m.updateState(func(st map[string]Booted) { delete(st, serial) })
}

// Touch restarts serial's idle clock when this host booted it.
func (m *Manager) Touch(_ context.Context, serial string) error {
	return m.updateState(func(st map[string]Booted) {
		if b, ok := st[serial]; ok {
			b.LastUsed = m.now()
			st[serial] = b
		}
	})
}

// Reap kills the emulators this host booted that no run used for idle
// (policy emulator.idleKillMinutes; nothing when 0), and forgets those that
// are gone. It returns the serials it killed.
func (m *Manager) Reap(ctx context.Context, idle time.Duration) ([]string, error) {
	st, err := m.loadState()
	if err != nil {
		return nil, err
	}
	infos, err := m.adb.Devices(ctx)
	if err != nil {
		return nil, adbdevice.AgentError(err)
	}
	present := map[string]bool{}
	for _, in := range infos {
		present[in.Serial] = true
	}
	var killed []string
	var errs []error
	for serial, b := range st {
		if !present[serial] && (b.PID <= 0 || !processAlive(b.PID)) {
			m.forget(serial)
			continue
		}
		if idle > 0 && m.now().Sub(b.LastUsed) >= idle {
			if err := m.Stop(ctx, serial); err != nil {
				errs = append(errs, err)
				continue
			}
			killed = append(killed, serial)
		}
	}
	sort.Strings(killed)
	return killed, errors.Join(errs...)
}

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ForDataDir is the emulator lifecycle of a host whose data dir is dataDir
// and adb server adbServer (host:port): its state (the emulators this host
// booted, their logs) in <dataDir>/emulators. command replaces the SDK's
// emulator binary when not empty (ParseCommand's result); empty means
// $SCREENGRAPH_EMULATOR, then $ANDROID_SDK_ROOT / $ANDROID_HOME's, looked up
// at each use (a malformed $SCREENGRAPH_EMULATOR fails that use).
func ForDataDir(dataDir, adbServer string, command []string) *Manager {
	return New(Config{Command: command, ADBServer: adbServer, StateDir: filepath.Join(dataDir, "emulators")})
}
