package main

// The CLI's client of the daemon's HTTP API (agent/httpapi): cancel, pause,
// resume and policy switch, and `runs list|show|events|inspect` when a
// daemon answers. Everything printed goes through agent.RedactJSON /
// agent.RedactString.

import (
	"context"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"

	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/httpapi/client"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
)

// defaultServer is the daemon the client commands talk to by default.
const defaultServer = "http://" + DefaultListen

// serverFlags locate the daemon.
type serverFlags struct {
	Server string `help:"URL of the daemon's HTTP API (default http://${default_listen})." env:"SCREENGRAPH_SERVER" placeholder:"URL"`
}

// clientToken is the API token of --token / SCREENGRAPH_TOKEN (main sets it).
var clientToken string

func newClient(server string) *client.Client {
	if server == "" {
		server = defaultServer
	}
	tok := clientToken
	if tok == "" {
		tok = os.Getenv("SCREENGRAPH_TOKEN")
	}
	return client.New(server, tok, nil)
}

// failHTTP reports a failed client command: the agent error format under
// --output json; the message (redacted by main) otherwise; exit code 2.
func (f outputFlag) failHTTP(what string, err error) error {
	if f.Output == "json" {
		render.PrintJSON(render.ErrorBody(err))
	}
	return cli.ExitError{Code: 2, Err: fmt.Errorf("%s: %w", what, err)}
}

// daemonFor picks where the runs commands read: the daemon named by
// --server (or SCREENGRAPH_SERVER); else, when no --data-dir names a local
// store, the default daemon if one answers; nil means the local store.
func (f serverFlags) daemonFor(ctx context.Context, s storeFlags) *client.Client {
	return f.daemonUnless(ctx, s.DataDir != "")
}

// runsClient is where the runs commands read (daemonFor): a daemon's API,
// else the API served in this process over the data dir's embedded store
// (agentd.ServeLocal: nothing is scheduled). done releases what it opened.
func (f serverFlags) runsClient(ctx context.Context, s storeFlags) (cl *client.Client, done func(), err error) {
	if cl := f.daemonFor(ctx, s); cl != nil {
		return cl, func() {}, nil
	}
	st, err := s.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	if cl, done, err = agentd.ServeLocal(st); err != nil {
		st.Close()
	}
	return cl, done, err
}

// withRuns calls fn with the client of runsClient, then releases it.
func (f serverFlags) withRuns(ctx context.Context, s storeFlags, fn func(*client.Client) error) error {
	cl, done, err := f.runsClient(ctx, s)
	if err != nil {
		return err
	}
	defer done()
	return fn(cl)
}

// daemonUnless is the daemon of --server; else, unless a flag names a local
// source (localNamed), the default daemon if one answers; else nil.
func (f serverFlags) daemonUnless(ctx context.Context, localNamed bool) *client.Client {
	if f.Server != "" {
		return newClient(f.Server)
	}
	if localNamed {
		return nil
	}
	if c := newClient(""); c.Alive(ctx) {
		return c
	}
	return nil
}

// ---- cancel, pause, resume, policy switch ----

type controlFlags struct {
	serverFlags
	outputFlag
}

// control sends a control request for the run (send: one of the client's
// control calls) and reports it.
func (f controlFlags) control(ctx context.Context, what, runID string, send func(context.Context, string) (httpapi.ControlResponse, error)) error {
	r, err := send(ctx, runID)
	if err != nil {
		return f.failHTTP(what, err)
	}
	if f.Output == "json" {
		return render.PrintJSON(r)
	}
	fmt.Printf("%s of run %s recorded\n", what, runID)
	return nil
}

type cancelCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *cancelCmd) Run(ctx context.Context) error {
	return c.control(ctx, "cancel", c.RunID, newClient(c.Server).Cancel)
}

type pauseCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *pauseCmd) Run(ctx context.Context) error {
	return c.control(ctx, "pause", c.RunID, newClient(c.Server).Pause)
}

type resumeCmd struct {
	controlFlags
	RunID string `arg:"" help:"The run's ULID."`
}

func (c *resumeCmd) Run(ctx context.Context) error {
	return c.control(ctx, "resume", c.RunID, newClient(c.Server).Resume)
}

type policyCmd struct {
	Switch policySwitchCmd `cmd:"" help:"Switch a run to another policy version from its next node on."`
}

type policySwitchCmd struct {
	controlFlags
	RunID   string `arg:"" help:"The run's ULID."`
	Version int    `help:"Policy version to switch to." required:""`
}

func (c *policySwitchCmd) Run(ctx context.Context) error {
	return c.control(ctx, fmt.Sprintf("policy switch to v%d", c.Version), c.RunID, func(ctx context.Context, id string) (httpapi.ControlResponse, error) {
		return newClient(c.Server).SwitchPolicy(ctx, id, c.Version)
	})
}
