package main

// `runs submit`: a run request from flags or a file, sent to the daemon
// (POST /v1/runs), and with --follow a live view of the run until it ends.

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
	"github.com/screengraph/screengraph-agent/nodes"
)

type runsSubmitCmd struct {
	serverFlags
	outputFlag
	File          string `help:"Run request JSON (the body of POST /v1/runs; - reads standard input). Flags given beside it replace its fields." short:"f" name:"file" placeholder:"FILE"`
	Device        string `help:"Device: adb serial, or a name to resolve (AVD name, model) (ensureDevice.deviceConfiguration.deviceName)." placeholder:"SERIAL"`
	Package       string `help:"Android package id of the app under test (applicationId)." placeholder:"ID"`
	APK           string `help:"The APK: a URL the daemon fetches (https://, s3://, file://), or a local path, sent as a file:// URL (the daemon reads it only under its --artifact-file-root)." name:"apk" placeholder:"PATH|URL"`
	SHA256        string `help:"Expected signer certificate SHA-256 of the APK (64 hex digits)." name:"sha256" placeholder:"HEX"`
	Activity      string `help:"Launcher activity, fully qualified or .Short (default: resolved from the package)." placeholder:"NAME"`
	PolicyVersion int    `help:"Policy version to run under (default: the daemon's current)." name:"policy-version" placeholder:"N"`
	Mode          string `help:"LaunchOrAttach mode: LAUNCH_OR_ATTACH, FORCE_RESTART or ATTACH_ONLY." enum:",LAUNCH_OR_ATTACH,FORCE_RESTART,ATTACH_ONLY" default:""`
	Follow        bool   `help:"Follow the run until it ends: each node, its elapsed time and progress lines, the final status and error. Exit 0 only when the run FINISHED, 1 when it FAILED or was CANCELED."`
}

// submitResult is what `runs submit --output json` prints without --follow.
type submitResult = httpapi.SubmitResponse

func (c *runsSubmitCmd) Run(ctx context.Context) error {
	req, err := c.request()
	if err != nil {
		if c.Output == "json" {
			render.PrintJSON(httpapi.ErrorBody(err, ""))
		}
		return cli.ExitError{Code: 2, Err: fmt.Errorf("runs submit: %w", err)}
	}
	cl := newClient(c.Server)
	resp, err := cl.Submit(ctx, json.RawMessage(req))
	if err != nil {
		return c.failHTTP("runs submit", err)
	}
	if !c.Follow {
		if c.Output == "json" {
			return render.PrintJSON(submitResult(resp))
		}
		fmt.Println(resp.RunID)
		return nil
	}
	if c.Output != "json" {
		fmt.Printf("run %s accepted (%s, device %s)\n", resp.RunID, resp.Status, resp.Serial)
	}
	v := render.NewProgressView(os.Stdout, c.Output == "json", time.Now)
	if err := cl.Follow(ctx, resp.RunID, 0, v.Event); err != nil {
		return c.failHTTP("runs submit --follow", err)
	}
	switch v.Status {
	case agent.RunFinished:
		return nil
	case "":
		return cli.ExitError{Code: 2, Err: fmt.Errorf("runs submit --follow: the event stream of run %s ended without its end event", resp.RunID)}
	default:
		return cli.ExitError{Code: 1, Err: fmt.Errorf("run %s %s", resp.RunID, v.Status)}
	}
}

// request is the POST /v1/runs body of the flags and -f
// (cli.SubmitRequest).
func (c *runsSubmitCmd) request() ([]byte, error) {
	return cli.SubmitRequest(cli.SubmitFlags{File: c.File, APK: c.APK, RequestFields: nodes.RequestFields{Device: c.Device,
		Package: c.Package, SHA256: c.SHA256, Activity: c.Activity, Mode: c.Mode, PolicyVersion: c.PolicyVersion}})
}
