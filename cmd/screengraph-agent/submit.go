package main

// `runs submit`: a run request from flags or a file, sent to the daemon
// (POST /v1/runs), and with --follow a live view of the run until it ends.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
		return exitError{code: 2, err: fmt.Errorf("runs submit: %w", err)}
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
		return exitError{code: 2, err: fmt.Errorf("runs submit --follow: the event stream of run %s ended without its end event", resp.RunID)}
	default:
		return exitError{code: 1, err: fmt.Errorf("run %s %s", resp.RunID, v.Status)}
	}
}

// maxRunFile bounds -f: the daemon refuses bodies over httpapi.MaxRequestBytes.
const maxRunFile = httpapi.MaxRequestBytes

// request is the POST /v1/runs body: the -f file's object (or an empty
// one) with each given flag set in its place, and the four node inputs
// present. Errors: invalid_request_error for an unreadable, oversized or
// non-object file, an APK path that cannot be read, or a request with no
// device or package.
func (c *runsSubmitCmd) request() ([]byte, error) {
	req := map[string]any{}
	if c.File != "" {
		var r io.Reader
		if c.File == "-" {
			r = os.Stdin
		} else {
			f, err := os.Open(c.File)
			if err != nil {
				return nil, agent.Wrap(agent.ErrInvalidRequest, err, "-f %s", c.File)
			}
			defer f.Close()
			r = f
		}
		b, err := io.ReadAll(io.LimitReader(r, maxRunFile+1))
		if err != nil {
			return nil, agent.Wrap(agent.ErrInvalidRequest, err, "-f %s", c.File)
		}
		if len(b) > maxRunFile {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "-f %s: over %d bytes (the daemon's request limit)", c.File, maxRunFile)
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&req); err != nil || req == nil {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "-f %s: not a JSON object: %v", c.File, err)
		}
	}
	f := nodes.RequestFields{Device: c.Device, Package: c.Package, SHA256: c.SHA256, Activity: c.Activity, Mode: c.Mode, PolicyVersion: c.PolicyVersion}
	if c.APK != "" {
		ref, err := apkReference(c.APK)
		if err != nil {
			return nil, err
		}
		f.APKReference = ref
	}
	return nodes.EditRequest(req, f)
}

// apkReference is the apkStorageObjectReference for --apk: a URL as given
// (it has a scheme), else the absolute file:// URL of a local path the
// CLI's user can read as a regular file. The daemon still decides: it reads
// file:// only under its --artifact-file-root (its refusal names the rule).
func apkReference(apk string) (string, error) {
	if u, err := url.Parse(apk); err == nil && len(u.Scheme) > 1 && strings.Contains(apk, "://") {
		return apk, nil
	}
	p, err := filepath.Abs(apk)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--apk %s", apk)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--apk %s", apk)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", agent.Errorf(agent.ErrInvalidRequest, "--apk %s: not a regular file", apk)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String(), nil
}
