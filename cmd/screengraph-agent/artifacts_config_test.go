package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device/artifacts"
)

// The artifact rules come from flags, config keys and SCREENGRAPH_ARTIFACT_*
// lists, and build the fetcher's typed policy; a daemon without file roots
// refuses file:// at submission, naming the flag.
func TestServeArtifactConfig(t *testing.T) {
	clearScreengraphEnv(t)
	root := t.TempDir()
	t.Setenv("SCREENGRAPH_ARTIFACT_FILE_ROOTS", root+","+t.TempDir())
	t.Setenv("SCREENGRAPH_ARTIFACT_ALLOW_CIDR", "127.0.0.3/32,10.1.0.0/16")
	c := &serveCmd{DataDir: t.TempDir(), ArtifactS3Bucket: []string{"builds", "apks"}, ArtifactMaxBytes: "512MiB",
		ArtifactIdleTimeout: 5 * time.Second}
	cfg, err := c.load()
	if err != nil {
		t.Fatal(err)
	}
	ac := cfg.Artifacts()
	if len(ac.FileRoots) != 2 || ac.FileRoots[0] != root || !slices.Equal(ac.AllowCIDRs, []string{"127.0.0.3/32", "10.1.0.0/16"}) ||
		!slices.Equal(ac.S3Buckets, []string{"builds", "apks"}) || ac.MaxBytes != "512MiB" || ac.IdleTimeout != 5*time.Second {
		t.Fatalf("artifact config %+v", ac)
	}
	opt, err := ac.DaemonOptions(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if opt.MaxBytes != 512<<20 || len(opt.Policy.AllowCIDRs) != 2 || !opt.Policy.ConfineFiles {
		t.Errorf("options %+v", opt)
	}
	if _, err := (artifacts.Config{MaxBytes: "lots"}).DaemonOptions(t.TempDir(), nil); !isInvalid(err) {
		t.Errorf("bad size: %v", err)
	}
	if _, err := (artifacts.Config{AllowCIDRs: []string{"10.0.0.0/33"}}).DaemonOptions(t.TempDir(), nil); !isInvalid(err) {
		t.Errorf("bad CIDR: %v", err)
	}

	// No roots: the fetcher serve builds refuses file:// at submission.
	none, err := artifacts.Config{}.DaemonOptions(t.TempDir(), func(context.Context) (bool, error) { return true, nil })
	if err != nil {
		t.Fatal(err)
	}
	f, err := artifacts.New(none)
	if err != nil {
		t.Fatal(err)
	}
	var e *agent.Error
	if err := f.CheckRef("file:///etc/passwd"); !errors.As(err, &e) || e.ID != agent.ErrInvalidRequest || e.Code != artifacts.CodeFileNoRoots {
		t.Errorf("file:// without roots: %v", err)
	}
	if err := f.CheckRef(""); err != nil {
		t.Errorf("no artifact: %v", err)
	}
}

func isInvalid(err error) bool {
	var e *agent.Error
	return errors.As(err, &e) && e.ID == agent.ErrInvalidRequest
}
