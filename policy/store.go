package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// KV is where a Store persists its documents (agent.Store has these two).
type KV interface {
	GetKV(ctx context.Context, key string) ([]byte, error)
	PutKV(ctx context.Context, key string, value []byte) error
}

// KV keys: one JSON document per version, the list of versions, the current one.
const (
	kvVersions = "policy/versions"
	kvCurrent  = "policy/current"
)

func kvDoc(v int) string { return "policy/v" + strconv.Itoa(v) }

// ErrVersionExists is returned by Add for a version already stored with
// other content: versions are immutable, a change is a new version.
var ErrVersionExists = errors.New("policy version already exists with other content")

// Store keeps policy versions and the current one (used by runs that ask for
// version 0). With a KV it persists them, so a restarted daemon resolves the
// version a resumed run's snapshot names. Safe for concurrent use.
type Store struct {
	mu       sync.RWMutex
	kv       KV
	versions map[int]*Policy
	current  int
}

var _ agent.PolicySource = (*Store)(nil)

// KVInit is a KV that can set several keys in one transaction, each only
// where it is not set yet (an insert that does nothing on conflict): the
// fleet's Postgres and the embedded store. Keys already set keep their
// values, so daemons initialising one shared store at once all succeed
// and agree on what the first of them wrote.
type KVInit interface {
	InitKV(ctx context.Context, kvs map[string][]byte) error
}

// errHalfWritten: the KV lists versions but lacks a listed document or the
// current version (another daemon's initialisation or Add in flight, or one
// that crashed half-way before initialisation was one transaction).
var errHalfWritten = errors.New("policy store half-written")

// halfWrittenWait bounds how long NewStore reads a half-written KV again
// before it completes the missing current version itself.
const halfWrittenWait = 3 * time.Second

// NewStore returns a Store holding Default() as current, or, when kv holds
// documents, those (re-validated) and the stored current version. kv may be
// nil. An empty kv is initialised with Default() as version 1, current: in
// one transaction, only where absent, when kv is a KVInit (daemons starting
// together on a fresh shared store all succeed and agree). A kv found
// half-written (versions listed, a document or the current version not
// there yet) is read again, up to halfWrittenWait, after which a missing
// current version is set, only where still absent, to the lowest listed
// one. Errors: the KV's, a stored document that does not validate, a
// listed document still missing after the wait, ctx's.
func NewStore(ctx context.Context, kv KV) (*Store, error) {
	s := &Store{kv: kv, versions: map[int]*Policy{}}
	if kv == nil {
		if err := s.Add(ctx, Default()); err != nil {
			return nil, err
		}
		return s, s.Switch(ctx, 1)
	}
	deadline := time.Now().Add(halfWrittenWait)
	pause := 20 * time.Millisecond
	for {
		found, lowest, err := s.load(ctx)
		switch {
		case err == nil && found:
			return s, nil
		case err == nil:
			if err := s.initKV(ctx); err != nil {
				return nil, err
			}
			continue // read back what the first initialisation wrote
		case !errors.Is(err, errHalfWritten):
			return nil, err
		case time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
			case <-time.After(pause):
			}
			pause = min(2*pause, 250*time.Millisecond)
			continue
		case lowest == 0:
			return nil, err // a listed document is missing
		}
		// Still no current version: a start that crashed half-way.
		if err := s.putAbsent(ctx, map[string][]byte{kvCurrent: []byte(strconv.Itoa(lowest))}); err != nil {
			return nil, err
		}
		deadline = time.Now().Add(halfWrittenWait)
	}
}

