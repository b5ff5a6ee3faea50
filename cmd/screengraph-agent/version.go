package main

import (
	"context"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"

	"github.com/screengraph/screengraph-agent/cmd/internal/hostcheck"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
)

// Set at link time by the release build (.goreleaser.yaml:
// -X main.version=… -X main.commit=… -X main.date=…); a plain go build
// falls back to the module's build info.
var (
	version = ""
	commit  = ""
	date    = ""
)

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
	v, rev, at := cli.BuildVersion(version, commit, date)
	info := hostcheck.ProbeVersions(ctx, hostcheck.Build{Version: v, Commit: rev, BuildDate: at}, adbAddr(c.ADBServer), dir, c.AppiumBin)
	if c.Output == "json" {
		return render.PrintJSON(info)
	}
	info.WriteText(os.Stdout)
	return nil
}
