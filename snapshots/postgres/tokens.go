package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

func pgScanToken(row storekit.RowScanner) (agent.APIToken, error) {
	var t agent.APIToken
	err := row.Scan(&t.ID, &t.TenantID, &t.Admin, &t.Hash, &t.NATSPasswordHash, &t.CreatedAt, &t.RevokedAt)
	t.CreatedAt = t.CreatedAt.UTC()
	if t.RevokedAt != nil {
		r := t.RevokedAt.UTC()
		t.RevokedAt = &r
	}
	return t, err
}

// CreateToken: see sqlite.Store.CreateToken.
func (s *Store) CreateToken(ctx context.Context, t agent.APIToken) error {
	t, err := storekit.CheckToken(t, s.clock)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO api_tokens (`+storekit.TokenCols+`) VALUES ($1, $2, $3, $4, $5, $6, NULL)`,
		t.ID, t.TenantID, t.Admin, t.Hash, t.NATSPasswordHash, t.CreatedAt)
	if pgConstraint(err, pgUniqueViolation, "") {
		return fmt.Errorf("api token %s: %w", t.ID, agent.ErrTokenExists)
	}
	return err
}

// LookupToken: see sqlite.Store.LookupToken.
func (s *Store) LookupToken(ctx context.Context, hash string) (agent.APIToken, error) {
	t, err := pgScanToken(s.pool.QueryRow(ctx, `SELECT `+storekit.TokenCols+` FROM api_tokens WHERE token_hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("api token: %w", agent.ErrNotFound)
	}
	return t, err
}

// ListTokens: see sqlite.Store.ListTokens.
func (s *Store) ListTokens(ctx context.Context) ([]agent.APIToken, error) {
	return collect(pgScanToken)(s.pool.Query(ctx, `SELECT `+storekit.TokenCols+` FROM api_tokens ORDER BY created_at, token_id`))
}

// RevokeToken: see sqlite.Store.RevokeToken. One statement: the first revoke's
// time is kept.
func (s *Store) RevokeToken(ctx context.Context, id string) (agent.APIToken, error) {
	t, err := pgScanToken(s.pool.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1)
		WHERE token_id = $2 RETURNING `+storekit.TokenCols, storekit.StoreTime(s.clock.Now()), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("api token %s: %w", id, agent.ErrNotFound)
	}
	return t, err
}

// HasTokens: see sqlite.Store.HasTokens.
func (s *Store) HasTokens(ctx context.Context) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_tokens)`).Scan(&ok)
	return ok, err
}
