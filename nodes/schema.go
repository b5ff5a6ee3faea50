package nodes

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// Mode is a validation mode of schema-enforcement.md.
type Mode string

const (
	// ModeStrict validates the value as it is: no coercion.
	ModeStrict Mode = "strict"
	// ModeCoerce (the default) repairs the common mismatches first (see
	// Coercion) and rejects unknown properties.
	ModeCoerce Mode = "coerce"
	// ModeLenient coerces and also drops properties the schema does not know.
	ModeLenient Mode = "lenient"
)

// ParseMode reads a mode name, case-insensitively; "" is ModeCoerce.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "coerce":
		return ModeCoerce, nil
	case "strict":
		return ModeStrict, nil
	case "lenient":
		return ModeLenient, nil
	}
	return "", agent.Errorf(agent.ErrInvalidRequest, "validation mode %q: expected strict, coerce or lenient", s)
}

// Coercion rules, as recorded in Coercion.Rule.
const (
	RuleStringToInteger = "string-to-integer" // "5000" -> 5000
	RuleStringToNumber  = "string-to-number"  // "2.5" -> 2.5
	RuleStringToBoolean = "string-to-boolean" // "true"/"FALSE" -> true/false
	RuleScalarToString  = "scalar-to-string"  // 14 -> "14", true -> "true"
	RuleObjectToArray   = "object-to-array"   // {"0":a,"1":b} -> [a,b]
	RuleValueToArray    = "value-to-array"    // a -> [a]
	RuleEnumCase        = "enum-case"         // "reuse_or_create" -> "REUSE_OR_CREATE"
	RulePropertyCase    = "property-case"     // {"DeviceName":…} -> {"deviceName":…}
	RuleDropUnknown     = "drop-unknown"      // lenient: unknown property removed
)

// Coercion is one repair applied to a value: where (JSON pointer, "" = the
// root), which rule, and the value before and after (JSON text).
type Coercion struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
	From string `json:"from"`
	To   string `json:"to,omitempty"`
}

func (c Coercion) String() string {
	if c.Rule == RuleDropUnknown {
		return fmt.Sprintf("%s: %s (was %s)", displayPath(c.Path), c.Rule, c.From)
	}
	return fmt.Sprintf("%s: %s %s -> %s", displayPath(c.Path), c.Rule, c.From, c.To)
}

// SchemaProblem is one way a value misses its schema: the JSON pointer of the
// offending value, what the schema expects there and what was received.
type SchemaProblem struct {
	Path     string `json:"path"`
	Expected string `json:"expected"`
	Received string `json:"received"`
}

func (p SchemaProblem) String() string {
	return fmt.Sprintf("%s: expected %s, received %s", displayPath(p.Path), p.Expected, p.Received)
}

// SchemaError is the cause of the invalid_request_error Validate returns: the
// problems (sorted by path) and the coercions tried before giving up.
type SchemaError struct {
	Schema    string // "EnsureDevice.input"
	Problems  []SchemaProblem
	Coercions []Coercion
}

func (e *SchemaError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// Validation is a value that passed its schema, after coercion.
type Validation struct {
	// Value is the (coerced) value, re-encoded as JSON.
	Value json.RawMessage
	// Coercions lists the repairs applied, in document order; empty in strict
	// mode or when the value was already valid.
	Coercions []Coercion
}

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
	strictjson.NotePass("schema-parse", id)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return Validation{}, agent.Wrap(agent.ErrInvalidRequest, err, "%s: not JSON", id)
	}
	v, cs, err := validateTree(id, v, mode)
	if err != nil {
		return Validation{}, err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return Validation{}, agent.Wrap(agent.ErrInternal, err, "%s: encode", id)
	}
	return Validation{Value: out, Coercions: cs}, nil
}

// validateTree is validate on a decoded value (as jsonschema.UnmarshalJSON
// or strictjson.DecodeTree return it: numbers as json.Number): it coerces v
// in place unless mode is strict and validates it against schema id,
// returning the (coerced) value and the coercions applied. mode must be
// valid. Errors as Validate's.
func validateTree(id string, v any, mode Mode) (any, []Coercion, error) {
	s, err := schemaFor(id)
	if err != nil {
		return nil, nil, err
	}
	var cs []Coercion
	if mode != ModeStrict {
		w := &coercer{lenient: mode == ModeLenient}
		v = w.walk(v, s.doc, nil)
		cs = w.out
	}
	if verr := s.schema.Validate(v); verr != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(verr, &ve) {
			return nil, nil, agent.Wrap(agent.ErrInternal, verr, "%s: validator", id)
		}
		se := &SchemaError{Schema: id, Problems: problems(ve, v, s.doc), Coercions: cs}
		return nil, nil, &agent.Error{ID: agent.ErrInvalidRequest, Retryable: false,
			Msg: id + " does not match its schema", Err: se}
	}
	return v, cs, nil
}

// coercer walks a value along its schema and applies the coercion rules where
// the value's JSON type is not one the schema allows. The schemas use only
// type, properties, additionalProperties, items, enum, required, default and
// scalar bounds (schema_test.go guards that), so no $ref resolution is needed.
type coercer struct {
	lenient bool
	out     []Coercion
}

