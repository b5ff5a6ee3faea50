package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// memTokens is an in-memory Tokens for the watch's tests.
type memTokens struct {
	mu sync.Mutex
	ts []APIToken
}

func (m *memTokens) CreateToken(_ context.Context, t APIToken) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ts = append(m.ts, t)
	return nil
}
func (m *memTokens) LookupToken(context.Context, string) (APIToken, error) {
	return APIToken{}, ErrNotFound
}
func (m *memTokens) ListTokens(context.Context) ([]APIToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]APIToken(nil), m.ts...), nil
}
func (m *memTokens) RevokeToken(_ context.Context, id string) (APIToken, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.ts {
		if m.ts[i].ID == id {
			now := time.Now()
			m.ts[i].RevokedAt = &now
			return m.ts[i], nil
		}
	}
	return APIToken{}, ErrNotFound
}
func (m *memTokens) HasTokens(context.Context) (bool, error) { return len(m.ts) > 0, nil }

// A watched context ends, with cause ErrTokenRevoked, at the first poll
// after its token's revoke; other tokens' contexts go on; a watch of a
// token already seen revoked ends at once; the hooks hear of it.
func TestRevocationWatch(t *testing.T) {
	ctx := context.Background()
	ts := &memTokens{}
	ts.CreateToken(ctx, APIToken{ID: "a", TenantID: "acme"})
	ts.CreateToken(ctx, APIToken{ID: "b", TenantID: "beta"})
	w := &RevocationWatch{Tokens: ts}
	var hooked []string
	w.OnPoll(func(revoked func(string) bool) {
		for _, id := range []string{"a", "b"} {
			if revoked(id) {
				hooked = append(hooked, id)
			}
		}
	})
	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	a1, stopA1 := w.Watch(ctx, "a")
	defer stopA1()
	a2, stopA2 := w.Watch(ctx, "a")
	stopA2() // ended by its owner: no longer watched
	b, stopB := w.Watch(ctx, "b")
	defer stopB()
	if a1.Err() != nil || b.Err() != nil || len(hooked) != 0 {
		t.Fatal("ended before any revoke")
	}
	ts.RevokeToken(ctx, "a")
	if a1.Err() != nil {
		t.Fatal("ended before the poll saw the revoke")
	}
	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(a1), ErrTokenRevoked) || b.Err() != nil || errors.Is(context.Cause(a2), ErrTokenRevoked) {
		t.Fatalf("after the poll: a1 %v, a2 %v, b %v", context.Cause(a1), context.Cause(a2), b.Err())
	}
	if len(hooked) != 1 || hooked[0] != "a" || !w.Revoked("a") || w.Revoked("b") {
		t.Fatalf("hooks saw %v", hooked)
	}
	late, stopLate := w.Watch(ctx, "a")
	defer stopLate()
	if !errors.Is(context.Cause(late), ErrTokenRevoked) {
		t.Fatalf("a watch of a revoked token: %v", context.Cause(late))
	}
}
