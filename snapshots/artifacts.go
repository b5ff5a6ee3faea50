package snapshots

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
)

var (
	_ agent.ArtifactIndex = (*Embedded)(nil)
	_ agent.ArtifactIndex = (*Postgres)(nil)
)

// maxArtifactsPerStep bounds the evidence rows of one step (the four kinds,
// with room for a policy that repeats one).
const maxArtifactsPerStep = 16

// maxBlobsInUseQuery bounds the digests one ArtifactBlobsInUse call asks
// about (the cleaner asks in batches).
const maxBlobsInUseQuery = 1000

const (
	artifactColumns   = `artifact_id, run_id, tenant_id, node, step_ordinal, kind, content_type, bytes, sha256, created_at`
	sqlInsertArtifact = `INSERT INTO artifacts (` + artifactColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	artifactOrder     = ` ORDER BY step_ordinal, kind, artifact_id`
)

// checkStepArtifacts is prepareStep's part for Step.Artifacts.
func checkStepArtifacts(s agent.Step) error {
	if len(s.Artifacts) > maxArtifactsPerStep {
		return fmt.Errorf("%w: %d artifacts in one step (at most %d)", agent.ErrInvalidArtifact, len(s.Artifacts), maxArtifactsPerStep)
	}
	for _, a := range s.Artifacts {
		if err := agent.CheckArtifact(s.RunID, a); err != nil {
			return err
		}
		if err := checkULID("artifactId", a.ArtifactID); err != nil {
			return fmt.Errorf("%w: %v", agent.ErrInvalidArtifact, err)
		}
	}
	return nil
}

func artifactCreated(a agent.Artifact, now time.Time) time.Time {
	if a.CreatedAt.IsZero() {
		return now
	}
	return storeTime(a.CreatedAt)
}

// insertArtifacts writes the step's evidence rows in its transaction.
func (s *Embedded) insertArtifacts(ctx context.Context, tx *sql.Tx, st agent.Step, tenant, now string) error {
	if len(st.Artifacts) == 0 {
		return nil
	}
	q, err := s.ws.tx(ctx, tx, sqlInsertArtifact)
	if err != nil {
		return err
	}
	nowT, _ := parseTime(now)
	for _, a := range st.Artifacts {
		_, err := q.ExecContext(ctx, a.ArtifactID, st.RunID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, fmtTime(artifactCreated(a, nowT)))
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
func (s *Embedded) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT `+artifactColumns+` FROM artifacts WHERE run_id = ?`+artifactOrder, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []agent.Artifact
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Artifact implements agent.ArtifactIndex.
func (s *Embedded) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return agent.Artifact{}, err
	}
	a, err := scanArtifact(s.queryRow(ctx, `SELECT `+artifactColumns+` FROM artifacts WHERE run_id = ? AND artifact_id = ?`, runID, artifactID))
	if errors.Is(err, sql.ErrNoRows) {
		return agent.Artifact{}, artifactNotFound(runID, artifactID)
	}
	return a, err
}

// ArtifactBlobsInUse implements agent.ArtifactIndex.
func (s *Embedded) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	used := map[string]bool{}
	for len(sums) > 0 {
		n := min(len(sums), maxBlobsInUseQuery)
		batch := sums[:n]
		sums = sums[n:]
		// Not through the statement cache: the placeholder count varies.
		in := `(?` + strings.Repeat(`, ?`, len(batch)-1) + `)`
		rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT sha256 FROM artifacts WHERE sha256 IN `+in, anySlice(batch)...)
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

func artifactNotFound(runID, artifactID string) error {
	return fmt.Errorf("run %s artifact %s: %w", runID, artifactID, agent.ErrNotFound)
}

func scanArtifact(r rowScanner) (agent.Artifact, error) {
	var a agent.Artifact
	var created string
	if err := r.Scan(&a.ArtifactID, &a.RunID, &a.TenantID, &a.Node, &a.StepOrdinal, &a.Kind, &a.ContentType, &a.Bytes, &a.SHA256, &created); err != nil {
		return a, err
	}
	t, err := parseTime(created)
	if err != nil {
		return a, fmt.Errorf("artifact %s created_at %q: %w", a.ArtifactID, created, err)
	}
	a.CreatedAt = t
	return a, nil
}

// insertArtifacts: see Embedded.insertArtifacts.
func (s *Postgres) insertArtifacts(ctx context.Context, tx pgx.Tx, st agent.Step, tenant string, now time.Time) error {
	for _, a := range st.Artifacts {
		_, err := tx.Exec(ctx, `INSERT INTO artifacts (`+artifactColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			a.ArtifactID, st.RunID, tenant, a.Node, a.StepOrdinal, a.Kind, a.ContentType, a.Bytes, a.SHA256, artifactCreated(a, now))
		if pgConstraint(err, pgUniqueViolation, "artifacts_pkey") {
			return fmt.Errorf("%w: artifact id %s already recorded", agent.ErrInvalidArtifact, a.ArtifactID)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Artifacts: see Embedded.Artifacts.
func (s *Postgres) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+artifactColumns+` FROM artifacts WHERE run_id = $1`+artifactOrder, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []agent.Artifact
	for rows.Next() {
		a, err := pgScanArtifact(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Artifact: see Embedded.Artifact.
func (s *Postgres) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return agent.Artifact{}, err
	}
	a, err := pgScanArtifact(s.pool.QueryRow(ctx, `SELECT `+artifactColumns+` FROM artifacts WHERE run_id = $1 AND artifact_id = $2`, runID, artifactID))
	if errors.Is(err, pgx.ErrNoRows) {
		return agent.Artifact{}, artifactNotFound(runID, artifactID)
	}
	return a, err
}

// ArtifactBlobsInUse: see Embedded.ArtifactBlobsInUse.
func (s *Postgres) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	used := map[string]bool{}
	for len(sums) > 0 {
		n := min(len(sums), maxBlobsInUseQuery)
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

func pgScanArtifact(r rowScanner) (agent.Artifact, error) {
	var a agent.Artifact
	err := r.Scan(&a.ArtifactID, &a.RunID, &a.TenantID, &a.Node, &a.StepOrdinal, &a.Kind, &a.ContentType, &a.Bytes, &a.SHA256, &a.CreatedAt)
	a.CreatedAt = a.CreatedAt.UTC()
	return a, err
}
