package emulator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// EnvCommand names the environment variable that replaces the SDK's emulator
// binary: a command line split on blanks ("/tmp/sg emulator sim"), or a JSON
// array of strings when it starts with "[".
const EnvCommand = "SCREENGRAPH_EMULATOR"

// Error codes (agent.Error.Code) of this package.
const (
	CodeEmulatorNotFound = "EMULATOR_NOT_FOUND"
	CodeEmulatorCrashed  = "EMULATOR_CRASHED"
	CodeEmulatorExited   = "EMULATOR_EXITED"
	CodeAVDUnknown       = "AVD_UNKNOWN"
	CodeNoFreePort       = "NO_FREE_CONSOLE_PORT"
)

// ParseCommand reads a command line in EnvCommand's syntax.
func ParseCommand(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var out []string
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvCommand, err)
		}
		return out, nil
	}
	return strings.Fields(s), nil
}

// SDKRoot is $ANDROID_SDK_ROOT, else $ANDROID_HOME, from env ("KEY=VALUE"
// entries; nil means the process environment). "" when neither is set.
func SDKRoot(env []string) string {
	for _, k := range []string{"ANDROID_SDK_ROOT", "ANDROID_HOME"} {
		if v := getenv(env, k); v != "" {
			return v
		}
	}
	return ""
}

// AVDHome is where the emulator looks for AVDs, in its order:
// $ANDROID_AVD_HOME, $ANDROID_SDK_HOME/avd, $ANDROID_USER_HOME/avd,
// $HOME/.android/avd.
func AVDHome(env []string) string {
	if v := getenv(env, "ANDROID_AVD_HOME"); v != "" {
		return v
	}
	if v := getenv(env, "ANDROID_SDK_HOME"); v != "" {
		return filepath.Join(v, "avd")
	}
	if v := getenv(env, "ANDROID_USER_HOME"); v != "" {
		return filepath.Join(v, "avd")
	}
	return filepath.Join(homeDir(env), ".android", "avd")
}

func homeDir(env []string) string {
	if v := getenv(env, "HOME"); v != "" {
		return v
	}
	h, _ := os.UserHomeDir()
	return h
}

func getenv(env []string, key string) string {
	if env == nil {
		return os.Getenv(key)
	}
	v := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			v = kv[len(key)+1:] // the last one wins, as exec does
		}
	}
	return v
}

// setenv returns env with key set to value (replacing earlier entries).
func setenv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// command resolves the emulator command line: Config.Command, $SCREENGRAPH_EMULATOR,
// <sdk>/emulator/emulator, then `emulator` on PATH.
func (m *Manager) command() ([]string, error) {
	if len(m.cfg.Command) > 0 {
		return m.cfg.Command, nil
	}
	if c, err := ParseCommand(getenv(m.cfg.Env, EnvCommand)); err != nil || len(c) > 0 {
		return c, err
	}
	sdk := m.cfg.SDKRoot
	if sdk == "" {
		sdk = SDKRoot(m.cfg.Env)
	}
	if sdk != "" {
		p := filepath.Join(sdk, "emulator", "emulator")
		if _, err := os.Stat(p); err == nil {
			return []string{p}, nil
		}
	}
	if p, err := exec.LookPath("emulator"); err == nil {
		return []string{p}, nil
	}
	return nil, &agent.Error{ID: agent.ErrProcess, Code: CodeEmulatorNotFound,
		Msg: fmt.Sprintf("no Android emulator: set ANDROID_SDK_ROOT or ANDROID_HOME to an SDK with emulator/emulator (SDK root now %q), or %s", sdk, EnvCommand)}
}

