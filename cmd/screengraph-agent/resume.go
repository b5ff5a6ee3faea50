package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"syscall"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// runsResumeCmd is `runs resume RUN_ID`: it drives an unfinished run
// (RUNNING, PAUSED, PENDING, CANCELED_REQUESTED) to its end from its last
// snapshot in this process, without a daemon. Nodes that finished are not run
// again. A daemon serving the data dir resumes runs itself, so this refuses
// to run beside one (the data dir's daemon.lock).
type runsResumeCmd struct {
	storeFlags
	ADBServer string `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	Appium    string `help:"Appium server URL; default: start a local one for this run."`
	Output    string `help:"Output format: text (progress on stderr) or json." default:"text" enum:"text,json"`
	RunID     string `arg:"" help:"The run's ULID."`
}

func (c *runsResumeCmd) fail(err error) error {
	if c.Output == "json" {
		render.PrintJSON(httpapi.ErrorBody(err, ""))
	}
	return cli.ExitError{Code: 2, Err: err}
}

func (c *runsResumeCmd) Run(ctx context.Context, g *Globals) error {
	start := time.Now()
	dir, err := c.dir()
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrInvalidRequest, err, "data dir"))
	}
	lock, _, err := sqlite.LockDataDir(dir, "")
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return c.fail(agent.Errorf(agent.ErrInvalidRequest,
			"a daemon serves data dir %s; it resumes runs itself (control run %s with `screengraph-agent resume|cancel`)", dir, c.RunID))
	}
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrInvalidRequest, err, "data dir"))
	}
	defer lock.Close()

	// Check the run before starting anything (Appium, NATS).
	st, err := c.open(ctx)
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrProcess, err, "embedded store"))
	}
	run, err := st.GetRun(ctx, agent.Admin(), c.RunID)
	st.Close()
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrInvalidRequest, err, "run %s", c.RunID))
	}
	if run.Status.Terminal() {
		return c.fail(agent.Errorf(agent.ErrInvalidRequest, "run %s already ended (%s): nothing to resume", c.RunID, run.Status))
	}

	h, err := agentd.OpenHost(ctx, agentd.HostConfig{DataDir: dir, ADBServer: adbAddr(c.ADBServer), AppiumURL: c.Appium, Log: g.logger(), Progress: agentd.TextProgress(c.Output == "text")})
	if err != nil {
		return c.fail(err)
	}
	defer h.Close(context.Background())
	// Resuming is the user's request: a PAUSED run goes on.
	if run.Status == agent.RunPaused {
		if _, err := h.Store.RequestControl(ctx, agent.Control{RunID: run.RunID, Kind: agent.KindResumeRequested, RequestedAt: time.Now()}); err != nil {
			return c.fail(agent.Wrap(agent.ErrProcess, err, "recording the resume of run %s", run.RunID))
		}
	}
	status, took, begun, err := h.Drive(ctx, run, fmt.Sprintf("resume:%d", os.Getpid()), c.Output == "text",
		fmt.Sprintf("resuming run %s (%s) on %s", run.RunID, run.Status, run.Serial))
	if err != nil && !begun {
		return c.fail(err)
	}
	if err != nil {
		return c.fail(fmt.Errorf("run %s: %w (the run stays resumable)", run.RunID, err))
	}
	rc := runCmd{Output: c.Output}
	return rc.report(ctx, h, run.RunID, status, took, time.Since(start))
}
