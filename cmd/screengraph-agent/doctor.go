package main

import (
	"context"
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
	if err := render.Doctor(c.Output, r); err != nil {
		return err
	}
	if r.Failed() {
		os.Exit(1) // the report is the message
	}
	return nil
}
