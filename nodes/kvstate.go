package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/screengraph/screengraph-agent/agent"
)

// KV is the small key-value state a store keeps across restarts
// (agent.Store's GetKV/PutKV; GetKV returns agent.ErrNotFound for a key
// never put).
type KV interface {
	GetKV(ctx context.Context, key string) ([]byte, error)
	PutKV(ctx context.Context, key string, value []byte) error
}

// StoreSessions is the daemon's SessionMemory: the Appium session id per
// Appium server and device serial, kept in the store so a restarted daemon
// reuses the session (EnsureDevice's REUSE_OR_CREATE). The key is
// "appium/session/<12 hex digits of sha256(Server)>/<serial>": in a fleet
// the store is shared and another daemon's Appium does not know the
// session, and the URL may carry credentials (only its hash is stored).
// Forget stores an empty id (Get then returns "").
type StoreSessions struct {
	KV     KV
	Server string // the Appium server's URL
}

var _ SessionMemory = StoreSessions{}

func (k StoreSessions) sessionKey(serial string) string {
	sum := sha256.Sum256([]byte(k.Server))
	return "appium/session/" + hex.EncodeToString(sum[:6]) + "/" + serial
}

// Get returns the remembered session id ("" when none); errors are the store's.
func (k StoreSessions) Get(ctx context.Context, serial string) (string, error) {
	b, err := k.KV.GetKV(ctx, k.sessionKey(serial))
	if errors.Is(err, agent.ErrNotFound) {
		return "", nil
	}
	return string(b), err
}

// Put remembers id as serial's session on Server.
func (k StoreSessions) Put(ctx context.Context, serial, id string) error {
	return k.KV.PutKV(ctx, k.sessionKey(serial), []byte(id))
}

// Forget drops serial's session on Server.
func (k StoreSessions) Forget(ctx context.Context, serial string) error {
	return k.KV.PutKV(ctx, k.sessionKey(serial), nil)
}

// StoreVerifications is the daemon's VerificationCache: the verified signer
// digests of an installed build, kept in the store under
// "provision/verified/<the VerificationKey as JSON>" as a JSON array. A
// value that does not decode counts as no record (the build is verified
// again).
//
// Records read or put are also kept in memory (at most maxVerified), so a
// warm ProvisionApp does not read the store: a VerificationKey names one
// installed build (an install or update changes lastUpdateTime and
// codePath), whose signers never change, so a remembered record cannot go
// stale. A key without a record is read from the store every time
// (another process may record it). Use a pointer; safe for concurrent use.
type StoreVerifications struct {
	KV KV

	mu    sync.Mutex
	known map[VerificationKey][]string
}

// maxVerified bounds StoreVerifications' memory; when full it starts again
// empty (the store keeps every record).
const maxVerified = 1024

var _ VerificationCache = (*StoreVerifications)(nil)

func verificationKey(k VerificationKey) string {
	b, _ := json.Marshal(k)
	return "provision/verified/" + string(b)
}

// Get returns the signers recorded for key; ok false when none.
func (k *StoreVerifications) Get(ctx context.Context, key VerificationKey) ([]string, bool, error) {
	k.mu.Lock()
	s, ok := k.known[key]
	k.mu.Unlock()
	if ok {
		return slices.Clone(s), true, nil
	}
	b, err := k.KV.GetKV(ctx, verificationKey(key))
	if errors.Is(err, agent.ErrNotFound) || (err == nil && len(b) == 0) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var signers []string
	if err := json.Unmarshal(b, &signers); err != nil {
		return nil, false, nil
	}
	k.remember(key, signers)
	return signers, true, nil
}

// Put records signers for key.
func (k *StoreVerifications) Put(ctx context.Context, key VerificationKey, signers []string) error {
	b, _ := json.Marshal(signers)
	if err := k.KV.PutKV(ctx, verificationKey(key), b); err != nil {
		return err
	}
	k.remember(key, signers)
	return nil
}

func (k *StoreVerifications) remember(key VerificationKey, signers []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.known == nil || len(k.known) >= maxVerified {
		k.known = map[VerificationKey][]string{}
	}
	k.known[key] = slices.Clone(signers)
}
