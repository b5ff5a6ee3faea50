package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/device"
)

type devicesCmd struct {
	ADBServer string        `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
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

func (d *devicesCmd) Run(ctx context.Context) error {
	c := adb.New(adbAddr(d.ADBServer))
	list, err := device.Describe(ctx, c, d.Timeout)
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
