package appium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
)

// Pinned versions: what `screengraph-agent setup appium` installs and what
// tools/setup.sh installs for the checkout (tools/node/package.json).
const (
	PinnedAppium       = "3.8.0"
	PinnedUiAutomator2 = "8.7.0"
)

// Installation is an Appium server binary and the APPIUM_HOME its drivers
// are in.
type Installation struct {
	// Bin is the appium executable's path.
	Bin string
	// Home is the APPIUM_HOME to run it with; "" keeps the inherited one.
	Home string
	// Source says where Bin was found: "--appium-binary", "checkout", "PATH",
	// "APPIUM_HOME" or "data dir".
	Source string
}

// LocateConfig is where Locate looks.
type LocateConfig struct {
	// Bin is an explicit appium executable (--appium-binary); when set it is
	// the only candidate.
	Bin string
	// DataDir is the user's data dir: `setup appium` installs under
	// InstallDir(DataDir).
	DataDir string
	// DefaultDataDir is the per-user default data dir, whose install is
	// looked at last, so that `setup appium` run without --data-dir serves a
	// daemon started with one; "" means agent.DefaultDataDirFrom(Getenv).
	DefaultDataDir string
	// Getenv reads PATH and APPIUM_HOME; nil means os.Getenv.
	Getenv func(string) string
	// Getwd gives the directory the checkout is searched from; nil means os.Getwd.
	Getwd func() (string, error)
}

// InstallDir is where `screengraph-agent setup appium` installs Appium for
// the data dir: an npm prefix holding appium, with APPIUM_HOME at
// InstallDir/home.
func InstallDir(dataDir string) string { return filepath.Join(dataDir, "appium") }

// Locate finds the Appium server binary, in order: cfg.Bin (only it, when
// set); the checkout's tools/node/node_modules/.bin/appium (when run inside
// the repository, with its .cache/appium-home); `appium` on PATH;
// $APPIUM_HOME/node_modules/.bin/appium; the install of `setup appium` under
// InstallDir(cfg.DataDir); the one under the default data dir's
// InstallDir. The home is $APPIUM_HOME when set, else the home beside the
// binary found: the checkout's .cache/appium-home, or, for a binary inside
// a `setup appium` install however it was reached (--appium-binary, PATH,
// a symlink), that install's home, where its driver is.
// Errors: process_error naming every place tried and why it did not fit.
func Locate(cfg LocateConfig) (Installation, error) {
	l := newLocator(cfg)
	if cfg.Bin != "" {
		if err := executable(cfg.Bin); err != nil {
			return Installation{}, agent.Errorf(agent.ErrProcess, "appium: --appium-binary %s: %v", cfg.Bin, err)
		}
		return l.withHome(Installation{Bin: cfg.Bin, Source: "--appium-binary"}, installHome(cfg.Bin)), nil
	}
	l.tried = append(l.tried, "--appium-binary (not given)")
	for _, find := range []func() (Installation, bool){l.checkout, l.onPath, l.appiumHome, l.dataDirs} {
		if in, ok := find(); ok {
			return in, nil
		}
	}
	return Installation{}, agent.Errorf(agent.ErrProcess,
		"appium: no server binary found; tried %s. Install it with `screengraph-agent setup appium`, or pass --appium-binary PATH or --appium URL",
		strings.Join(l.tried, "; "))
}

// locator is Locate's search: its config with the defaults applied, and
// the places tried so far, each with why it did not fit.
type locator struct {
	cfg     LocateConfig
	getenv  func(string) string
	getwd   func() (string, error)
	envHome string // $APPIUM_HOME
	tried   []string
}

func newLocator(cfg LocateConfig) *locator {
	l := &locator{cfg: cfg, getenv: cfg.Getenv, getwd: cfg.Getwd}
	if l.getenv == nil {
		l.getenv = os.Getenv
	}
	if l.getwd == nil {
		l.getwd = os.Getwd
	}
	l.envHome = l.getenv("APPIUM_HOME")
	return l
}

// withHome gives in its home: $APPIUM_HOME when set, else fallback when it
// is a directory (else none: the inherited one).
func (l *locator) withHome(in Installation, fallback string) Installation {
	switch {
	case l.envHome != "":
		in.Home = l.envHome
	case fallback != "" && isDir(fallback):
		in.Home = fallback
	}
	return in
}

// checkout: the checkout's tools/node/node_modules/.bin/appium, with its
// .cache/appium-home.
func (l *locator) checkout() (Installation, bool) {
	root := repoRootFrom(l.getwd)
	if root == "" {
		l.tried = append(l.tried, "the checkout's tools/node (not inside a checkout)")
		return Installation{}, false
	}
	p := filepath.Join(root, "tools", "node", "node_modules", ".bin", "appium")
	if err := executable(p); err != nil {
		l.tried = append(l.tried, p+" ("+err.Error()+"; run tools/setup.sh)")
		return Installation{}, false
	}
	return l.withHome(Installation{Bin: p, Source: "checkout"}, filepath.Join(root, ".cache", "appium-home")), true
}

// onPath: `appium` on PATH.
func (l *locator) onPath() (Installation, bool) {
	p, err := lookPath("appium", l.getenv("PATH"))
	if err != nil {
		l.tried = append(l.tried, "appium on PATH ("+err.Error()+")")
		return Installation{}, false
	}
	return l.withHome(Installation{Bin: p, Source: "PATH"}, installHome(p)), true
}

