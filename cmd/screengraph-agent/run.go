package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
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

// request builds the run request from --input and the flags.
func (c *runCmd) request() (nodes.SetupRequest, error) {
	var req nodes.SetupRequest
	if c.Input != "" {
		b, err := os.ReadFile(c.Input)
		if err != nil {
			return req, err
		}
		// The daemon's strict decoder (agent/strictjson): duplicate keys,
		// case variants of a key and unknown keys are refused here too.
		if err := strictjson.Decode(b, &req); err != nil {
			return req, agent.Errorf(agent.ErrInvalidRequest, "--input %s: %s", c.Input, agent.Classify(err).Msg)
		}
	}
	apk := c.APK
	if apk != "" && !strings.Contains(apk, "://") {
		abs, err := filepath.Abs(apk)
		if err != nil {
			return req, err
		}
		apk = "file://" + abs
	}
	set := func(raw *json.RawMessage, path []string, v any) error {
		obj := map[string]any{}
		if len(*raw) > 0 {
			if err := json.Unmarshal(*raw, &obj); err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "--input %s", c.Input)
			}
		}
		if v != "" { // a flag overrides --input
			nodes.SetPath(obj, v, path...)
		} else {
			nodes.SetPath(obj, nil, path...)
		}
		b, _ := json.Marshal(obj)
		*raw = b
		return nil
	}
	steps := []struct {
		raw  *json.RawMessage
		path []string
		v    string
	}{
		{&req.EnsureDevice, []string{"deviceConfiguration", "platformName"}, "android"},
		{&req.EnsureDevice, []string{"deviceConfiguration", "deviceName"}, c.Serial},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "androidPackageId"}, c.Package},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "apkStorageObjectReference"}, apk},
		{&req.ProvisionApp, []string{"applicationUnderTestDescriptor", "expectedBuildSignatureSha256"}, strings.ToLower(c.SHA256)},
		{&req.LaunchOrAttach, []string{"applicationUnderTestDescriptor", "androidPackageId"}, c.Package},
		{&req.LaunchOrAttach, []string{"applicationUnderTestDescriptor", "androidLaunchActivityName"}, c.Activity},
		// WaitIdle's heuristics default to the policy's: an empty object.
		{&req.WaitIdle, []string{"idleHeuristicsConfiguration", "-"}, ""},
	}
	for _, s := range steps {
		if err := set(s.raw, s.path, s.v); err != nil {
			return req, err
		}
	}
	return req, nil
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
		return exitError{code: 2, err: err}
	}
	return err
}

// fail reports an error that stopped the run before it started.
func (c *runCmd) fail(_ *agentd.Host, err error) error {
	e := agent.Classify(err)
	node := ""
	var ie *nodes.InputError
	if errors.As(err, &ie) {
		node = ie.Node
	}
	if c.Output == "json" {
		steps := []map[string]any{}
		for _, n := range []string{nodes.NodeEnsureDevice, nodes.NodeProvisionApp, nodes.NodeLaunchOrAttach, nodes.NodeWaitIdle} {
			steps = append(steps, map[string]any{"node_id": n, "status": "not_executed", "cached": false})
		}
		render.PrintJSON(map[string]any{
			"success": false,
			"error":   agent.RedactString(e.Error()),
			"errors": []map[string]any{{"category": render.Category(e), "node_id": node,
				"message": agent.RedactString(e.Error()), "fixable": render.Category(e) == agent.CategoryAPIValidation || e.Retryable, "error_id": e.ID}},
			"execution":  map[string]any{"steps": steps},
			"checkpoint": map[string]any{"completed_nodes": []string{}, "failed_node": node},
		})
	}
	return exitError{code: 2, err: err}
}
