package service

import (
	"context"
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
