package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	"github.com/screengraph/screengraph-agent/device"
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
	if d.Output == "json" {
		return printJSON(map[string]any{"devices": devs})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERIAL\tSTATE\tMODEL\tAPI\tREADINESS\tHELD BY")
	for _, s := range devs {
		api, model, held := "-", s.Model, s.HeldBy
		if s.APILevel > 0 {
			api = fmt.Sprint(s.APILevel)
		}
		if model == "" {
			model = "-"
		}
		if held == "" {
			held = "-"
		}
		readiness := s.Readiness
		if s.Quarantined {
			readiness += " (quarantined: " + s.QuarantineReason + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Serial, s.State, model, api, readiness, held)
	}
	return w.Flush()
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
	if d.Output == "json" {
		if list == nil {
			list = []device.Summary{}
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"devices": list})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERIAL\tSTATE\tMODEL\tAPI\tBOOT")
	for _, s := range list {
		api := "-"
		if s.APILevel > 0 {
			api = fmt.Sprintf("%d (Android %s)", s.APILevel, s.Release)
		}
		boot := "ready"
		if !s.BootReady {
			boot = "not ready: " + s.BootDetail
		}
		model := s.Model
		if model == "" {
			model = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.Serial, s.State, model, api, boot)
	}
	return w.Flush()
}