// ListAVDs runs `emulator -list-avds` and returns the AVD names it prints, one a
// line (log lines of the form "LEVEL | message" are skipped). When no emulator
// binary can be found it lists the AVD home's NAME.ini files instead.
func (m *Manager) ListAVDs(ctx context.Context) ([]string, error) {
	cmdline, err := m.command()
	if err != nil {
		if names, derr := listAVDDir(AVDHome(m.cfg.Env)); derr == nil && len(names) > 0 {
			return names, nil
		}
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, cmdline[0], append(append([]string{}, cmdline[1:]...), "-list-avds")...)
	c.Env = m.env()
	out, err := c.Output()
	if err != nil {
		var ee *exec.ExitError
		msg := ""
		if errors.As(err, &ee) {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return nil, &agent.Error{ID: agent.ErrProcess, Msg: fmt.Sprintf("%s -list-avds: %s", strings.Join(cmdline, " "), msg), Err: err}
	}
	return ParseListAVDs(string(out)), nil
}

// ParseListAVDs reads `emulator -list-avds` output: one AVD name a line;
// "INFO    | ..." style log lines and blank lines are not names.
func ParseListAVDs(out string) []string {
	var names []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.Contains(l, "|") || strings.ContainsAny(l, " \t") {
			continue
		}
		names = append(names, l)
	}
	return names
}

func listAVDDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".ini") {
			names = append(names, strings.TrimSuffix(n, ".ini"))
		}
	}
	sort.Strings(names)
	return names, nil
}

// AVDDir is NAME's content directory: the path= of <avd home>/NAME.ini,
// else <avd home>/NAME.avd.
func AVDDir(env []string, name string) string {
	home := AVDHome(env)
	if b, err := os.ReadFile(filepath.Join(home, name+".ini")); err == nil {
		if p := ParseINI(string(b))["path"]; p != "" {
			return p
		}
	}
	return filepath.Join(home, name+".avd")
}

// ReadAVDConfig reads NAME.avd/config.ini (key=value lines, as avdmanager
// writes them: hw.lcd.width, image.sysdir.1, ...). A missing AVD is
// process_error, Code AVD_UNKNOWN.
func (m *Manager) ReadAVDConfig(name string) (map[string]string, error) {
	p := filepath.Join(AVDDir(m.cfg.Env, name), "config.ini")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, &agent.Error{ID: agent.ErrProcess, Code: CodeAVDUnknown, Msg: fmt.Sprintf("AVD %q: no %s", name, p), Err: err}
	}
	return ParseINI(string(b)), nil
}

// ParseINI reads key=value lines (blanks around '=' trimmed; '#' and ';'
// lines are comments), as the emulator's config.ini and NAME.ini use.
func ParseINI(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

// AVDInfo is what `emulator list` shows of an AVD's config.ini.
type AVDInfo struct {
	Name string `json:"name"`
	// APILevel is read from image.sysdir.1 (system-images/android-NN/...), else
	// target (android-NN); 0 when neither says.
	APILevel int    `json:"apiLevel,omitempty"`
	ABI      string `json:"abi,omitempty"`
	// Display is hw.lcd.width x hw.lcd.height, density hw.lcd.density.
	Display string `json:"display,omitempty"`
	Density string `json:"density,omitempty"`
	// Dir is the AVD's content directory (NAME.avd).
	Dir string `json:"dir"`
}

var reAndroidLevel = regexp.MustCompile(`android-(\d+)`)

// DescribeAVD reads NAME's config.ini into an AVDInfo (process_error
// AVD_UNKNOWN when it has none).
func (m *Manager) DescribeAVD(name string) (AVDInfo, error) {
	cfg, err := m.ReadAVDConfig(name)
	if err != nil {
		return AVDInfo{Name: name}, err
	}
	return DescribeConfig(name, AVDDir(m.cfg.Env, name), cfg), nil
}

// DescribeConfig is DescribeAVD over a parsed config.ini.
func DescribeConfig(name, dir string, cfg map[string]string) AVDInfo {
	info := AVDInfo{Name: name, Dir: dir, ABI: cfg["abi.type"], Density: cfg["hw.lcd.density"]}
	for _, k := range []string{"image.sysdir.1", "target"} {
		if m := reAndroidLevel.FindStringSubmatch(cfg[k]); m != nil {
			info.APILevel, _ = strconv.Atoi(m[1])
			break
		}
	}
	if w, h := cfg["hw.lcd.width"], cfg["hw.lcd.height"]; w != "" && h != "" {
		info.Display = w + "x" + h
	}
	return info
}
