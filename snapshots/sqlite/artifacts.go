package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

var (
	_ agent.ArtifactIndex = (*Store)(nil)
)

const (
	sqlInsertArtifact = `INSERT INTO artifacts (` + storekit.ArtifactColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// insertArtifacts writes the step's evidence rows in its transaction.
func (s *Store) insertArtifacts(ctx context.Context, tx *sql.Tx, st agent.Step, tenant, now string) error {
	if len(st.Artifacts) == 0 {
		return nil
	}
	q, err := s.ws.tx(ctx, tx, sqlInsertArtifact)
	if err != nil {
		return err
	}
	nowT, _ := storekit.ParseTime(now)
	for _, a := range st.Artifacts {
		_, err := q.ExecContext(ctx, a.ArtifactID, st.RunID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, storekit.FmtTime(storekit.ArtifactCreated(a, nowT)))
		if sqliteConstraint(err, "artifacts.artifact_id") {
			return fmt.Errorf("%w: artifact id %s already recorded", agent.ErrInvalidArtifact, a.ArtifactID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Artifacts implements agent.ArtifactIndex.
func (s *Store) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	return collect(scanArtifact)(s.query(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = ?`+storekit.ArtifactOrder, runID))
}

// Artifact implements agent.ArtifactIndex.
func (s *Store) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return agent.Artifact{}, err
	}
	a, err := scanArtifact(s.queryRow(ctx, `SELECT `+storekit.ArtifactColumns+` FROM artifacts WHERE run_id = ? AND artifact_id = ?`, runID, artifactID))
	if errors.Is(err, sql.ErrNoRows) {
		return agent.Artifact{}, storekit.ArtifactNotFound(runID, artifactID)
	}
	return a, err
}

// ArtifactBlobsInUse implements agent.ArtifactIndex.
func (s *Store) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	used := map[string]bool{}
	for len(sums) > 0 {
		n := min(len(sums), storekit.MaxBlobsInUseQuery)
		batch := sums[:n]
		sums = sums[n:]
		// Not through the statement cache: the placeholder count varies.
		in := `(?` + strings.Repeat(`, ?`, len(batch)-1) + `)`
		rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT sha256 FROM artifacts WHERE sha256 IN `+in, storekit.AnySlice(batch)...)
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
