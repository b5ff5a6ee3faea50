package main

import (
	"context"
	"os"

	"github.com/screengraph/screengraph-agent/appium"
)

type setupCmd struct {
	Appium setupAppiumCmd `cmd:"" help:"Install the pinned Appium server and its uiautomator2 driver with npm under the data dir (where serve and run find them)."`
}

type setupAppiumCmd struct {
	storeFlags
	NPM string `help:"npm executable (default: npm on PATH)." name:"npm" placeholder:"PATH"`
}

func (c *setupAppiumCmd) Run(ctx context.Context) error {
	dir, err := c.dir()
	if err != nil {
		return err
	}
	_, err = appium.Install(ctx, appium.InstallConfig{DataDir: dir, NPM: c.NPM, Progress: os.Stderr})
	return err
}
