package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/nodes"
)

type runCmd struct {
	storeFlags
	ADBServer string `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	Serial    string `help:"Device serial (or AVD/model name) to prepare."`
	Appium    string `help:"Appium server URL; default: start a local one for this run."`
	AppiumBin string `help:"Appium executable of the local server (default: the checkout's, appium on PATH, $APPIUM_HOME's, or the one setup appium installed in the data dir)." name:"appium-binary" placeholder:"PATH"`
	Package   string `help:"Android package id of the app under test."`
	APK       string `help:"APK reference: a path, file://, https:// or s3:// URL." name:"apk"`
	SHA256    string `help:"Expected signer certificate SHA-256 of the APK (hex)." name:"sha256"`
	Activity  string `help:"Activity to launch (default: the package's launcher activity)."`
	Policy    string `help:"Policy document (YAML or JSON) to run under." type:"existingfile"`
	Input     string `help:"Run request JSON: {ensureDevice, provisionApp, launchOrAttach, waitIdle, schemaMode}; flags fill what it leaves out." type:"existingfile"`
	Tenant    string `help:"Tenant id carried by every event." default:"local"`
	Project   string `help:"Project id carried by every event."`
	Output    string `help:"Output format: text (progress on stderr) or json." default:"text" enum:"text,json"`
}

// request builds the run request from --input and the flags
// (cli.RunRequest).
func (c *runCmd) request() (nodes.SetupRequest, error) {
	return cli.RunRequest(cli.RunFlags{Input: c.Input, Serial: c.Serial, Package: c.Package, APK: c.APK, SHA256: c.SHA256, Activity: c.Activity})
}

func (c *runCmd) Run(ctx context.Context, g *Globals) error {
	start := time.Now()
	// Checked first (nothing opened, nothing written): the tenant id rule
	// is the daemon's, tokens or not.
	if !agent.ValidTenantID(c.Tenant) {
		return c.fail(nil, agent.InvalidTenantID("--tenant", c.Tenant))
	}
	req, err := c.request()
	if err != nil {
		return c.fail(nil, err)
	}
	dir, err := c.dir()
	if err != nil {
		return c.fail(nil, agent.Wrap(agent.ErrInvalidRequest, err, "data dir"))
	}
	run := agent.Run{
		RunID: ulid.MustNew(ulid.Now(), rand.Reader).String(), TenantID: c.Tenant, ProjectID: c.Project,
		Status: agent.RunPending, Graph: nodes.SetupGraphName,
	}
	inputs, err := nodes.DecodeSetup(run, req)
	if err != nil {
		// Refused before anything is written: no run row, no events.
		return c.fail(nil, err)
	}
	run.Serial = inputs.EnsureDevice.DeviceConfiguration.DeviceName
	run.Input, _ = json.Marshal(req)

	h, err := agentd.OpenHost(ctx, agentd.HostConfig{DataDir: dir, ADBServer: adbAddr(c.ADBServer), AppiumURL: c.Appium, AppiumBinary: c.AppiumBin,
		PolicyFile: c.Policy, Log: g.logger(), Progress: agentd.TextProgress(c.Output == "text")})
	if err != nil {
		return c.fail(nil, err)
	}
	defer h.Close(context.Background())
	if h.AppiumStart > 0 && c.Output == "text" {
		fmt.Fprintf(os.Stderr, "started a local Appium server in %v\n", h.AppiumStart.Round(time.Millisecond))
	}
	run.PolicyVersion = h.Policies.Current().PolicyVersion
	// "<id>/<serial>" names this host's device or AVD or is refused.
	if _, err := (service.Keys{HostID: h.HostID, Identity: h.Reach}).Local(ctx, run.Serial); err != nil {
		return c.fail(nil, err)
	}
	if err := h.Store.CreateRun(ctx, run); err != nil {
		return c.fail(nil, agent.Wrap(agent.ErrProcess, err, "storing the run"))
	}
	// The device lease: a daemon (or another run) driving the device makes
	// this run wait, never share it.
	status, took, begun, err := h.Drive(ctx, run, fmt.Sprintf("run:%d", os.Getpid()), c.Output == "text",
		fmt.Sprintf("run %s on %s (policy v%d)", run.RunID, run.Serial, run.PolicyVersion))
	if err != nil && !begun {
		return c.fail(nil, err)
	}
	if err != nil {
		return fmt.Errorf("run %s: %w (the run stays resumable)", run.RunID, err)
	}
	return c.report(ctx, h, run.RunID, status, took, time.Since(start))
}

// report prints the outcome: node outputs on success, the agent error format
// on failure (secrets redacted).
func (c *runCmd) report(ctx context.Context, h *agentd.Host, runID string, status agent.RunStatus, took, total time.Duration) error {
	err := render.RunOutcome(ctx, c.Output, h.Store, h.Graph, runID, status, took, total)
	if nf := (render.ErrRunNotFinished{}); errors.As(err, &nf) {
		return cli.ExitError{Code: 2, Err: err}
	}
	return err
}

// fail reports an error that stopped the run before it started: the agent
// error format under --output json (render.RunRefused), exit code 2.
func (c *runCmd) fail(_ *agentd.Host, err error) error {
	if c.Output == "json" {
		render.RunRefused(err)
	}
	return cli.ExitError{Code: 2, Err: err}
}
