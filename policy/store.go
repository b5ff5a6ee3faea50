package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

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

// NewStore returns a Store holding Default() as current, or, when kv holds
// documents, those (re-validated) and the stored current version. kv may be nil.
func NewStore(ctx context.Context, kv KV) (*Store, error) {
	s := &Store{kv: kv, versions: map[int]*Policy{}}
	if kv != nil {
		raw, err := kv.GetKV(ctx, kvVersions)
		switch {
		case errors.Is(err, agent.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			var vs []int
			if err := json.Unmarshal(raw, &vs); err != nil {
				return nil, fmt.Errorf("policy store: %s: %w", kvVersions, err)
			}
			for _, v := range vs {
				doc, err := kv.GetKV(ctx, kvDoc(v))
				if err != nil {
					return nil, fmt.Errorf("policy store: version %d: %w", v, err)
				}
				// Over Default(), as Parse does: a field added after the
				// document was stored takes its default.
				p := Default()
				if err := json.Unmarshal(doc, p); err != nil {
					return nil, fmt.Errorf("policy store: version %d: %w", v, err)
				}
				if err := p.Validate(); err != nil {
					return nil, fmt.Errorf("policy store: version %d: %w", v, err)
				}
				s.versions[v] = p
			}
			cur, err := kv.GetKV(ctx, kvCurrent)
			if err != nil {
				return nil, fmt.Errorf("policy store: current: %w", err)
			}
			if s.current, err = strconv.Atoi(string(cur)); err != nil || s.versions[s.current] == nil {
				return nil, fmt.Errorf("policy store: current version %q unknown", cur)
			}
			return s, nil
		}
	}
	if err := s.Add(ctx, Default()); err != nil {
		return nil, err
	}
	return s, s.Switch(ctx, 1)
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
