package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/internal/storekit"
)

func scanToken(sc storekit.RowScanner) (agent.APIToken, error) {
	var (
		t       agent.APIToken
		admin   int
		created string
		revoked sql.NullString
	)
	if err := sc.Scan(&t.ID, &t.TenantID, &admin, &t.Hash, &t.NATSPasswordHash, &created, &revoked); err != nil {
		return t, err
	}
	t.Admin = admin != 0
	var err error
	if t.CreatedAt, err = storekit.ParseTime(created); err != nil {
		return t, err
	}
	if revoked.Valid {
		r, err := storekit.ParseTime(revoked.String)
		if err != nil {
			return t, err
		}
		t.RevokedAt = &r
	}
	return t, nil
}

// CreateToken implements agent.Tokens.
func (s *Store) CreateToken(ctx context.Context, t agent.APIToken) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	if t, err = storekit.CheckToken(t, s.clock); err != nil {
		return err
	}
	admin := 0
	if t.Admin {
		admin = 1
	}
	_, err = w.ExecContext(ctx, `INSERT INTO api_tokens (`+storekit.TokenCols+`) VALUES (?, ?, ?, ?, ?, ?, NULL)`,
		t.ID, t.TenantID, admin, t.Hash, t.NATSPasswordHash, storekit.FmtTime(t.CreatedAt))
	if sqliteConstraint(err, "api_tokens.") {
		return fmt.Errorf("api token %s: %w", t.ID, agent.ErrTokenExists)
	}
	return err
}

// LookupToken implements agent.Tokens.
func (s *Store) LookupToken(ctx context.Context, hash string) (agent.APIToken, error) {
	t, err := scanToken(s.queryRow(ctx, `SELECT `+storekit.TokenCols+` FROM api_tokens WHERE token_hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("api token: %w", agent.ErrNotFound)
	}
	return t, err
}

// ListTokens implements agent.Tokens.
func (s *Store) ListTokens(ctx context.Context) ([]agent.APIToken, error) {
	return collect(scanToken)(s.query(ctx, `SELECT `+storekit.TokenCols+` FROM api_tokens ORDER BY created_at, token_id`))
}

// RevokeToken implements agent.Tokens.
func (s *Store) RevokeToken(ctx context.Context, id string) (agent.APIToken, error) {
	w, err := s.writer()
	if err != nil {
		return agent.APIToken{}, err
	}
	if _, err := w.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL`,
		storekit.FmtTime(s.clock.Now()), id); err != nil {
		return agent.APIToken{}, err
	}
	t, err := scanToken(w.QueryRowContext(ctx, `SELECT `+storekit.TokenCols+` FROM api_tokens WHERE token_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("api token %s: %w", id, agent.ErrNotFound)
	}
	return t, err
}

// HasTokens implements agent.Tokens.
func (s *Store) HasTokens(ctx context.Context) (bool, error) {
	var n int
	err := s.queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM api_tokens)`).Scan(&n)
	return n != 0, err
}
