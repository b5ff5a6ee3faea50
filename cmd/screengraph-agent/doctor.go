package main

import (
	"context"
	"fmt"
	"os"

	"github.com/screengraph/screengraph-agent/cmd/internal/hostcheck"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
)

// doctorCmd takes serve's flags and config, and checks the host serve would
// run on (cmd/internal/hostcheck).
type doctorCmd struct {
	serveCmd `embed:""`
}

func (c *doctorCmd) Run(ctx context.Context) error {
	cfg, err := c.serveCmd.load()
	if err != nil {
		return c.fail(err)
	}
	hc := hostcheck.Config{ADBServer: cfg.ADBServer, DataDir: cfg.DataDir, AppiumURL: cfg.Appium,
		AppiumBinary: cfg.AppiumBinary, Listen: cfg.Listen, NATSURL: cfg.NATSURL, DatabaseURL: cfg.DatabaseURL}
	if cfg.NATSURL == "" {
		hc.NATSListen = cfg.NATSListen
	}
	r := hostcheck.Run(ctx, hc)
	if c.Output == "json" {
		if err := render.PrintJSON(r); err != nil {
			return err
		}
	} else {
		for _, ch := range r.Checks {
			fmt.Printf("%-4s  %-20s %s\n", ch.Status, ch.Name, ch.Detail)
			if ch.Fix != "" {
				fmt.Printf("      %-20s fix: %s\n", "", ch.Fix)
			}
		}
	}
	if r.Failed() {
		n := 0
		for _, ch := range r.Checks {
			if ch.Status == hostcheck.Fail {
				n++
			}
		}
		fmt.Fprintf(os.Stderr, "doctor: %d of %d checks failed\n", n, len(r.Checks))
		os.Exit(1) // the report is the message
	}
	return nil
}
