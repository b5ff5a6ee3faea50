package nodes

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/schema"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// The validation modes and coercion records of agent/schema, under the
// names the nodes' API has always used.
type (
	Mode       = schema.Mode
	Coercion   = schema.Coercion
	Validation = schema.Validation
)

// Modes (agent/schema).
const (
	ModeStrict  = schema.ModeStrict
	ModeCoerce  = schema.ModeCoerce
	ModeLenient = schema.ModeLenient
)

// ParseMode reads a mode name, case-insensitively; "" is ModeCoerce.
func ParseMode(s string) (Mode, error) { return schema.ParseMode(s) }

//go:embed schemas/*.json
var schemaFiles embed.FS

type compiled struct {
	doc    map[string]any // the schema document, for the coercion walk
	schema *jsonschema.Schema
}

var (
	schemasOnce sync.Once
	schemas     map[string]compiled // by "<Node>.input" / "<Node>.output"
	schemasErr  error
)

// loadSchemas compiles every embedded schema once. The compiler gets each
// file as a resource and a loader that refuses everything else, so nothing is
// fetched from the network.
func loadSchemas() {
	schemas = map[string]compiled{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{})
	names, err := fs.Glob(schemaFiles, "schemas/*.json")
	if err != nil {
		schemasErr = err
		return
	}
	docs := map[string]map[string]any{}
	for _, n := range names {
		b, err := schemaFiles.ReadFile(n)
		if err != nil {
			schemasErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			schemasErr = fmt.Errorf("%s: %w", n, err)
			return
		}
		m, ok := doc.(map[string]any)
		if !ok {
			schemasErr = fmt.Errorf("%s: not a JSON object", n)
			return
		}
		id := strings.TrimSuffix(strings.TrimPrefix(n, "schemas/"), ".json")
		docs[id] = m
		if err := c.AddResource(schemaURL(id), m); err != nil {
			schemasErr = fmt.Errorf("%s: %w", n, err)
			return
		}
	}
	for id, doc := range docs {
		s, err := c.Compile(schemaURL(id))
		if err != nil {
			schemasErr = fmt.Errorf("schema %s: %w", id, err)
			return
		}
		schemas[id] = compiled{doc: doc, schema: s}
	}
}

func schemaURL(id string) string { return "https://schemas.screengraph.dev/nodes/" + id + ".json" }

type offlineLoader struct{}

func (offlineLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not embedded (schemas are never fetched)", url)
}

func schemaFor(id string) (compiled, error) {
	schemasOnce.Do(loadSchemas)
	if schemasErr != nil {
		return compiled{}, agent.Wrap(agent.ErrInternal, schemasErr, "node schemas")
	}
	s, ok := schemas[id]
	if !ok {
		return compiled{}, agent.Errorf(agent.ErrInvalidRequest, "no schema %q (known: %s)", id, strings.Join(SchemaIDs(), ", "))
	}
	return s, nil
}

// SchemaIDs lists the embedded schemas ("EnsureDevice.input", …), sorted.
func SchemaIDs() []string {
	schemasOnce.Do(loadSchemas)
	ids := make([]string, 0, len(schemas))
	for id := range schemas {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// SchemaJSON returns the text of schema id ("WaitIdle.input"), as embedded.
func SchemaJSON(id string) ([]byte, bool) {
	b, err := schemaFiles.ReadFile("schemas/" + id + ".json")
	return b, err == nil
}

// Validate checks raw (a node input, JSON) against schemas/<nodeName>.input.json
// in mode ("" = coerce). It returns the value to use (coerced) and the
// coercions applied. When raw is not JSON, or cannot be made to fit, the error
// is an *agent.Error with id invalid_request_error (not retryable) whose
// message lists each problem as `<JSON path>: expected <what>, received
// <what>`, e.g. `/idleHeuristicsConfiguration/maxWaitMillis: expected integer,
// received "soon"`; its cause is a *SchemaError with the same problems.
func Validate(nodeName string, raw []byte, mode Mode) (Validation, error) {
	return validate(nodeName+".input", raw, mode)
}

// ValidateOutput is Validate against schemas/<nodeName>.output.json.
func ValidateOutput(nodeName string, raw []byte, mode Mode) (Validation, error) {
	return validate(nodeName+".output", raw, mode)
}

// DecodeInput validates raw as nodeName's input (see Validate) and decodes the
// coerced value into v (a pointer to the node's input struct).
func DecodeInput(nodeName string, raw []byte, mode Mode, v any) ([]Coercion, error) {
	val, err := Validate(nodeName, raw, mode)
	if err != nil {
		return nil, err
	}
	strictjson.NotePass("unmarshal", nodeName)
	if err := json.Unmarshal(val.Value, v); err != nil {
		return val.Coercions, agent.Wrap(agent.ErrInvalidRequest, err, "%s input", nodeName)
	}
	return val.Coercions, nil
}

func validate(id string, raw []byte, mode Mode) (Validation, error) {
	if mode == "" {
		mode = ModeCoerce
	}
	if mode != ModeStrict && mode != ModeCoerce && mode != ModeLenient {
		return Validation{}, agent.Errorf(agent.ErrInvalidRequest, "validation mode %q: expected strict, coerce or lenient", mode)
	}
	s, err := schemaFor(id)
	if err != nil {
		return Validation{}, err
	}
	strictjson.NotePass("schema-parse", id)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Validation{}, agent.Wrap(agent.ErrInvalidRequest, err, "%s: not JSON", id)
	}
	return schema.Check(id, s.doc, s.schema, v, mode)
}

// validateTree is validate on a decoded value (as jsonschema.UnmarshalJSON
// or strictjson.DecodeTree return it: numbers as json.Number): it coerces v
// in place unless mode is strict and validates it against schema id,
// returning the (coerced) value and the coercions applied. Errors as
// Validate's.
func validateTree(id string, v any, mode Mode) (any, []Coercion, error) {
	s, err := schemaFor(id)
	if err != nil {
		return nil, nil, err
	}
	return schema.CheckTree(id, s.doc, s.schema, v, mode)
}
