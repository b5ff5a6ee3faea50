package sqlite

import (
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

const (
	sqlInsertArtifact = `INSERT INTO artifacts (` + storekit.ArtifactColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

func scanArtifact(r storekit.RowScanner) (agent.Artifact, error) {
	var a agent.Artifact
	var created string
	if err := r.Scan(&a.ArtifactID, &a.RunID, &a.TenantID, &a.Node, &a.StepOrdinal, &a.Kind, &a.ContentType, &a.Bytes, &a.SHA256, &created); err != nil {
		return a, err
	}
	t, err := storekit.ParseTime(created)
	if err != nil {
		return a, fmt.Errorf("artifact %s created_at %q: %w", a.ArtifactID, created, err)
	}
	a.CreatedAt = t
	return a, nil
}
