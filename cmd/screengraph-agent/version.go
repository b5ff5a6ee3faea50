package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/appium"
)

// Set at link time by the release build (.goreleaser.yaml:
// -X main.version=… -X main.commit=… -X main.date=…); a plain go build
// falls back to the module's build info.
var (
	version = ""
	commit  = ""
	date    = ""
)

// versionInfo is what `version --output json` prints.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	// ADBServer is the adb server's protocol version ("41"), or why not.
	ADBServer    component `json:"adbServer"`
	Appium       component `json:"appium"`
	UiAutomator2 component `json:"uiautomator2Driver"`
}

// component is a found piece's version and where it is, or why it is not.
type component struct {
	Version string `json:"version,omitempty"`
	Where   string `json:"where,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (c component) String() string {
	if c.Error != "" {
		return "not found: " + c.Error
	}
	if c.Where != "" {
		return c.Version + " (" + c.Where + ")"
	}
	return c.Version
}

// buildVersion is the binary's own version, commit and build date.
func buildVersion() (v, rev, at string) {
	v, rev, at = version, commit, date
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v == "" {
		v = bi.Main.Version
		if v == "" || v == "(devel)" {
			v = "devel"
		}
	}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && rev == "":
			rev = s.Value
		case s.Key == "vcs.time" && at == "":
			at = s.Value
		case s.Key == "vcs.modified" && s.Value == "true" && rev != "" && commit == "":
			rev += "-dirty"
		}
	}
	return
}

// probeVersions finds the versions of the binary and of what it drives.
func probeVersions(ctx context.Context, adbServer, dataDir, appiumBin string) versionInfo {
	v, rev, at := buildVersion()
	info := versionInfo{Version: v, Commit: rev, BuildDate: at, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if n, err := adb.New(adbServer).ServerVersion(actx); err != nil {
		info.ADBServer = component{Where: adbServer, Error: err.Error()}
	} else {
		info.ADBServer = component{Version: fmt.Sprint(n), Where: adbServer}
	}
	inst, err := appium.Locate(appium.LocateConfig{Bin: appiumBin, DataDir: dataDir})
	if err != nil {
		info.Appium = component{Error: err.Error()}
		info.UiAutomator2 = component{Error: "no Appium"}
		return info
	}
	pctx, cancel2 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel2()
	if av, err := inst.Version(pctx); err != nil {
		info.Appium = component{Where: inst.Bin, Error: err.Error()}
	} else {
		info.Appium = component{Version: av, Where: inst.Bin + ", " + inst.Source}
	}
	home := inst.Home
	if home == "" {
		home = "~/.appium"
	}
	if dv, err := inst.DriverVersion("appium-uiautomator2-driver"); err != nil {
		info.UiAutomator2 = component{Where: home, Error: "not installed in APPIUM_HOME " + home}
	} else {
		info.UiAutomator2 = component{Version: dv, Where: "APPIUM_HOME " + home}
	}
	return info
}

func (i versionInfo) printText(w io.Writer) {
	fmt.Fprintf(w, "screengraph-agent %s\n", i.Version)
	fmt.Fprintf(w, "  commit:       %s\n", i.Commit)
	fmt.Fprintf(w, "  built:        %s\n", i.BuildDate)
	fmt.Fprintf(w, "  go:           %s %s\n", i.GoVersion, i.Platform)
	fmt.Fprintf(w, "  adb server:   %s\n", i.ADBServer)
	fmt.Fprintf(w, "  appium:       %s\n", i.Appium)
	fmt.Fprintf(w, "  uiautomator2: %s\n", i.UiAutomator2)
}

type versionCmd struct {
	storeFlags
	outputFlag
	ADBServer string `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	AppiumBin string `help:"Appium executable to report on (default: the one serve would start)." name:"appium-binary" placeholder:"PATH"`
}

func (c *versionCmd) Run(ctx context.Context) error {
	dir, err := c.dir()
	if err != nil {
		return err
	}
	info := probeVersions(ctx, adbAddr(c.ADBServer), dir, c.AppiumBin)
	if c.Output == "json" {
		return printJSON(info)
	}
	info.printText(os.Stdout)
	return nil
}