func (w *coercer) note(path []string, rule string, from, to any) {
	c := Coercion{Path: pointer(path), Rule: rule, From: jsonText(from)}
	if rule != RuleDropUnknown {
		c.To = jsonText(to)
	}
	w.out = append(w.out, c)
}

func (w *coercer) walk(v any, sch map[string]any, path []string) any {
	if sch == nil {
		return v
	}
	types := schemaTypes(sch)
	if len(types) > 0 && !typeAllowed(v, types) {
		v = w.convert(v, types, path)
	}
	switch t := v.(type) {
	case string:
		if enum, ok := sch["enum"].([]any); ok {
			v = w.enumCase(t, enum, path)
		}
	case map[string]any:
		w.object(t, sch, path)
	case []any:
		if items, ok := sch["items"].(map[string]any); ok {
			for i := range t {
				t[i] = w.walk(t[i], items, append(path, strconv.Itoa(i)))
			}
		}
	}
	return v
}

func (w *coercer) object(obj map[string]any, sch map[string]any, path []string) {
	props, _ := sch["properties"].(map[string]any)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := obj[k]
		if _, known := props[k]; !known {
			if name, ok := foldProperty(k, props, obj); ok {
				w.note(append(path, k), RulePropertyCase, k, name)
				delete(obj, k)
				obj[name] = val
				k = name
			}
		}
		if ps, known := props[k].(map[string]any); known {
			obj[k] = w.walk(val, ps, append(path, k))
			continue
		}
		switch ap := sch["additionalProperties"].(type) {
		case map[string]any:
			obj[k] = w.walk(val, ap, append(path, k))
		case bool:
			if !ap && w.lenient {
				w.note(append(path, k), RuleDropUnknown, val, nil)
				delete(obj, k)
			}
		}
	}
}

// foldProperty finds the one declared property equal to k under case folding
// that obj does not already hold.
func foldProperty(k string, props map[string]any, obj map[string]any) (string, bool) {
	match := ""
	for p := range props {
		if strings.EqualFold(p, k) {
			if match != "" {
				return "", false
			}
			match = p
		}
	}
	if match == "" {
		return "", false
	}
	if _, taken := obj[match]; taken {
		return "", false
	}
	return match, true
}

func (w *coercer) enumCase(s string, enum []any, path []string) any {
	match := ""
	for _, e := range enum {
		es, ok := e.(string)
		if !ok {
			continue
		}
		if es == s {
			return s
		}
		if strings.EqualFold(es, s) {
			if match != "" {
				return s // ambiguous: leave it to the validator
			}
			match = es
		}
	}
	if match == "" {
		return s
	}
	w.note(path, RuleEnumCase, s, match)
	return match
}

// convert tries each allowed type in schema order; the first rule that applies wins.
func (w *coercer) convert(v any, types []string, path []string) any {
	for _, t := range types {
		switch t {
		case "integer":
			if s, ok := v.(string); ok {
				if n, ok := parseInteger(s); ok {
					w.note(path, RuleStringToInteger, v, n)
					return n
				}
			}
		case "number":
			if s, ok := v.(string); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
					n := json.Number(strconv.FormatFloat(f, 'g', -1, 64))
					w.note(path, RuleStringToNumber, v, n)
					return n
				}
			}
		case "boolean":
			if s, ok := v.(string); ok {
				switch strings.ToLower(strings.TrimSpace(s)) {
				case "true":
					w.note(path, RuleStringToBoolean, v, true)
					return true
				case "false":
					w.note(path, RuleStringToBoolean, v, false)
					return false
				}
			}
		case "string":
			switch x := v.(type) {
			case json.Number:
				w.note(path, RuleScalarToString, v, x.String())
				return x.String()
			case bool:
				s := strconv.FormatBool(x)
				w.note(path, RuleScalarToString, v, s)
				return s
			}
		case "array":
			if obj, ok := v.(map[string]any); ok {
				if arr, ok := indexedArray(obj); ok {
					w.note(path, RuleObjectToArray, v, arr)
					return arr
				}
				if numericKeys(obj) {
					// {"0":a,"2":b}: a broken index list, not one element.
					continue
				}
			}
			if v != nil {
				arr := []any{v}
				w.note(path, RuleValueToArray, v, arr)
				return arr
			}
		}
	}
	return v
}

// parseInteger accepts "5000", " 5000 ", "5000.0" and "5e3" (integral values).
func parseInteger(s string) (json.Number, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return json.Number(strconv.FormatInt(n, 10)), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return "", false
	}
	return json.Number(strconv.FormatInt(int64(f), 10)), true
}

func numericKeys(obj map[string]any) bool {
	for k := range obj {
		if _, err := strconv.Atoi(k); err != nil {
			return false
		}
	}
	return len(obj) > 0
}

