package appium

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/screengraph/screengraph-agent/agent"
)

// InstallConfig is an install of the pinned Appium server and uiautomator2
// driver under InstallDir(DataDir).
type InstallConfig struct {
	DataDir string
	// NPM is the npm executable; "" means npm on PATH.
	NPM string
	// Progress receives one line per step and npm's and Appium's own output.
	Progress io.Writer
}

// Install runs `npm install --prefix InstallDir(DataDir) appium@PinnedAppium`,
// then `appium driver install uiautomator2@PinnedUiAutomator2` with
// APPIUM_HOME=InstallDir(DataDir)/home, which is where Locate finds them.
// A driver already installed is kept; re-running is cheap. Errors:
// process_error when npm is missing or a step fails (its output went to
// Progress); interrupted when ctx ends.
func Install(ctx context.Context, cfg InstallConfig) (Installation, error) {
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	npm := cfg.NPM
	if npm == "" {
		npm = "npm"
	}
	npmPath, err := exec.LookPath(npm)
	if err != nil {
		return Installation{}, agent.Wrap(agent.ErrProcess, err,
			"appium setup: npm not found (Debian: apt-get install npm; Appium needs Node.js 20.19+)")
	}
	dir := InstallDir(cfg.DataDir)
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return Installation{}, agent.Wrap(agent.ErrProcess, err, "appium setup: %s", dir)
	}
	run := func(step string, env []string, name string, args ...string) error {
		fmt.Fprintf(out, "setup appium: %s\n", step)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			if ctx.Err() != nil {
				return agent.Wrap(agent.ErrInterrupted, ctx.Err(), "appium setup: %s", step)
			}
			return agent.Wrap(agent.ErrProcess, err, "appium setup: %s", step)
		}
		return nil
	}
	// A package.json of our own, so npm installs here and not in a parent
	// project it would find above the data dir.
	pkg := filepath.Join(dir, "package.json")
	if _, err := os.Stat(pkg); err != nil {
		if err := os.WriteFile(pkg, []byte(`{"name": "screengraph-agent-appium", "private": true}`+"\n"), 0o644); err != nil {
			return Installation{}, agent.Wrap(agent.ErrProcess, err, "appium setup")
		}
	}
	bin := filepath.Join(dir, "node_modules", ".bin", "appium")
	if err := run("npm install appium@"+PinnedAppium+" into "+dir, nil, npmPath,
		"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", "--save-exact", "appium@"+PinnedAppium); err != nil {
		return Installation{}, err
	}
	if _, err := os.Stat(filepath.Join(home, "node_modules", "appium-uiautomator2-driver")); err == nil {
		fmt.Fprintf(out, "setup appium: uiautomator2 driver already in %s\n", home)
	} else if err := run("appium driver install uiautomator2@"+PinnedUiAutomator2+" (APPIUM_HOME="+home+")",
		[]string{"APPIUM_HOME=" + home}, bin, "driver", "install", "uiautomator2@"+PinnedUiAutomator2); err != nil {
		return Installation{}, err
	}
	fmt.Fprintf(out, "setup appium: ok (%s, APPIUM_HOME=%s)\n", bin, home)
	return Installation{Bin: bin, Home: home, Source: "data dir"}, nil
}
