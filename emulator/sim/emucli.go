package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// EmulatorOptions are the flags of the real `emulator` binary that the
// simulator honours when it runs in its place (RunEmulator). Flags are single
// dash like the real ones (`-avd NAME`, `-port 5554`, `-no-window`); `@NAME`
// is `-avd NAME`.
type EmulatorOptions struct {
	AVD            string
	Port           int // console port (even); 0: the first free pair from 5554
	NoWindow       bool
	NoAudio        bool
	NoBootAnim     bool
	ReadOnly       bool
	NoSnapshotSave bool
	NoSnapshotLoad bool
	NoSnapshot     bool
	WipeData       bool
	GPU            string
	Accel          string
	ListAVDs       bool
	// Ignored are the other flags given (accepted, no effect), with their
	// values; Unknown those of them that are not real emulator options.
	Ignored []string
	Unknown []string
}

// realEmulatorFlags are the emulator's own options, true for those followed by
// a value: android/android-emu/android/cmdline-options.h, kept as
// fixtures/captures/emulator/cmdline-options.txt (a test checks they agree).
// `-verbose` and `-debug <tags>` are parsed apart from that table by the real
// emulator (android_parse_debug_tags_option).
var realEmulatorFlags = map[string]bool{
	"list-avds":               false,
	"sysdir":                  true,
	"system":                  true,
	"vendor":                  true,
	"writable-system":         false,
	"delay-adb":               false,
	"datadir":                 true,
	"kernel":                  true,
	"ramdisk":                 true,
	"image":                   true,
	"initdata":                true,
	"data":                    true,
	"encryption-key":          true,
	"logcat-output":           true,
	"partition-size":          true,
	"cache":                   true,
	"cache-size":              true,
	"no-cache":                false,
	"nocache":                 false,
	"sdcard":                  true,
	"quit-after-boot":         true,
	"qemu-top-dir":            true,
	"monitor-adb":             true,
	"snapstorage":             true,
	"no-snapstorage":          false,
	"snapshot":                true,
	"no-snapshot":             false,
	"no-snapshot-save":        false,
	"no-snapshot-load":        false,
	"snapshot-list":           false,
	"no-snapshot-update-time": false,
	"wipe-data":               false,
	"avd":                     true,
	"skindir":                 true,
	"skin":                    true,
	"no-skin":                 false,
	"noskin":                  false,
	"memory":                  true,
	"ui-only":                 true,
	"id":                      true,
	"cores":                   true,
	"accel":                   true,
	"no-accel":                false,
	"ranchu":                  false,
	"engine":                  true,
	"netspeed":                true,
	"netdelay":                true,
	"netfast":                 false,
	"code-profile":            true,
	"show-kernel":             false,
	"shell":                   false,
	"no-jni":                  false,
	"nojni":                   false,
	"logcat":                  true,
	"use-system-libs":         false,
	"bluetooth":               true,
	"stdouterr-file":          true,
	"no-audio":                false,
	"noaudio":                 false,
	"audio":                   true,
	"radio":                   true,
	"port":                    true,
	"ports":                   true,
	"onion":                   true,
	"onion-alpha":             true,
	"onion-rotation":          true,
	"dpi-device":              true,
	"scale":                   true,
	"wifi-client-port":        true,
	"wifi-server-port":        true,
	"http-proxy":              true,
	"timezone":                true,
	"change-language":         true,
	"change-country":          true,
	"change-locale":           true,
	"dns-server":              true,
	"net-tap":                 true,
	"net-tap-script-up":       true,
	"net-tap-script-down":     true,
	"cpu-delay":               true,
	"no-boot-anim":            false,
	"no-window":               false,
	"no-sim":                  false,
	"lowram":                  false,
	"version":                 false,
	"no-passive-gps":          false,
	"read-only":               false,
	"is-restart":              true,
	"report-console":          true,
	"gps":                     true,
	"shell-serial":            true,
	"tcpdump":                 true,
	"bootchart":               true,
	"charmap":                 true,
	"studio-params":           true,
	"prop":                    true,
	"shared-net-id":           true,
	"nand-limits":             true,
	"gpu":                     true,
	"camera-back":             true,
	"camera-front":            true,
	"webcam-list":             false,
	"virtualscene-poster":     true,
	"screen":                  true,
	"selinux":                 true,
	"unix-pipe":               true,
	"fixed-scale":             false,
	"wait-for-debugger":       false,
	"skip-adb-auth":           false,
	"metrics-to-console":      false,
	"metrics-to-file":         true,
	"detect-image-hang":       false,
	"feature":                 true,
	"sim-access-rules-file":   true,
	"phone-number":            true,
	"acpi-config":             true,
	"fuchsia":                 false,
	"window-size":             true,
	"allow-host-audio":        false,
	"restart-when-stalled":    false,
	"perf-stat":               true,
	"share-vid":               false,
	"grpc":                    true,
	"turncfg":                 true,
	"rtcfps":                  true,
	"multidisplay":            true,
	"verbose":                 false, "debug": true,
}

