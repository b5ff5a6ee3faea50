package storekit

import (
	"fmt"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

const TokenCols = `token_id, tenant_id, admin, token_hash, nats_password_hash, created_at, revoked_at`

// CheckToken validates a token record before it is stored.
func CheckToken(t agent.APIToken, clock agent.Clock) (agent.APIToken, error) {
	if t.ID == "" || t.TenantID == "" || len(t.Hash) != 64 {
		return t, fmt.Errorf("%w: api token needs an id, a tenant and a 64-hex-digit SHA-256 hash", snapshots.ErrInvalid)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = clock.Now()
	}
	t.CreatedAt = StoreTime(t.CreatedAt)
	t.RevokedAt = nil
	return t, nil
}
