package main

import "github.com/screengraph/screengraph-agent/cmd/internal/chaintest"

// The CLI tests of this package that run the real binary (exit codes,
// stderr) build it once per test process; the end-to-end tests that drive
// a serving daemon live in cmd/internal/e2e with their own harness.
var buildAgent = chaintest.BuildAgent
