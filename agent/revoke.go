package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrTokenRevoked is the cause of a request context ended by the
// revocation of the token that authenticated it (RevocationWatch).
var ErrTokenRevoked = errors.New("the API token was revoked")

// DefaultRevocationInterval is how often a RevocationWatch reads the
// tokens: what a token opened ends within about this (and well within
// RevocationBound) after `token revoke` commits, on every daemon sharing
// the store.
const DefaultRevocationInterval = time.Second

// RevocationBound is the documented bound: a revoked token's open HTTP
// streams and NATS connections end within it.
const RevocationBound = 5 * time.Second

// RevocationWatch ends what a token opened once the token is revoked: an
// HTTP request (an SSE stream, any long poll) authenticated once at its
// start would otherwise outlive its token. It polls Tokens.ListTokens
// (every Interval), so a revocation made by another process (the `token
// revoke` CLI, another daemon of a fleet on the same Postgres) is seen as
// surely as one made here. Run it with Run; the zero value of the other
// fields is usable.
type RevocationWatch struct {
	Tokens Tokens
	// Interval between reads; DefaultRevocationInterval when 0.
	Interval time.Duration
	// Logf reports failed reads (the watch keeps what it knew); may be nil.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	revoked map[string]bool
	watches map[string]map[*int]context.CancelCauseFunc
	hooks   []func(revoked func(tokenID string) bool)
}

// Watch returns ctx bound to tokenID: it is canceled, with cause
// ErrTokenRevoked, when the watch sees the token revoked (at once if it
// already has). Call stop when the work ends.
func (w *RevocationWatch) Watch(ctx context.Context, tokenID string) (_ context.Context, stop func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	key := new(int)
	w.mu.Lock()
	if w.revoked[tokenID] {
		w.mu.Unlock()
		cancel(ErrTokenRevoked)
		return cctx, func() {}
	}
	if w.watches == nil {
		w.watches = map[string]map[*int]context.CancelCauseFunc{}
	}
	if w.watches[tokenID] == nil {
		w.watches[tokenID] = map[*int]context.CancelCauseFunc{}
	}
	w.watches[tokenID][key] = cancel
	w.mu.Unlock()
	return cctx, func() {
		w.mu.Lock()
		delete(w.watches[tokenID], key)
		if len(w.watches[tokenID]) == 0 {
			delete(w.watches, tokenID)
		}
		w.mu.Unlock()
		cancel(context.Canceled)
	}
}

// Revoked reports whether the watch has seen tokenID revoked.
func (w *RevocationWatch) Revoked(tokenID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.revoked[tokenID]
}

// OnPoll adds f, called after every read that found a revoked token, with
// Revoked: where a token's other connections (NATS clients) are ended.
func (w *RevocationWatch) OnPoll(f func(revoked func(tokenID string) bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hooks = append(w.hooks, f)
}

// Run polls until ctx ends.
func (w *RevocationWatch) Run(ctx context.Context) {
	every := w.Interval
	if every <= 0 {
		every = DefaultRevocationInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil && ctx.Err() == nil && w.Logf != nil {
			w.Logf("token revocation watch: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads the tokens once, cancels the watches of revoked ones and
// calls the OnPoll hooks. Errors: the store's (nothing changes then).
func (w *RevocationWatch) Poll(ctx context.Context) error {
	ts, err := w.Tokens.ListTokens(ctx)
	if err != nil {
		return err
	}
	revoked := map[string]bool{}
	for _, t := range ts {
		if t.RevokedAt != nil {
			revoked[t.ID] = true
		}
	}
	var cancels []context.CancelCauseFunc
	w.mu.Lock()
	w.revoked = revoked
	for id, ws := range w.watches {
		if revoked[id] {
			for _, c := range ws {
				cancels = append(cancels, c)
			}
			delete(w.watches, id)
		}
	}
	hooks := slices.Clone(w.hooks)
	w.mu.Unlock()
	for _, c := range cancels {
		c(ErrTokenRevoked)
	}
	if len(revoked) > 0 {
		for _, h := range hooks {
			h(func(id string) bool { return revoked[id] })
		}
	}
	return nil
}
