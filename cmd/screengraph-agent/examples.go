package main

import (
	"os"

	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
)

// examplesCmd writes the walkthrough's inputs, embedded in the binary, for a
// user who has only the release (cli.WriteExamples).
type examplesCmd struct {
	Dir   string `arg:"" help:"Directory to write into (created when missing)." type:"path"`
	Force bool   `help:"Replace files that already exist in DIR." default:"false"`
}

func (c *examplesCmd) Run() error { return cli.WriteExamples(c.Dir, c.Force, os.Stdout) }
