package service

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/screengraph/screengraph-agent/agent"
)

// Artifacts lists the run's evidence artifacts (agent.ErrNotFound for an
// unknown run or one sc does not see; none when the daemon keeps no
// evidence).
func (s *Service) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if s.cfg.Artifacts == nil {
		if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
			return nil, err
		}
		return nil, nil
	}
	return s.cfg.Artifacts.Artifacts(ctx, sc, runID)
}

// OpenArtifact returns one artifact's row and its bytes (the caller closes
// them). agent.ErrNotFound for an unknown run, one sc does not see, or an
// artifact the run does not have; a row whose blob is gone (a bucket
// emptied behind the daemon's back) is an internal_error naming it.
func (s *Service) OpenArtifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, io.ReadCloser, error) {
	if s.cfg.Artifacts == nil || s.cfg.Blobs == nil {
		if _, err := s.store.GetRun(ctx, sc, runID); err != nil {
			return agent.Artifact{}, nil, err
		}
		return agent.Artifact{}, nil, fmt.Errorf("run %s artifact %s: %w", runID, artifactID, agent.ErrNotFound)
	}
	a, err := s.cfg.Artifacts.Artifact(ctx, sc, runID, artifactID)
	if err != nil {
		return agent.Artifact{}, nil, err
	}
	rc, err := s.cfg.Blobs.Open(ctx, a.SHA256)
	if err != nil {
		return agent.Artifact{}, nil, agent.Wrap(agent.ErrInternal, err, "run %s artifact %s: blob %s", runID, artifactID, a.SHA256)
	}
	return a, rc, nil
}

// ScreenshotRuns bounds how many of a device's latest leases
// LatestScreenshot looks through for a run with a screenshot.
const ScreenshotRuns = 20

// LatestScreenshot returns the newest screenshot artifact kept by a run sc
// sees on this daemon's device with that serial, and its bytes (the
// caller closes them): the runs of the device's ScreenshotRuns newest
// leases (of runs sc sees: a tenant never gets another tenant's screen),
// newest first. agent.ErrNotFound when none of them kept one.
func (s *Service) LatestScreenshot(ctx context.Context, sc agent.Scope, serial string) (agent.Artifact, io.ReadCloser, error) {
	if err := sc.Valid(); err != nil {
		return agent.Artifact{}, nil, err
	}
	if serial == "" || len(serial) > 255 {
		return agent.Artifact{}, nil, agent.Errorf(agent.ErrInvalidRequest, "serial: must be 1-255 bytes")
	}
	notFound := fmt.Errorf("device %s: no screenshot of a run you can see: %w", serial, agent.ErrNotFound)
	if s.cfg.Artifacts == nil || s.cfg.Blobs == nil {
		return agent.Artifact{}, nil, notFound
	}
	ls, err := s.cfg.Leases.LeasePage(ctx, sc, agent.LeaseQuery{Device: s.DeviceKey(ctx, serial), Limit: ScreenshotRuns})
	if err != nil {
		return agent.Artifact{}, nil, err
	}
	seen := map[string]bool{}
	for _, l := range ls {
		if seen[l.RunID] {
			continue
		}
		seen[l.RunID] = true
		arts, err := s.cfg.Artifacts.Artifacts(ctx, sc, l.RunID)
		if errors.Is(err, agent.ErrNotFound) {
			continue // pruned meanwhile
		}
		if err != nil {
			return agent.Artifact{}, nil, err
		}
		best := newestScreenshot(arts)
		if best == nil {
			continue
		}
		rc, err := s.cfg.Blobs.Open(ctx, best.SHA256)
		if err != nil {
			return agent.Artifact{}, nil, agent.Wrap(agent.ErrInternal, err, "run %s artifact %s: blob %s", l.RunID, best.ArtifactID, best.SHA256)
		}
		return *best, rc, nil
	}
	return agent.Artifact{}, nil, notFound
}

// newestScreenshot is the PNG screenshot of arts (one run's) with the
// highest step ordinal, the highest artifact id among those; nil when none.
func newestScreenshot(arts []agent.Artifact) *agent.Artifact {
	var best *agent.Artifact
	for i := range arts {
		a := &arts[i]
		if a.Kind != agent.ArtifactScreenshot || a.ContentType != "image/png" {
			continue
		}
		if best == nil || a.StepOrdinal > best.StepOrdinal || a.StepOrdinal == best.StepOrdinal && a.ArtifactID > best.ArtifactID {
			best = a
		}
	}
	return best
}