// appiumHome: $APPIUM_HOME/node_modules/.bin/appium.
func (l *locator) appiumHome() (Installation, bool) {
	if l.envHome == "" {
		l.tried = append(l.tried, "$APPIUM_HOME/node_modules/.bin/appium (APPIUM_HOME not set)")
		return Installation{}, false
	}
	p := filepath.Join(l.envHome, "node_modules", ".bin", "appium")
	if err := executable(p); err != nil {
		l.tried = append(l.tried, "$APPIUM_HOME "+p+" ("+err.Error()+")")
		return Installation{}, false
	}
	return l.withHome(Installation{Bin: p, Source: "APPIUM_HOME"}, ""), true
}

// dataDirs: the `setup appium` install of the data dir, then of the
// default data dir (when another), with their homes.
func (l *locator) dataDirs() (Installation, bool) {
	defaultDir := l.cfg.DefaultDataDir
	if defaultDir == "" {
		defaultDir, _ = agent.DefaultDataDirFrom(l.getenv, runtime.GOOS)
	}
	for _, c := range []struct{ dataDir, source string }{{l.cfg.DataDir, "data dir"}, {defaultDir, "default data dir"}} {
		if c.dataDir == "" || (c.source == "default data dir" && sameDir(c.dataDir, l.cfg.DataDir)) {
			continue
		}
		dir := InstallDir(c.dataDir)
		p := filepath.Join(dir, "node_modules", ".bin", "appium")
		if err := executable(p); err != nil {
			l.tried = append(l.tried, p+" ("+err.Error()+")")
			continue
		}
		return l.withHome(Installation{Bin: p, Source: c.source}, filepath.Join(dir, "home")), true
	}
	return Installation{}, false
}

// executable is nil when p is an executable regular file (after symlinks).
func executable(p string) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.New("missing")
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errors.New("a directory")
	}
	if st.Mode().Perm()&0o111 == 0 {
		return errors.New("not executable")
	}
	return nil
}

// lookPath is exec.LookPath over the given PATH value.
func lookPath(name, path string) (string, error) {
	if path == "" {
		return "", errors.New("PATH is empty")
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// installHome is the APPIUM_HOME of the `setup appium` install that bin
// belongs to: bin (or its symlink target) is <prefix>/node_modules/.bin/appium
// or a file under <prefix>/node_modules/appium, and <prefix>/home exists
// (Install puts the driver there). "" when bin is not in such an install.
func installHome(bin string) string {
	paths := []string{bin}
	if t, err := filepath.EvalSymlinks(bin); err == nil && t != bin {
		paths = append(paths, t)
	}
	for _, p := range paths {
		for dir, i := filepath.Dir(p), 0; i < 4 && dir != filepath.Dir(dir); dir, i = filepath.Dir(dir), i+1 {
			if filepath.Base(dir) == "node_modules" {
				if home := filepath.Join(filepath.Dir(dir), "home"); isDir(home) {
					return home
				}
				break
			}
		}
	}
	return ""
}

// sameDir reports whether a and b name one directory (after cleaning and,
// where both exist, symlinks).
func sameDir(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if ra, err := filepath.EvalSymlinks(a); err == nil {
		a = ra
	}
	if rb, err := filepath.EvalSymlinks(b); err == nil {
		b = rb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// repoRootFrom is the nearest directory at or above getwd's whose go.mod
// declares this module; "" when there is none (an installed daemon).
func repoRootFrom(getwd func() (string, error)) string {
	dir, err := getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/screengraph/screengraph-agent\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Version is the Appium version of the installation, e.g. "3.8.0": from the
// appium package.json beside the binary's target (node_modules/.bin/appium ->
// ../appium/index.js), else what `appium --version` prints (node starts in
// seconds on a busy host). Errors: process_error.
func (in Installation) Version(ctx context.Context) (string, error) {
	if target, err := filepath.EvalSymlinks(in.Bin); err == nil {
		for dir, i := filepath.Dir(target), 0; i < 3; dir, i = filepath.Dir(dir), i+1 {
			if v, err := packageVersion(filepath.Join(dir, "package.json"), "appium"); err == nil {
				return v, nil
			}
		}
	}
	cmd := exec.CommandContext(ctx, in.Bin, "--version")
	if in.Home != "" {
		cmd.Env = withEnv(os.Environ(), "APPIUM_HOME", in.Home)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", agent.Wrap(agent.ErrProcess, err, "appium --version (%s)", in.Bin)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// packageVersion is the version of package.json at p when its name is name.
func packageVersion(p, name string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	var pkg struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		return "", err
	}
	if pkg.Name != name || pkg.Version == "" {
		return "", fmt.Errorf("%s: not the %s package", p, name)
	}
	return pkg.Version, nil
}

// DriverVersion is the version of an installed Appium driver package (e.g.
// "appium-uiautomator2-driver"), from its package.json under the
// installation's home ($HOME/.appium when Home is ""). Errors: not found
// (fs.ErrNotExist) when the driver is not installed there.
func (in Installation) DriverVersion(pkg string) (string, error) {
	home := in.Home
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		home = filepath.Join(h, ".appium")
	}
	return packageVersion(filepath.Join(home, "node_modules", pkg, "package.json"), pkg)
}