// load reads the versions, their documents and the current version from
// s.kv into s. found is false for a KV without versions. A half-written KV
// gives errHalfWritten, with lowest the lowest listed version when only the
// current version is missing (0 otherwise).
func (s *Store) load(ctx context.Context) (found bool, lowest int, err error) {
	raw, err := s.kv.GetKV(ctx, kvVersions)
	switch {
	case errors.Is(err, agent.ErrNotFound):
		return false, 0, nil
	case err != nil:
		return false, 0, err
	}
	var vs []int
	if err := json.Unmarshal(raw, &vs); err != nil {
		return false, 0, fmt.Errorf("policy store: %s: %w", kvVersions, err)
	}
	versions := map[int]*Policy{}
	for _, v := range vs {
		doc, err := s.kv.GetKV(ctx, kvDoc(v))
		if errors.Is(err, agent.ErrNotFound) {
			return false, 0, fmt.Errorf("policy store: version %d listed, %w: %w", v, errHalfWritten, err)
		}
		if err != nil {
			return false, 0, fmt.Errorf("policy store: version %d: %w", v, err)
		}
		// Over Default(), as Parse does: a field added after the
		// document was stored takes its default.
		p := Default()
		if err := json.Unmarshal(doc, p); err != nil {
			return false, 0, fmt.Errorf("policy store: version %d: %w", v, err)
		}
		if err := p.Validate(); err != nil {
			return false, 0, fmt.Errorf("policy store: version %d: %w", v, err)
		}
		versions[v] = p
	}
	cur, err := s.kv.GetKV(ctx, kvCurrent)
	if errors.Is(err, agent.ErrNotFound) && len(vs) > 0 {
		return false, slices.Min(vs), fmt.Errorf("policy store: current: %w: %w", errHalfWritten, err)
	}
	if err != nil {
		return false, 0, fmt.Errorf("policy store: current: %w", err)
	}
	current, err := strconv.Atoi(string(cur))
	if err != nil || versions[current] == nil {
		return false, 0, fmt.Errorf("policy store: current version %q unknown", cur)
	}
	s.mu.Lock()
	s.versions, s.current = versions, current
	s.mu.Unlock()
	return true, 0, nil
}

// initKV writes Default() as version 1, the list [1] and current 1, each
// only where absent, in one transaction when the KV can (KVInit).
func (s *Store) initKV(ctx context.Context) error {
	p := Default()
	if err := p.Validate(); err != nil {
		return err
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return err
	}
	list, _ := json.Marshal([]int{p.PolicyVersion})
	return s.putAbsent(ctx, map[string][]byte{kvDoc(p.PolicyVersion): doc, kvVersions: list, kvCurrent: []byte(strconv.Itoa(p.PolicyVersion))})
}

// putAbsent sets the keys of kvs that are not set, in one transaction on a
// KVInit. Another KV (one process's: tests, an in-memory store) gets them
// one by one, documents before the list and the list before the current
// version, so a reader waits rather than fails.
func (s *Store) putAbsent(ctx context.Context, kvs map[string][]byte) error {
	if ki, ok := s.kv.(KVInit); ok {
		if err := ki.InitKV(ctx, kvs); err != nil {
			return fmt.Errorf("policy store: initialise: %w", err)
		}
		return nil
	}
	keys := slices.Collect(maps.Keys(kvs))
	order := func(k string) int {
		switch k {
		case kvVersions:
			return 1
		case kvCurrent:
			return 2
		}
		return 0
	}
	slices.SortFunc(keys, func(a, b string) int { return order(a) - order(b) })
	for _, k := range keys {
		if _, err := s.kv.GetKV(ctx, k); err == nil {
			continue
		} else if !errors.Is(err, agent.ErrNotFound) {
			return err
		}
		if err := s.kv.PutKV(ctx, k, kvs[k]); err != nil {
			return err
		}
	}
	return nil
}

// Add stores p under its version after validation. Adding the same content
// again is a no-op; other content under an existing version is
// ErrVersionExists.
func (s *Store) Add(ctx context.Context, p *Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.versions[p.PolicyVersion]; ok {
		prev, _ := json.Marshal(old)
		if string(prev) == string(doc) {
			return nil
		}
		return fmt.Errorf("version %d: %w", p.PolicyVersion, ErrVersionExists)
	}
	if s.kv != nil {
		vs := append(s.sortedVersions(), p.PolicyVersion)
		slices.Sort(vs)
		list, _ := json.Marshal(vs)
		// Document first, then the list: a crash in between leaves an
		// unlisted document, never a listed missing one.
		if err := s.kv.PutKV(ctx, kvDoc(p.PolicyVersion), doc); err != nil {
			return err
		}
		if err := s.kv.PutKV(ctx, kvVersions, list); err != nil {
			return err
		}
	}
	cp := *p
	s.versions[p.PolicyVersion] = &cp
	return nil
}