// indexedArray turns {"0":a,"1":b,…} (keys exactly 0..n-1) into [a,b,…].
func indexedArray(obj map[string]any) ([]any, bool) {
	if len(obj) == 0 {
		return nil, false
	}
	arr := make([]any, len(obj))
	for k, v := range obj {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(obj) || strconv.Itoa(i) != k {
			return nil, false
		}
		arr[i] = v
	}
	return arr, true
}

func schemaTypes(sch map[string]any) []string {
	switch t := sch["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var ts []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				ts = append(ts, s)
			}
		}
		return ts
	}
	return nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		if f, err := x.Float64(); err == nil && f == math.Trunc(f) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func typeAllowed(v any, types []string) bool {
	jt := jsonType(v)
	for _, t := range types {
		if t == jt || (t == "number" && jt == "integer") {
			return true
		}
	}
	return false
}

// problems flattens the validator's error tree into its leaves, phrased as
// expected/received against the (coerced) instance.
func problems(ve *jsonschema.ValidationError, inst any, doc map[string]any) []SchemaProblem {
	var out []SchemaProblem
	seen := map[string]bool{}
	var visit func(e *jsonschema.ValidationError)
	visit = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				visit(c)
			}
			return
		}
		for _, p := range describe(e, inst, doc) {
			if k := p.String(); !seen[k] {
				seen[k] = true
				out = append(out, p)
			}
		}
	}
	visit(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

var printer = message.NewPrinter(language.English)

func describe(e *jsonschema.ValidationError, inst any, doc map[string]any) []SchemaProblem {
	loc := e.InstanceLocation
	got := valueAt(inst, loc)
	path := pointer(loc)
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return []SchemaProblem{{Path: path, Expected: strings.Join(k.Want, " or "), Received: received(got)}}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonText(w)
		}
		return []SchemaProblem{{Path: path, Expected: "one of " + strings.Join(want, ", "), Received: received(got)}}
	case *kind.Const:
		return []SchemaProblem{{Path: path, Expected: jsonText(k.Want), Received: received(got)}}
	case *kind.Required:
		var ps []SchemaProblem
		for _, m := range k.Missing {
			sub := append(append([]string(nil), loc...), m)
			exp := "a value"
			if s := schemaAt(doc, sub); s != nil {
				exp = expectation(s)
			}
			ps = append(ps, SchemaProblem{Path: pointer(sub), Expected: exp + " (required)", Received: "nothing"})
		}
		return ps
	case *kind.AdditionalProperties:
		var ps []SchemaProblem
		allowed := "none"
		if s := schemaAt(doc, loc); s != nil {
			if props, ok := s["properties"].(map[string]any); ok {
				names := make([]string, 0, len(props))
				for n := range props {
					names = append(names, n)
				}
				sort.Strings(names)
				allowed = strings.Join(names, ", ")
			}
		}
		for _, p := range k.Properties {
			sub := append(append([]string(nil), loc...), p)
			ps = append(ps, SchemaProblem{Path: pointer(sub), Expected: "no such property (known: " + allowed + ")",
				Received: received(valueAt(inst, sub))})
		}
		return ps
	case *kind.Minimum:
		return []SchemaProblem{{Path: path, Expected: "a number >= " + k.Want.RatString(), Received: received(got)}}
	case *kind.Maximum:
		return []SchemaProblem{{Path: path, Expected: "a number <= " + k.Want.RatString(), Received: received(got)}}
	case *kind.MinLength:
		return []SchemaProblem{{Path: path, Expected: fmt.Sprintf("a string of at least %d characters", k.Want), Received: received(got)}}
	case *kind.Pattern:
		return []SchemaProblem{{Path: path, Expected: "a string matching " + k.Want, Received: received(got)}}
	case *kind.Format:
		return []SchemaProblem{{Path: path, Expected: "a " + k.Want + " string", Received: received(got)}}
	}
	return []SchemaProblem{{Path: path, Expected: e.ErrorKind.LocalizedString(printer), Received: received(got)}}
}

// expectation describes a schema in a few words: its types or enum.
func expectation(s map[string]any) string {
	if enum, ok := s["enum"].([]any); ok {
		want := make([]string, len(enum))
		for i, w := range enum {
			want[i] = jsonText(w)
		}
		return "one of " + strings.Join(want, ", ")
	}
	if ts := schemaTypes(s); len(ts) > 0 {
		return strings.Join(ts, " or ")
	}
	return "a value"
}

func schemaAt(doc map[string]any, loc []string) map[string]any {
	s := doc
	for _, tok := range loc {
		if s == nil {
			return nil
		}
		if props, ok := s["properties"].(map[string]any); ok {
			if p, ok := props[tok].(map[string]any); ok {
				s = p
				continue
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			if _, err := strconv.Atoi(tok); err == nil {
				s = items
				continue
			}
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			s = ap
			continue
		}
		return nil
	}
	return s
}

func valueAt(v any, loc []string) any {
	for _, tok := range loc {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// received renders a value for a message: scalars as JSON text (strings
// quoted, long ones cut), containers by their type.
func received(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	s := jsonText(v)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// pointer builds a JSON pointer (RFC 6901) from tokens; "" is the root.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// displayPath shows the root pointer as "/" in messages.
func displayPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