// RealEmulatorFlag says whether -name is one of the real emulator's options
// (underscores count as dashes, as the emulator reads them) and whether a
// value follows it. Lifecycle code can check the command lines it builds.
func RealEmulatorFlag(name string) (known, takesValue bool) {
	name = strings.ReplaceAll(strings.TrimLeft(name, "-"), "_", "-")
	if strings.HasPrefix(name, "debug-") {
		return true, false
	}
	v, ok := realEmulatorFlags[name]
	return ok, v
}

// ParseEmulatorArgs parses the real emulator's command line. Flags it does not
// know are kept in Ignored; `-qemu` ends the emulator's own options (what
// follows goes to QEMU and is ignored).
func ParseEmulatorArgs(args []string) (EmulatorOptions, error) {
	var o EmulatorOptions
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "@") && len(a) > 1 {
			o.AVD = a[1:]
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return o, fmt.Errorf("invalid command-line parameter: %s.", a)
		}
		name := strings.ReplaceAll(strings.TrimLeft(a, "-"), "_", "-")
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option '-%s' needs an argument", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "avd":
			o.AVD, err = value()
		case "port":
			var v string
			if v, err = value(); err == nil {
				o.Port, err = strconv.Atoi(v)
				if err != nil || o.Port <= 0 || o.Port >= 65535 || o.Port%2 != 0 {
					return o, fmt.Errorf("option -port must be followed by an even integer console port, not '%s'", v)
				}
			}
		case "gpu":
			o.GPU, err = value()
		case "accel":
			o.Accel, err = value()
		case "no-window", "qt-hide-window":
			o.NoWindow = true
		case "no-audio", "noaudio":
			o.NoAudio = true
		case "no-boot-anim":
			o.NoBootAnim = true
		case "read-only":
			o.ReadOnly = true
		case "no-snapshot-save":
			o.NoSnapshotSave = true
		case "no-snapshot-load":
			o.NoSnapshotLoad = true
		case "no-snapshot":
			o.NoSnapshot = true
		case "wipe-data":
			o.WipeData = true
		case "list-avds":
			o.ListAVDs = true
		case "qemu":
			o.Ignored = append(o.Ignored, args[i:]...)
			return o, nil
		case "ports":
			// "<consoleport>,<adbport>": the simulator serves adb on console+1 only.
			var v string
			if v, err = value(); err == nil {
				c, a, _ := strings.Cut(v, ",")
				cp, err1 := strconv.Atoi(c)
				ap, err2 := strconv.Atoi(a)
				if err1 != nil || err2 != nil || cp%2 != 0 || ap != cp+1 {
					return o, fmt.Errorf("option -ports %s: the simulated emulator needs an even console port and adb on the next one", v)
				}
				o.Port = cp
			}
		default:
			o.Ignored = append(o.Ignored, a)
			known, takesValue := RealEmulatorFlag(name)
			if !known {
				o.Unknown = append(o.Unknown, a)
			}
			if takesValue && i+1 < len(args) {
				i++
				o.Ignored = append(o.Ignored, args[i])
			}
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// AVDHome is where AVDs live: $ANDROID_AVD_HOME, else
// $ANDROID_SDK_HOME/avd (or $ANDROID_SDK_HOME/.android/avd), else
// $ANDROID_EMULATOR_HOME/avd, else $HOME/.android/avd.
func AVDHome() string {
	if d := os.Getenv("ANDROID_AVD_HOME"); d != "" {
		return d
	}
	if d := os.Getenv("ANDROID_SDK_HOME"); d != "" {
		if fi, err := os.Stat(filepath.Join(d, ".android", "avd")); err == nil && fi.IsDir() {
			return filepath.Join(d, ".android", "avd")
		}
		return filepath.Join(d, "avd")
	}
	if d := os.Getenv("ANDROID_EMULATOR_HOME"); d != "" {
		return filepath.Join(d, "avd")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".android", "avd")
}

