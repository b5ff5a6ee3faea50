package main

import "github.com/screengraph/screengraph-agent/cmd/internal/cli"

// serve's flags and its config file share their names: a config key is a
// flag's long name (data-dir, lease-ttl, …), and --print-config prints what
// --config reads. The mapping is derived from the structs by reflection, so a
// flag added to serveCmd and agentd.Config is a config key without more code
// (config_test.go checks that every serve flag round-trips).

// serveMetaFlags are serve's flags that are not configuration.
var serveMetaFlags = map[string]bool{"config": true, "print-config": true, "output": true}

// serveFlagValues returns serve's configuration flags that were given (not
// their zero value), keyed by flag name; durations as time.Duration's
// String ("30s").
func (c *serveCmd) serveFlagValues() map[string]any { return cli.FlagValues(c, serveMetaFlags) }
