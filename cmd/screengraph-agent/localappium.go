package main

import (
	"fmt"

	"github.com/screengraph/screengraph-agent/appium"
)

type appiumCmd struct {
	Stop appiumStopCmd `cmd:"" help:"Stop the local Appium server that runs of this data dir started."`
}

type appiumStopCmd struct {
	storeFlags
}

func (c *appiumStopCmd) Run() error {
	dir, err := c.dir()
	if err != nil {
		return err
	}
	stopped, err := appium.StopLocal(dir)
	if err != nil {
		return err
	}
	if stopped {
		fmt.Println("stopped the local Appium server")
	} else {
		fmt.Println("no local Appium server was running")
	}
	return nil
}
