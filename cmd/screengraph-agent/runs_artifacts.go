package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
)

// runsArtifactsCmd lists a run's evidence through the daemon's API and,
// with --download, saves each artifact into DIR.
type runsArtifactsCmd struct {
	serverFlags
	outputFlag
	RunID    string `arg:"" help:"The run's ULID."`
	Download string `help:"Save every artifact into this existing directory as <artifactId>-<kind>.<ext> (never outside it; an existing file is not overwritten)." placeholder:"DIR" type:"path"`
}

func (c *runsArtifactsCmd) Run(ctx context.Context) error {
	cl := c.daemonUnless(ctx, false)
	if cl == nil {
		cl = newClient(c.Server)
	}
	arts, err := cl.Artifacts(ctx, c.RunID)
	if err != nil {
		return c.failHTTP("runs artifacts", err)
	}
	saved := map[string]string{}
	if c.Download != "" {
		// The directory is created when missing (0755, parents too), as
		// `adb pull` and `curl --create-dirs` do for their targets.
		if err := os.MkdirAll(c.Download, 0o755); err != nil {
			return c.failHTTP("runs artifacts", agent.Wrap(agent.ErrInvalidRequest, err, "--download %s", c.Download))
		}
		root, err := os.OpenRoot(c.Download)
		if err != nil {
			return c.failHTTP("runs artifacts", agent.Wrap(agent.ErrInvalidRequest, err, "--download %s", c.Download))
		}
		defer root.Close()
		for _, a := range arts {
			name, err := cl.SaveArtifact(ctx, root, c.RunID, a)
			if err != nil {
				return c.failHTTP("runs artifacts", err)
			}
			saved[a.ArtifactID] = filepath.Join(c.Download, name)
		}
	}
	if c.Output == "json" {
		type entry struct {
			httpapi.ArtifactView
			Path string `json:"path,omitempty"`
		}
		out := []entry{}
		for _, a := range arts {
			out = append(out, entry{a, saved[a.ArtifactID]})
		}
		return render.PrintJSON(map[string]any{"artifacts": out})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ARTIFACT\tKIND\tNODE\tSTEP\tTYPE\tBYTES\tSHA256\tCREATED\tSAVED")
	for _, a := range arts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", a.ArtifactID, a.Kind, a.Node, a.StepOrdinal, a.ContentType, a.Bytes, a.SHA256[:12], a.CreatedAt, saved[a.ArtifactID])
	}
	return tw.Flush()
}
