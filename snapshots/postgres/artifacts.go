package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

// insertArtifacts: see sqlite.Store.insertArtifacts.
func (s *Store) insertArtifacts(ctx context.Context, tx pgx.Tx, st agent.Step, tenant string, now time.Time) error {
	for _, a := range st.Artifacts {
		_, err := tx.Exec(ctx, `INSERT INTO artifacts (`+storekit.ArtifactColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			a.ArtifactID, st.RunID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, storekit.ArtifactCreated(a, now))
		if pgConstraint(err, pgUniqueViolation, "artifacts_pkey") {
			return fmt.Errorf("%w: artifact id %s already recorded", agent.ErrInvalidArtifact, a.ArtifactID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Artifacts: see sqlite.Store.Artifacts.
func (s *Store) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	return collect(pgScanArtifact)(s.pool.Query(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = $1`+storekit.ArtifactOrder, runID))
}

// Artifact: see sqlite.Store.Artifact.
func (s *Store) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return agent.Artifact{}, err
	}
	a, err := pgScanArtifact(s.pool.QueryRow(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = $1 AND artifact_id = $2`, runID, artifactID))
	if errors.Is(err, pgx.ErrNoRows) {
		return agent.Artifact{}, storekit.ArtifactNotFound(runID, artifactID)
	}
	return a, err
}

// ArtifactBlobsInUse: see sqlite.Store.ArtifactBlobsInUse.
func (s *Store) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	used := map[string]bool{}
	for len(sums) > 0 {
		n := min(len(sums), storekit.MaxBlobsInUseQuery)
		batch := sums[:n]
		sums = sums[n:]
		rows, err := s.pool.Query(ctx, `SELECT DISTINCT sha256 FROM artifacts WHERE sha256 = ANY($1)`, batch)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return nil, err
			}
			used[v] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return used, nil
}

func pgScanArtifact(r storekit.RowScanner) (agent.Artifact, error) {
	var a agent.Artifact
	err := r.Scan(&a.ArtifactID, &a.RunID, &a.TenantID, &a.Node, &a.StepOrdinal, &a.Kind, &a.ContentType, &a.Bytes, &a.SHA256, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}
