package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/screengraph/screengraph-agent/agent"
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
	return render.Artifacts(c.Output, arts, saved)
}
