package main

import (
	"context"
	"os"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
)

type devicesCmd struct {
	serverFlags
	ADBServer string        `help:"adb server HOST:PORT, asked directly (default: the daemon of --server if one answers, else 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	Output    string        `help:"Output format: text or json." default:"text" enum:"text,json"`
	Timeout   time.Duration `help:"Bound of each device's probe." default:"10s"`
}

func adbAddr(flag string) string {
	if flag != "" {
		return flag
	}
	if p := os.Getenv("ANDROID_ADB_SERVER_PORT"); p != "" {
		return "127.0.0.1:" + p
	}
	return "127.0.0.1:5037"
}

// daemon picks the daemon the devices come from, as the runs commands do:
// none when --adb-server names an adb server to ask directly; else the one
// of --server (or SCREENGRAPH_SERVER); else the default daemon if one
// answers; nil means the adb server directly.
func (d *devicesCmd) daemon(ctx context.Context) *client.Client {
	if d.ADBServer != "" {
		// Named on the command line: it wins over SCREENGRAPH_SERVER, as its
		// help says (the walkthrough lists devices before any daemon runs).
		return nil
	}
	return d.daemonUnless(ctx, false)
}

// viaDaemon prints GET /v1/devices: the daemon's adb server's devices with
// their leases and quarantine.
func (d *devicesCmd) viaDaemon(ctx context.Context, cl *client.Client) error {
	f := outputFlag{d.Output}
	devs, err := cl.Devices(ctx)
	if err != nil {
		return f.failHTTP("devices", err)
	}
	return render.Devices(d.Output, devs)
}

func (d *devicesCmd) Run(ctx context.Context) error {
	if cl := d.daemon(ctx); cl != nil {
		return d.viaDaemon(ctx, cl)
	}
	c := adb.New(adbAddr(d.ADBServer))
	list, err := adbdevice.Describe(ctx, c, d.Timeout)
	if err != nil {
		return err
	}
	return render.DeviceSummaries(d.Output, list)
}
