package agent

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
)

// DefaultDataDir is the per-user data directory of the agent (the embedded
// store, the local Appium that `setup appium` installs, NATS files):
// $XDG_DATA_HOME/screengraph-agent or ~/.local/share/screengraph-agent on
// Linux and BSDs, ~/Library/Application Support/screengraph-agent on macOS,
// %LocalAppData%\screengraph-agent on Windows. (Go has os.UserConfigDir and
// os.UserCacheDir but no data-dir helper, hence this one.) Errors: the
// variable it needs is unset.
func DefaultDataDir() (string, error) { return DefaultDataDirFrom(os.Getenv, runtime.GOOS) }

// DefaultDataDirFrom is DefaultDataDir reading HOME, XDG_DATA_HOME and
// LocalAppData through getenv, for goos.
func DefaultDataDirFrom(getenv func(string) string, goos string) (string, error) {
	var base string
	switch goos {
	case "windows":
		base = getenv("LocalAppData")
		if base == "" {
			return "", errors.New("%LocalAppData% is not set")
		}
	case "darwin", "ios":
		home := getenv("HOME")
		if home == "" {
			return "", errors.New("$HOME is not set")
		}
		base = filepath.Join(home, "Library", "Application Support")
	default:
		base = getenv("XDG_DATA_HOME")
		if base == "" || !filepath.IsAbs(base) {
			home := getenv("HOME")
			if home == "" {
				return "", errors.New("$HOME is not set")
			}
			base = filepath.Join(home, ".local", "share")
		}
	}
	return filepath.Join(base, "screengraph-agent"), nil
}
