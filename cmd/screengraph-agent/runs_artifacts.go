package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
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
	var list httpapi.ArtifactsResponse
	if err := cl.call(ctx, "GET", runPath(c.RunID, "/artifacts"), c.RunID, nil, &list); err != nil {
		return c.failHTTP("runs artifacts", err)
	}
	saved := map[string]string{}
	if c.Download != "" {
		root, err := os.OpenRoot(c.Download)
		if err != nil {
			return c.failHTTP("runs artifacts", agent.Wrap(agent.ErrInvalidRequest, err, "--download %s", c.Download))
		}
		defer root.Close()
		for _, a := range list.Artifacts {
			name, err := cl.download(ctx, root, c.RunID, a)
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
		for _, a := range list.Artifacts {
			out = append(out, entry{a, saved[a.ArtifactID]})
		}
		return printJSON(map[string]any{"artifacts": out})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ARTIFACT\tKIND\tNODE\tSTEP\tTYPE\tBYTES\tSHA256\tCREATED\tSAVED")
	for _, a := range list.Artifacts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", a.ArtifactID, a.Kind, a.Node, a.StepOrdinal, a.ContentType, a.Bytes, a.SHA256[:12], a.CreatedAt, saved[a.ArtifactID])
	}
	return tw.Flush()
}

// download saves artifact a of the run into root under
// httpapi.ArtifactFileName (no separators; os.Root refuses any escape,
// symlinks included), created exclusively, checked against the listed
// size and sha256; a file that does not check out is removed.
func (c *client) download(ctx context.Context, root *os.Root, runID string, a httpapi.ArtifactView) (string, error) {
	name := httpapi.ArtifactFileName(a.ArtifactID, a.Kind, a.ContentType)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+runPath(runID, "/artifacts/"+url.PathEscape(a.ArtifactID)), nil)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--server %s", c.base)
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", c.unreachable(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return "", c.refused(resp.StatusCode, b, runID)
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", agent.Wrap(agent.ErrInvalidRequest, err, "--download: %s", name)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, agent.MaxArtifactBytes+1))
	if err == nil && (int64(len(data)) != a.Bytes || blobs.Sum(data) != a.SHA256) {
		err = fmt.Errorf("artifact %s: got %d bytes with sha256 %s, listed %s bytes with %s", a.ArtifactID, len(data), blobs.Sum(data), strconv.FormatInt(a.Bytes, 10), a.SHA256)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
		return "", agent.Wrap(agent.ErrNetwork, err, "downloading artifact %s", a.ArtifactID)
	}
	return name, nil
}