// Switch makes version current for runs that start with version 0. Running
// runs switch by a control request (agent.KindPolicySwitchRequested).
// Errors: an unknown version (wraps agent.ErrNotFound).
func (s *Store) Switch(ctx context.Context, version int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions[version] == nil {
		return fmt.Errorf("policy version %d: %w", version, agent.ErrNotFound)
	}
	if s.kv != nil {
		if err := s.kv.PutKV(ctx, kvCurrent, []byte(strconv.Itoa(version))); err != nil {
			return err
		}
	}
	s.current = version
	return nil
}

// Get returns version (0 = current); the document is shared, do not modify
// it. Errors wrap agent.ErrNotFound.
func (s *Store) Get(version int) (*Policy, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if version == 0 {
		version = s.current
	}
	p := s.versions[version]
	if p == nil {
		return nil, fmt.Errorf("policy version %d: %w", version, agent.ErrNotFound)
	}
	return p, nil
}

// Current returns the current version's document.
func (s *Store) Current() *Policy {
	p, _ := s.Get(0)
	return p
}

// Versions lists the stored versions, ascending.
func (s *Store) Versions() []int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sortedVersions()
}

func (s *Store) sortedVersions() []int {
	vs := make([]int, 0, len(s.versions))
	for v := range s.versions {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// Policy implements agent.PolicySource. A version this Store does not hold
// is read from its KV (Lookup): in a fleet, every version any daemon
// loaded is fleet data in the shared store.
func (s *Store) Policy(ctx context.Context, version int) (agent.RetryPolicy, error) {
	p, err := s.Lookup(ctx, version)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Lookup is Get, reading through to the KV for a version not held here:
// another daemon of the fleet added it to the shared store (versions are
// immutable, so the document read is kept). Errors: a version in neither
// (wraps agent.ErrNotFound), a KV failure (the caller retries), a stored
// document that does not validate.
func (s *Store) Lookup(ctx context.Context, version int) (*Policy, error) {
	p, err := s.Get(version)
	if err == nil || s.kv == nil || version == 0 {
		return p, err
	}
	doc, kerr := s.kv.GetKV(ctx, kvDoc(version))
	if errors.Is(kerr, agent.ErrNotFound) {
		return nil, err
	}
	if kerr != nil {
		return nil, fmt.Errorf("policy version %d: %w", version, kerr)
	}
	p = Default()
	if err := json.Unmarshal(doc, p); err != nil {
		return nil, fmt.Errorf("policy store: version %d: %w", version, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("policy store: version %d: %w", version, err)
	}
	if p.PolicyVersion != version {
		return nil, fmt.Errorf("policy store: %s holds version %d", kvDoc(version), p.PolicyVersion)
	}
	s.mu.Lock()
	if old := s.versions[version]; old != nil {
		p = old
	} else {
		s.versions[version] = p
	}
	s.mu.Unlock()
	return p, nil
}

// AddFiles loads each policy document in files (YAML or JSON, Load) and
// adds it (the same content again is a no-op), then makes current the one
// of the file named current ("": the first of files; none when files is
// empty). Errors: invalid_request_error naming the file: a document that
// does not load or validate, or other content under a version already
// stored (ErrVersionExists).
func (s *Store) AddFiles(ctx context.Context, files []string, current string) error {
	if current == "" && len(files) > 0 {
		current = files[0]
	}
	for _, f := range files {
		p, err := Load(f)
		if err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
		}
		if err := s.Add(ctx, p); err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
		}
		if f == current {
			if err := s.Switch(ctx, p.PolicyVersion); err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
			}
		}
	}
	return nil
}