// ListAVDs lists the AVD names of dir: one per NAME.ini file, sorted, as
// `emulator -list-avds` prints them (android/avd/scanner.c).
func ListAVDs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		n := e.Name()
		if len(n) > 4 && strings.HasSuffix(n, ".ini") && !e.IsDir() {
			out = append(out, strings.TrimSuffix(n, ".ini"))
		}
	}
	sort.Strings(out)
	return out
}

// readIni reads a key=value file (AVD .ini files); later keys win.
func readIni(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m, sc.Err()
}

// AVD is one AVD as the emulator finds it: NAME.ini in the AVD home names the
// content directory (path=), whose config.ini describes the device.
type AVD struct {
	Name   string
	Dir    string            // the NAME.avd content directory
	Config map[string]string // config.ini
}

// SimProfileKey is the config.ini key (ours) naming the simulator profile of
// an AVD: a shipped profile's name (fixtures/profiles) or a YAML/JSON file,
// relative to the AVD directory when not absolute.
const SimProfileKey = "screengraph.simProfile"

// LoadAVD finds AVD name under home.
func LoadAVD(home, name string) (AVD, error) {
	ini, err := readIni(filepath.Join(home, name+".ini"))
	if err != nil {
		return AVD{}, errUnknownAVD
	}
	dir := ini["path"]
	if dir == "" {
		dir = filepath.Join(home, ini["path.rel"])
		if ini["path.rel"] == "" {
			dir = filepath.Join(home, name+".avd")
		}
	}
	cfg, err := readIni(filepath.Join(dir, "config.ini"))
	if err != nil {
		return AVD{}, fmt.Errorf("bad config: virtual device directory lacks config.ini")
	}
	return AVD{Name: name, Dir: dir, Config: cfg}, nil
}

var errUnknownAVD = errors.New("unknown AVD")

var apiFromSysdir = regexp.MustCompile(`android-(\d+)`)

