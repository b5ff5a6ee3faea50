package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// MaxArtifactsPerStep bounds the evidence rows of one step (the four kinds,
// with room for a policy that repeats one).
const MaxArtifactsPerStep = 16

// MaxBlobsInUseQuery bounds the digests one ArtifactBlobsInUse call asks
// about (the cleaner asks in batches).
const MaxBlobsInUseQuery = 1000

// ArtifactColumns are the artifacts table's columns in scan order;
// ArtifactOrder is the order Artifacts lists them in.
const (
	ArtifactColumns = `artifact_id, run_id, tenant_id, node, step_ordinal, kind, content_type, bytes, sha256, created_at`
	ArtifactOrder   = ` ORDER BY step_ordinal, kind, artifact_id`
)

// CheckStepArtifacts is PrepareStep's part for Step.Artifacts.
func CheckStepArtifacts(s agent.Step) error {
	if len(s.Artifacts) > MaxArtifactsPerStep {
		return fmt.Errorf("%w: %d artifacts in one step (at most %d)", agent.ErrInvalidArtifact, len(s.Artifacts), MaxArtifactsPerStep)
	}
	for _, a := range s.Artifacts {
		if err := agent.CheckArtifact(s.RunID, a); err != nil {
			return err
		}
		if err := CheckULID("artifactId", a.ArtifactID); err != nil {
			return fmt.Errorf("%w: %v", agent.ErrInvalidArtifact, err)
		}
	}
	return nil
}

func ArtifactCreated(a agent.Artifact, now time.Time) time.Time {
	if a.CreatedAt.IsZero() {
		return now
	}
	return StoreTime(a.CreatedAt)
}

func ArtifactNotFound(runID, artifactID string) error {
	return fmt.Errorf("run %s artifact %s: %w", runID, artifactID, agent.ErrNotFound)
}

// ArtifactQueries are a dialect's reads of the artifact index.
type ArtifactQueries interface {
	// RunArtifacts lists the run's artifacts (ArtifactOrder).
	RunArtifacts(ctx context.Context, runID string) ([]agent.Artifact, error)
	// RunArtifact reads one; found false: none.
	RunArtifact(ctx context.Context, runID, artifactID string) (a agent.Artifact, found bool, err error)
	// SumsInUse returns those of sums (at most MaxBlobsInUseQuery) that
	// an artifact row names.
	SumsInUse(ctx context.Context, sums []string) ([]string, error)
}
