package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// TokenPrefix starts every API token: "sgat_" (ScreenGraph agent token) and
// 43 characters of unpadded base64url, 32 random bytes. The prefix lets
// RedactString find a token in any text and secret scanners recognize one.
const TokenPrefix = "sgat_"

// APIToken is the stored record of one API token. The token itself is never
// stored: only Hash, the hex SHA-256 of the token string. A token is scoped to
// TenantID (its runs and events only) unless Admin (every tenant).
// RevokedAt is nil while the token is valid.
type APIToken struct {
	ID        string     `json:"id"`
	TenantID  string     `json:"tenantId"`
	Admin     bool       `json:"admin"`
	Hash      string     `json:"-"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	// NATSPasswordHash is the bcrypt hash of the token, for a generated
	// nats-server configuration (user = ID, password = the token); "" when
	// none was made.
	NATSPasswordHash string `json:"-"`
}

// ErrTokenExists: CreateToken with an id or hash already stored.
var ErrTokenExists = errors.New("api token already exists")

// Tokens is the API token port (HTTP Bearer and NATS authentication). The
// embedded store and Postgres implement it; snapshots/storetest.RunTokens is
// its contract.
type Tokens interface {
	// CreateToken stores t (ID, TenantID, Hash required; CreatedAt defaults
	// to the store's clock). Errors: ErrTokenExists.
	CreateToken(ctx context.Context, t APIToken) error
	// LookupToken returns the token whose Hash is hash, revoked or not
	// (the caller checks RevokedAt); ErrNotFound when none.
	LookupToken(ctx context.Context, hash string) (APIToken, error)
	// ListTokens returns every token, oldest first.
	ListTokens(ctx context.Context) ([]APIToken, error)
	// RevokeToken sets RevokedAt of the token with that id (a second revoke
	// keeps the first time); ErrNotFound when none.
	RevokeToken(ctx context.Context, id string) (APIToken, error)
	// HasTokens reports whether any token was ever created (revoked ones
	// count: revoking the last token must not open the API to everyone).
	HasTokens(ctx context.Context) (bool, error)
}

// NewToken returns a fresh API token string: TokenPrefix and 32 random bytes
// in unpadded base64url.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken is the stored form of a token: hex SHA-256 of the token string.
// The token carries 256 random bits, so a plain (unsalted, fast) hash is
// enough to make a stolen database useless for authentication.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// LooksLikeToken reports whether s has the shape of an API token.
func LooksLikeToken(s string) bool {
	return tokenShape.MatchString(s)
}

var tokenShape = regexp.MustCompile(`^` + TokenPrefix + `[A-Za-z0-9_-]{43}$`)

// tenantShape is what a tenant id of a token may be: it is one NATS subject
// token as is (snapshots.Subject maps '.', '*', '>' and blanks to '_', so
// "a.b" and "a_b" would share subjects).
var tenantShape = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidTenantID reports whether id may scope a token: 1-64 of A-Z, a-z,
// 0-9, '_' and '-'.
func ValidTenantID(id string) bool { return tenantShape.MatchString(id) }

// Principal is who made a request, from its token: TokenID and the token's
// Scope (admin, or one tenant). A nil *Principal means no tokens are
// configured (the single-host default: the Admin scope).
type Principal struct {
	TokenID string
	Scope   Scope
}

// ScopeOf is the scope of p: p.Scope, or Admin() for a nil p (no tokens).
func ScopeOf(p *Principal) Scope {
	if p == nil {
		return Admin()
	}
	return p.Scope
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal of ctx (nil when none).
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// ErrUnauthenticated: tokens are configured and the request carries none,
// or an unknown or revoked one (HTTP 401).
var ErrUnauthenticated = errors.New("a valid API token is required (Authorization: Bearer <token>)")

// ErrForbidden: the token may not do this (HTTP 403).
var ErrForbidden = errors.New("forbidden for this token")

// Authenticate resolves a token string against ts: the token's principal,
// or an error wrapping ErrUnauthenticated (empty, unknown or revoked token).
// Other errors are the store's.
func Authenticate(ctx context.Context, ts Tokens, token string) (*Principal, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, ErrUnauthenticated
	}
	t, err := ts.LookupToken(ctx, HashToken(token))
	if errors.Is(err, ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	// The lookup is by hash in an index; compare again in constant time so
	// the answer does not depend on how much of the hash matched.
	if subtle.ConstantTimeCompare([]byte(t.Hash), []byte(HashToken(token))) != 1 {
		return nil, ErrUnauthenticated
	}
	if t.RevokedAt != nil {
		return nil, errors.Join(ErrUnauthenticated, errors.New("token "+t.ID+" is revoked"))
	}
	if t.Admin {
		return &Principal{TokenID: t.ID, Scope: Admin()}, nil
	}
	sc, err := Tenant(t.TenantID)
	if err != nil {
		// A stored tenant token whose tenant id breaks the rule (made before
		// the rule) authenticates nobody rather than scoping to a malformed id.
		return nil, errors.Join(ErrUnauthenticated, fmt.Errorf("token %s: %w", t.ID, err))
	}
	return &Principal{TokenID: t.ID, Scope: sc}, nil
}
