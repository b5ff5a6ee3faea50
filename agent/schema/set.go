package schema

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/screengraph/screengraph-agent/agent"
)

// Set is the JSON Schema documents of one directory of a file system (an
// embed.FS), compiled once on first use. A schema's id is its file name
// without ".json" ("WaitIdle.input"); its URL, for the compiler, is
// BaseURL + id + ".json".
type Set struct {
	FS      fs.FS
	Dir     string // "schemas"
	BaseURL string // "https://schemas.screengraph.dev/nodes/"
	Name    string // what the set is, in errors ("node schemas")

	once sync.Once
	byID map[string]compiled
	err  error
}

type compiled struct {
	doc    map[string]any // the schema document, for the coercion walk
	schema *jsonschema.Schema
}

// load compiles every schema of the set once. The compiler gets each
// file as a resource and a loader that refuses everything else, so nothing is
// fetched from the network.
func (s *Set) load() {
	s.byID = map[string]compiled{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{})
	names, err := fs.Glob(s.FS, path.Join(s.Dir, "*.json"))
	if err != nil {
		s.err = err
		return
	}
	docs := map[string]map[string]any{}
	for _, n := range names {
		b, err := fs.ReadFile(s.FS, n)
		if err != nil {
			s.err = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			s.err = fmt.Errorf("%s: %w", n, err)
			return
		}
		m, ok := doc.(map[string]any)
		if !ok {
			s.err = fmt.Errorf("%s: not a JSON object", n)
			return
		}
		id := strings.TrimSuffix(path.Base(n), ".json")
		docs[id] = m
		if err := c.AddResource(s.url(id), m); err != nil {
			s.err = fmt.Errorf("%s: %w", n, err)
			return
		}
	}
	for id, doc := range docs {
		sch, err := c.Compile(s.url(id))
		if err != nil {
			s.err = fmt.Errorf("schema %s: %w", id, err)
			return
		}
		s.byID[id] = compiled{doc: doc, schema: sch}
	}
}

func (s *Set) url(id string) string { return s.BaseURL + id + ".json" }

type offlineLoader struct{}

func (offlineLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not embedded (schemas are never fetched)", url)
}

// Get returns schema id's document and compiled form. Errors (*agent.Error):
// internal_error when the set does not compile, invalid_request_error for an
// id the set does not hold (the message lists the known ones).
func (s *Set) Get(id string) (map[string]any, *jsonschema.Schema, error) {
	s.once.Do(s.load)
	if s.err != nil {
		return nil, nil, agent.Wrap(agent.ErrInternal, s.err, "%s", s.Name)
	}
	c, ok := s.byID[id]
	if !ok {
		return nil, nil, agent.Errorf(agent.ErrInvalidRequest, "no schema %q (known: %s)", id, strings.Join(s.IDs(), ", "))
	}
	return c.doc, c.schema, nil
}

// IDs lists the set's schema ids, sorted (none when it does not compile).
func (s *Set) IDs() []string {
	s.once.Do(s.load)
	ids := make([]string, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Text returns the text of schema id as the file system holds it.
func (s *Set) Text(id string) ([]byte, bool) {
	b, err := fs.ReadFile(s.FS, path.Join(s.Dir, id+".json"))
	return b, err == nil
}
