package hostcheck

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/appium"
)

// Versions is what `version --output json` prints: the binary's build
// and the versions of what it drives, found on this host.
type Versions struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	// ADBServer is the adb server's protocol version ("41"), or why not.
	ADBServer    Component `json:"adbServer"`
	Appium       Component `json:"appium"`
	UiAutomator2 Component `json:"uiautomator2Driver"`
}

// Component is a found piece's version and where it is, or why it is not.
type Component struct {
	Version string `json:"version,omitempty"`
	Where   string `json:"where,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (c Component) String() string {
	if c.Error != "" {
		return "not found: " + c.Error
	}
	if c.Where != "" {
		return c.Version + " (" + c.Where + ")"
	}
	return c.Version
}

// Build is the binary's own version, commit and build date.
type Build struct{ Version, Commit, BuildDate string }

// ProbeVersions finds the versions of what the binary drives: the adb
// server's protocol version at adbServer (3 s), the Appium appium.Locate
// finds (appiumBin, dataDir; 20 s) and its uiautomator2 driver. A piece
// not found carries why in its Error.
func ProbeVersions(ctx context.Context, b Build, adbServer, dataDir, appiumBin string) Versions {
	info := Versions{Version: b.Version, Commit: b.Commit, BuildDate: b.BuildDate, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if n, err := adb.New(adbServer).ServerVersion(actx); err != nil {
		info.ADBServer = Component{Where: adbServer, Error: err.Error()}
	} else {
		info.ADBServer = Component{Version: fmt.Sprint(n), Where: adbServer}
	}
	inst, err := appium.Locate(appium.LocateConfig{Bin: appiumBin, DataDir: dataDir})
	if err != nil {
		info.Appium = Component{Error: err.Error()}
		info.UiAutomator2 = Component{Error: "no Appium"}
		return info
	}
	pctx, cancel2 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel2()
	if av, err := inst.Version(pctx); err != nil {
		info.Appium = Component{Where: inst.Bin, Error: err.Error()}
	} else {
		info.Appium = Component{Version: av, Where: inst.Bin + ", " + inst.Source}
	}
	home := inst.Home
	if home == "" {
		home = "~/.appium"
	}
	if dv, err := inst.DriverVersion("appium-uiautomator2-driver"); err != nil {
		info.UiAutomator2 = Component{Where: home, Error: "not installed in APPIUM_HOME " + home}
	} else {
		info.UiAutomator2 = Component{Version: dv, Where: "APPIUM_HOME " + home}
	}
	return info
}

// WriteText writes i as `version` prints it.
func (i Versions) WriteText(w io.Writer) {
	fmt.Fprintf(w, "screengraph-agent %s\n", i.Version)
	fmt.Fprintf(w, "  commit:       %s\n", i.Commit)
	fmt.Fprintf(w, "  built:        %s\n", i.BuildDate)
	fmt.Fprintf(w, "  go:           %s %s\n", i.GoVersion, i.Platform)
	fmt.Fprintf(w, "  adb server:   %s\n", i.ADBServer)
	fmt.Fprintf(w, "  appium:       %s\n", i.Appium)
	fmt.Fprintf(w, "  uiautomator2: %s\n", i.UiAutomator2)
}
