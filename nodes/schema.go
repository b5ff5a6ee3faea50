package nodes

import (
	"bytes"
	"embed"
	"encoding/json"

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

// schemas are the nodes' input and output schemas, by "<Node>.input" /
// "<Node>.output".
var schemas = &schema.Set{FS: schemaFiles, Dir: "schemas", BaseURL: "https://schemas.screengraph.dev/nodes/", Name: "node schemas"}

// SchemaIDs lists the embedded schemas ("EnsureDevice.input", …), sorted.
func SchemaIDs() []string { return schemas.IDs() }

// SchemaJSON returns the text of schema id ("WaitIdle.input"), as embedded.
func SchemaJSON(id string) ([]byte, bool) { return schemas.Text(id) }

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
	doc, sch, err := schemas.Get(id)
	if err != nil {
		return Validation{}, err
	}
	strictjson.NotePass("schema-parse", id)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Validation{}, agent.Wrap(agent.ErrInvalidRequest, err, "%s: not JSON", id)
	}
	return schema.Check(id, doc, sch, v, mode)
}

// validateTree is validate on a decoded value (as jsonschema.UnmarshalJSON
// or strictjson.DecodeTree return it: numbers as json.Number): it coerces v
// in place unless mode is strict and validates it against schema id,
// returning the (coerced) value and the coercions applied. Errors as
// Validate's.
func validateTree(id string, v any, mode Mode) (any, []Coercion, error) {
	doc, sch, err := schemas.Get(id)
	if err != nil {
		return nil, nil, err
	}
	return schema.CheckTree(id, doc, sch, v, mode)
}
