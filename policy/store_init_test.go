package policy_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/policy"
)

// slowCurrentKV is a KV another daemon is initialising: the versions and
// their documents are there, the current version appears only after
// missing reads of it (then as set by that other daemon).
type slowCurrentKV struct {
	*agenttest.Store
	mu      sync.Mutex
	missing int    // reads of policy/current still answered not found
	later   string // what the other daemon writes then ("" = never)
}

func (k *slowCurrentKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	if key == "policy/current" {
		k.mu.Lock()
		if k.missing > 0 {
			k.missing--
			if k.missing == 0 && k.later != "" {
				k.mu.Unlock()
				if err := k.Store.PutKV(ctx, key, []byte(k.later)); err != nil {
					return nil, err
				}
				return nil, agent.ErrNotFound
			}
			k.mu.Unlock()
			return nil, agent.ErrNotFound
		}
		k.mu.Unlock()
	}
	return k.Store.GetKV(ctx, key)
}

func halfWritten(t *testing.T, missing int, later string) *slowCurrentKV {
	t.Helper()
	st := agenttest.NewStore()
	for k, v := range map[string]string{"policy/versions": "[1,2]", "policy/v1": `{"version":1}`, "policy/v2": `{"version":2}`} {
		if err := st.PutKV(context.Background(), k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	return &slowCurrentKV{Store: st, missing: missing, later: later}
}

// A daemon that finds the policy store half-written (another daemon's
// initialisation in flight: the versions there, the current one not yet)
// waits and reads again instead of failing at start (issue 23 item 8:
// "policy store: current: kv "policy/current": not found").
func TestNewStoreWaitsForAHalfWrittenStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := halfWritten(t, 5, "2")
		s, err := policy.NewStore(context.Background(), kv)
		if err != nil {
			t.Fatalf("NewStore on a store being initialised: %v", err)
		}
		if s.Current().Version() != 2 {
			t.Fatalf("current %d, want 2 (what the other daemon wrote)", s.Current().Version())
		}
	})
}

// A store left half-written for good (a start that crashed before
// initialisation was one transaction) is completed after the wait: the
// lowest listed version becomes current, only where no current is set.
func TestNewStoreCompletesAnAbandonedStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &missingKV{Store: halfWritten(t, 0, "").Store, key: "policy/current"}
		s, err := policy.NewStore(context.Background(), kv)
		if err != nil {
			t.Fatalf("NewStore on an abandoned half-written store: %v", err)
		}
		if s.Current().Version() != 1 {
			t.Fatalf("current %d, want 1 (the lowest listed)", s.Current().Version())
		}
	})
}

// missingKV has no value under key until one is put there.
type missingKV struct {
	*agenttest.Store
	mu  sync.Mutex
	key string
	set bool
}

func (k *missingKV) GetKV(ctx context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	set := k.set
	k.mu.Unlock()
	if key == k.key && !set {
		return nil, agent.ErrNotFound
	}
	return k.Store.GetKV(ctx, key)
}

func (k *missingKV) PutKV(ctx context.Context, key string, v []byte) error {
	if key == k.key {
		k.mu.Lock()
		k.set = true
		k.mu.Unlock()
	}
	return k.Store.PutKV(ctx, key, v)
}

// Daemons initialising one empty store at once all get version 1 current.
func TestNewStoreConcurrentInitialisation(t *testing.T) {
	kv := agenttest.NewStore()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			s, err := policy.NewStore(context.Background(), kv)
			if err == nil && s.Current().Version() != 1 {
				err = errors.New("current is not version 1")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