// APILevel is the API level of the AVD's system image: image.sysdir.1
// ("system-images/android-34/google_apis/x86_64/"), else target
// ("android-34"); 0 when neither says.
func (a AVD) APILevel() int {
	for _, k := range []string{"image.sysdir.1", "target"} {
		if m := apiFromSysdir.FindStringSubmatch(a.Config[k]); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// dirSnapshots keeps snapshots as the real emulator lays them out:
// NAME.avd/snapshots/<snapshot>/, one directory each. The simulator writes
// its metadata in screengraph-sim.json there; a directory without it (a test
// making one by hand) is a snapshot too.
type dirSnapshots struct{ dir string }

type snapMeta struct {
	Size    int64     `json:"size"`
	Date    time.Time `json:"date"`
	ClockMs int64     `json:"clockMs"`
}

func (s dirSnapshots) List() ([]Snapshot, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []Snapshot
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sn := Snapshot{Name: e.Name(), Size: 75 << 20}
		if fi, err := e.Info(); err == nil {
			sn.Date = fi.ModTime()
		}
		if b, err := os.ReadFile(filepath.Join(s.dir, e.Name(), "screengraph-sim.json")); err == nil {
			var m snapMeta
			if json.Unmarshal(b, &m) == nil {
				sn.Size, sn.Date, sn.Clock = m.Size, m.Date, time.Duration(m.ClockMs)*time.Millisecond
			}
		}
		out = append(out, sn)
	}
	sortSnapshots(out)
	return out, nil
}

func (s dirSnapshots) Save(v Snapshot) error {
	d := filepath.Join(s.dir, v.Name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(snapMeta{Size: v.Size, Date: v.Date, ClockMs: v.Clock.Milliseconds()})
	return os.WriteFile(filepath.Join(d, "screengraph-sim.json"), b, 0o644)
}

func (s dirSnapshots) Load(name string) error {
	if fi, err := os.Stat(filepath.Join(s.dir, name)); err != nil || !fi.IsDir() {
		return errSnapshotMissing(name)
	}
	return nil
}

func (s dirSnapshots) Delete(name string) error {
	return os.RemoveAll(filepath.Join(s.dir, name))
}

// DefaultBootSnapshot is the Quick Boot snapshot's name (Quickboot.cpp
// kDefaultBootSnapshot).
const DefaultBootSnapshot = "default_boot"

// avdLock is hardware-qemu.ini.lock in the AVD directory: the file holds the
// owner's pid; a lock whose pid is dead is stale and taken over (the real
// emulator's filelock does the same), and the emulator waits up to 2 s for a
// lock to free (filelock_create_timeout(coreHwIniPath, 2000)).
//
// Reading the lock, judging it stale and writing our pid happen under an
// flock(2) of the AVD directory, so two emulators starting at once can never
// both take it: without that, one could read the file the other had just
// created but not yet written, call the empty pid stale, and take it too.
func avdLock(dir string) (release func(), ok bool) {
	path := filepath.Join(dir, "hardware-qemu.ini.lock")
	deadline := time.Now().Add(2 * time.Second)
	for {
		took, err := tryAVDLock(dir, path)
		if took {
			return func() { os.Remove(path) }, true
		}
		if err != nil || time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tryAVDLock takes path for this process unless a live process holds it.
func tryAVDLock(dir, path string) (bool, error) {
	d, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer d.Close() // closing the last descriptor drops the flock
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	if b, err := os.ReadFile(path); err == nil {
		pid, perr := strconv.Atoi(strings.TrimRight(strings.TrimSpace(string(b)), "\x00"))
		if perr == nil && pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH {
			return false, nil // a live owner
		}
	}
	// Absent or stale: ours. O_TRUNC replaces a stale pid.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// emuLog writes the emulator's log lines in the form of emulator 31-34
// ("INFO    | message", level left-justified in 8 columns), which real
// captures show on stdout (see SOURCES.md).
type emuLog struct{ w io.Writer }

func (l emuLog) line(level, format string, args ...any) {
	fmt.Fprintf(l.w, "%-8s| %s\n", level, fmt.Sprintf(format, args...))
}

// RunEmulatorConfig is what RunEmulator needs besides the command line.
type RunEmulatorConfig struct {
	Stdout, Stderr io.Writer
	// LoadProfile resolves a profile name or file; nil means LoadProfile
	// (files first, then shipped profiles).
	LoadProfile func(ref string) (android.Profile, error)
	// Log receives the simulator's own debug logs.
	Log zerolog.Logger
	// Crash ends the process abruptly (the crashAfter fault); nil means
	// SIGKILL to the current process.
	Crash func()
}

// RunEmulator runs the simulator as the real `emulator` binary would run:
// it parses the real flags, finds the AVD (NAME.ini and NAME.avd/config.ini
// under AVDHome), refuses a second writable instance of the same AVD, quick
// boots from NAME.avd/snapshots/default_boot when it can (else cold boots),
// listens on the console port P and the adb port P+1, registers with the adb
// server of ANDROID_ADB_SERVER_PORT (5037 by default), and runs until ctx ends
// or the console's `kill`; then it saves default_boot unless -no-snapshot-save,
// -no-snapshot or -read-only. It returns the process exit code.
func RunEmulator(ctx context.Context, args []string, rc RunEmulatorConfig) int {
	out := emuLog{rc.Stdout}
	o, err := ParseEmulatorArgs(args)
	if err != nil {
		out.line("ERROR", "%s", err)
		return 1
	}
	for _, u := range o.Unknown {
		emuLog{rc.Stderr}.line("WARNING", "[simulated emulator] %s is not an option of the real emulator; ignored", u)
	}
	home := AVDHome()
	if o.ListAVDs {
		for _, n := range ListAVDs(home) {
			fmt.Fprintln(rc.Stdout, n)
		}
		return 0
	}
	out.line("INFO", "Android emulator version 34.1.19.0 (build_id 0) (CL:N/A) [screengraph simulated emulator]")
	if o.AVD == "" {
		out.line("ERROR", "No AVD specified. Use '@foo' or '-avd foo' to launch a virtual device named 'foo'")
		return 1
	}
	avd, err := LoadAVD(home, o.AVD)
	if err != nil {
		if errors.Is(err, errUnknownAVD) {
			env, dir := "HOME", "$HOME/.android/avd"
			if os.Getenv("ANDROID_AVD_HOME") != "" {
				env, dir = "ANDROID_AVD_HOME", "$ANDROID_AVD_HOME"
			} else if os.Getenv("ANDROID_SDK_HOME") != "" {
				env, dir = "ANDROID_SDK_HOME", "$ANDROID_SDK_HOME/avd"
			}
			out.line("ERROR", "Unknown AVD name [%s], use -list-avds to see valid list.", o.AVD)
			out.line("ERROR", "%s is defined but there is no file %s.ini in %s", env, o.AVD, dir)
			out.line("ERROR", "(Note: Directories are searched in the order $ANDROID_AVD_HOME, $ANDROID_SDK_HOME/avd and $HOME/.android/avd)")
			return 1
		}
		out.line("ERROR", "%s", err)
		return 1
	}
	prof, err := avdProfile(avd, rc.LoadProfile)
	if err != nil {
		out.line("ERROR", "%s", err)
		return 1
	}
	readOnly := o.ReadOnly
	if !readOnly {
		release, ok := avdLock(avd.Dir)
		if !ok {
			// main.cpp: derror("Running multiple emulators with the same AVD "
			// "is an experimental feature.\n" "Please use -read-only flag to
			// enable this feature.\n"), one log line per text line.
			out.line("ERROR", "Running multiple emulators with the same AVD ")
			out.line("ERROR", "is an experimental feature.")
			out.line("ERROR", "Please use -read-only flag to enable this feature.")
			return 1
		}
		defer release()
	}
	snaps := dirSnapshots{filepath.Join(avd.Dir, "snapshots")}
	userdata := filepath.Join(avd.Dir, userdataDir)
	if o.WipeData {
		snaps.Delete(DefaultBootSnapshot)
		os.RemoveAll(userdata)
	}
	prof.Preinstalled = restoreUserdata(userdata, prof.Preinstalled)
	quick := false
	switch {
	case o.NoSnapshotLoad || o.NoSnapshot:
		out.line("INFO", "Cold boot: requested by the user")
	case o.WipeData:
		// The wiped AVD has no snapshot left: a cold boot.
	case snaps.Load(DefaultBootSnapshot) != nil:
		// No snapshot in the image: the real emulator cold boots silently.
	case prof.Faults.SnapshotLoadFails:
		out.line("WARNING", "Cold boot: snapshot failed to load")
		snaps.Delete(DefaultBootSnapshot)
	default:
		quick = true
	}
	cold := prof.ColdBootDuration
	if cold == 0 {
		cold = prof.BootDuration
	}
	if quick {
		prof.BootDuration = prof.QuickBootDuration
		if prof.BootDuration == 0 {
			prof.BootDuration = cold / 10
		}
		out.line("INFO", "Successfully loaded snapshot '%s'", DefaultBootSnapshot)
	} else {
		prof.BootDuration = cold
	}
	port := o.Port
	if port == 0 {
		port = firstFreeEmulatorPort()
		if port == 0 {
			out.line("ERROR", "No free console port between 5554 and 5584")
			return 1
		}
	}
	adbPort := os.Getenv("ANDROID_ADB_SERVER_PORT")
	if adbPort == "" {
		adbPort = "5037"
	}
	// The device calls logBoot the first time it reports itself booted, and
	// the timer below when nothing asks: the line is in the log before any
	// probe can see sys.boot_completed=1.
	logBoot := sync.OnceFunc(func() {
		out.line("INFO", "Boot completed in %d ms", prof.BootDuration.Milliseconds())
	})
	e, dev, err := Launch(ctx, LaunchConfig{
		ConsolePort: port, ADBServer: "127.0.0.1:" + adbPort, ADBServerOptional: true,
		Profile: prof, Log: rc.Log, AVDName: avd.Name, ReadOnly: readOnly, Snapshots: snaps,
		OnBootCompleted: logBoot,
	})
	if err != nil {
		out.line("ERROR", "%s", err)
		return 1
	}
	how := "cold"
	if quick {
		how = "quick"
	}
	out.line("INFO", "Simulated %s boot of AVD '%s' (API %d, profile %s) on console port %d, adb port %d (serial %s); boot completes in %v",
		how, avd.Name, prof.APILevel, prof.Name, e.ConsolePort(), e.ADBPort(), e.Serial(), prof.BootDuration)
	if in, ok := dev.BootCompletedIn(); ok {
		t := time.AfterFunc(in, logBoot)
		defer t.Stop()
	}
	if f := prof.Faults.CrashAfter; f > 0 {
		crash := rc.Crash
		if crash == nil {
			crash = func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		}
		t := time.AfterFunc(f, crash)
		defer t.Stop()
	}
	select {
	case <-ctx.Done():
	case <-e.Done():
	}
	e.Close()
	if !readOnly {
		if err := saveUserdata(userdata, dev.UserAPKs()); err != nil {
			out.line("WARNING", "Could not save the simulated userdata: %v", err)
		}
	}
	switch {
	case readOnly || o.NoSnapshot:
	case o.NoSnapshotSave:
		out.line("WARNING", "Discarding the changed state (command-line flag).")
	default:
		if err := e.SaveSnapshot(DefaultBootSnapshot); err != nil {
			out.line("WARNING", "State saving failed, cleaning out the snapshot.")
			snaps.Delete(DefaultBootSnapshot)
		}
	}
	return 0
}

// userdataDir (in NAME.avd) keeps what a real emulator keeps in its userdata
// partition across restarts, as far as the simulator models it: the APKs of
// the packages installed after start-up, one <package>.apk each. They are
// installed again at the next start (the install dates are then new); a
// -read-only instance reads them but does not write them back, -wipe-data
// deletes them, a crash loses the changes of its session.
const userdataDir = "screengraph-userdata"

// restoreUserdata returns pre with the saved user packages: a saved update
// of a preinstalled package replaces its entry, the others are added.
func restoreUserdata(dir string, pre []android.Package) []android.Package {
	out := append([]android.Package(nil), pre...)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".apk")
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		p := android.Package{ID: id, APK: filepath.Join(dir, e.Name()), APKData: b, UserData: true}
		if i := slices.IndexFunc(out, func(q android.Package) bool { return q.ID == id }); i >= 0 {
			out[i] = p
		} else {
			out = append(out, p)
		}
	}
	return out
}

func saveUserdata(dir string, apks map[string][]byte) error {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for id, b := range apks {
		if err := os.WriteFile(filepath.Join(tmp, id+".apk"), b, 0o644); err != nil {
			return err
		}
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// avdProfile is the device profile of an AVD: the one config.ini names with
// SimProfileKey (else "default"), with the API level of the AVD's system image
// and its hw.lcd.* display when config.ini sets them.
func avdProfile(avd AVD, load func(string) (android.Profile, error)) (android.Profile, error) {
	ref := avd.Config[SimProfileKey]
	if ref == "" {
		ref = "default"
	} else if !filepath.IsAbs(ref) {
		if _, err := os.Stat(filepath.Join(avd.Dir, ref)); err == nil {
			ref = filepath.Join(avd.Dir, ref)
		}
	}
	if load == nil {
		load = LoadProfile
	}
	p, err := load(ref)
	if err != nil {
		return p, err
	}
	if api := avd.APILevel(); api != 0 {
		p.APILevel = api
		p.Release = ""
		if p.DeviceName == "emu64xa" || p.DeviceName == "emu64x" {
			p.DeviceName = ""
		}
	}
	for k, dst := range map[string]*int{"hw.lcd.width": &p.DisplayWidth, "hw.lcd.height": &p.DisplayHeight, "hw.lcd.density": &p.Density} {
		if n, err := strconv.Atoi(avd.Config[k]); err == nil && n > 0 {
			*dst = n
		}
	}
	if p.Props == nil {
		p.Props = map[string]string{}
	}
	if _, ok := p.Props["ro.boot.qemu.avd_name"]; !ok {
		p.Props["ro.boot.qemu.avd_name"] = avd.Name
	}
	return p, nil
}

// firstFreeEmulatorPort is the first even port from 5554 to 5584 whose pair is
// free, as the real emulator picks one without -port.
func firstFreeEmulatorPort() int {
	for p := 5554; p <= 5584; p += 2 {
		ok := true
		for _, q := range []int{p, p + 1} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return p
		}
	}
	return 0
}

// LoadProfile reads a profile file, or a shipped profile by name
// (fixtures/profiles).
//
// A profile may set only what it changes: it is read over the shipped
// "default" profile (android.ParseProfileOver), so e.g. a file holding just
// `faults: {appCrash: {...}}` is the default device with that fault.
func LoadProfile(ref string) (android.Profile, error) {
	name := ref
	var b []byte
	if _, err := os.Stat(ref); err == nil {
		if b, err = os.ReadFile(ref); err != nil {
			return android.Profile{}, err
		}
		name = strings.TrimSuffix(filepath.Base(ref), filepath.Ext(ref))
	} else if b, err = fixtures.Profile(ref); err != nil {
		return android.Profile{}, fmt.Errorf("profile %q: no such file, and no shipped profile of that name (shipped: %s)", ref, strings.Join(fixtures.ProfileNames(), ", "))
	}
	if ref == "default" {
		return android.ParseProfile(ref, b)
	}
	defBytes, err := fixtures.Profile("default")
	if err != nil {
		return android.Profile{}, fmt.Errorf("shipped default profile: %w", err)
	}
	base, err := android.ParseProfile("default", defBytes)
	if err != nil {
		return android.Profile{}, err
	}
	return android.ParseProfileOver(base, name, b)
}
