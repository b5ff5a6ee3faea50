// Package schema checks a JSON value against a JSON Schema in the modes of
// schema-enforcement.md: strict (as it is), coerce (the common mismatches
// repaired first, each repair listed as a Coercion) and lenient (coerce,
// and unknown properties dropped). Problems are reported as JSON pointer,
// expected, received (SchemaError). The schemas it walks use only type,
// properties, additionalProperties, items, enum, required, default and
// scalar bounds, so no $ref is resolved.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/screengraph/screengraph-agent/agent"
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

// Check validates v (decoded by jsonschema.UnmarshalJSON, or any tree with
// numbers as json.Number) against sch, compiled from doc, in mode ("" =
// coerce); id names the schema in messages ("EnsureDevice.input"). It
// returns the (coerced) value re-encoded and the coercions applied. Errors
// as CheckTree's.
func Check(id string, doc map[string]any, sch *jsonschema.Schema, v any, mode Mode) (Validation, error) {
	v, cs, err := CheckTree(id, doc, sch, v, mode)
	if err != nil {
		return Validation{}, err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return Validation{}, agent.Wrap(agent.ErrInternal, err, "%s: encode", id)
	}
	return Validation{Value: out, Coercions: cs}, nil
}

// CheckTree is Check without the re-encoding: it coerces v in place
// (unless mode is strict) and returns it with the coercions. A value that
// cannot be made to fit is an *agent.Error invalid_request_error (not
// retryable) whose cause is a *SchemaError; an unknown mode is
// invalid_request_error too.
func CheckTree(id string, doc map[string]any, sch *jsonschema.Schema, v any, mode Mode) (any, []Coercion, error) {
	if mode == "" {
		mode = ModeCoerce
	}
	if mode != ModeStrict && mode != ModeCoerce && mode != ModeLenient {
		return nil, nil, agent.Errorf(agent.ErrInvalidRequest, "validation mode %q: expected strict, coerce or lenient", mode)
	}
	var cs []Coercion
	if mode != ModeStrict {
		v, cs = Coerce(v, doc, mode == ModeLenient)
	}
	if verr := sch.Validate(v); verr != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(verr, &ve) {
			return nil, nil, agent.Wrap(agent.ErrInternal, verr, "%s: validator", id)
		}
		se := &SchemaError{Schema: id, Problems: problems(ve, v, doc), Coercions: cs}
		return nil, nil, &agent.Error{ID: agent.ErrInvalidRequest, Retryable: false,
			Msg: id + " does not match its schema", Err: se}
	}
	return v, cs, nil
}

// Coerce applies the coercion rules to v along doc (lenient: also drop
// unknown properties) and returns the value and the repairs, in document
// order.
func Coerce(v any, doc map[string]any, lenient bool) (any, []Coercion) {
	w := &coercer{lenient: lenient}
	v = w.walk(v, doc, nil)
	return v, w.out
}

// At is the sub-schema of doc at the JSON pointer tokens loc, nil when
// none.
func At(doc map[string]any, loc []string) map[string]any { return schemaAt(doc, loc) }

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
		if to, rule, ok := convertTo(t, v); ok {
			w.note(path, rule, v, to)
			return to
		}
	}
	return v
}

// convertTo converts v to JSON type t by the rule that applies, if one does.
func convertTo(t string, v any) (any, string, bool) {
	s, isString := v.(string)
	switch {
	case t == "integer" && isString:
		n, ok := parseInteger(s)
		return n, RuleStringToInteger, ok
	case t == "number" && isString:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		ok := err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), RuleStringToNumber, ok
	case t == "boolean" && isString:
		l := strings.ToLower(strings.TrimSpace(s))
		return l == "true", RuleStringToBoolean, l == "true" || l == "false"
	case t == "string":
		switch x := v.(type) {
		case json.Number:
			return x.String(), RuleScalarToString, true
		case bool:
			return strconv.FormatBool(x), RuleScalarToString, true
		}
	case t == "array":
		return toArray(v)
	}
	return nil, "", false
}

// toArray: {"0":a,"1":b} -> [a,b] (object-to-array); a broken index list
// ({"0":a,"2":b}) is not one element; anything else non-null -> [v].
func toArray(v any) (any, string, bool) {
	if obj, ok := v.(map[string]any); ok {
		if arr, ok := indexedArray(obj); ok {
			return arr, RuleObjectToArray, true
		}
		if numericKeys(obj) {
			return nil, "", false
		}
	}
	if v == nil {
		return nil, "", false
	}
	return []any{v}, RuleValueToArray, true
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
		return missing(k, loc, doc)
	case *kind.AdditionalProperties:
		return unknownProperties(k, loc, inst, doc)
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

// missing describes the required properties k found missing at loc.
func missing(k *kind.Required, loc []string, doc map[string]any) []SchemaProblem {
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
}

// unknownProperties describes the properties k found at loc that the
// schema there does not declare, naming those it does.
func unknownProperties(k *kind.AdditionalProperties, loc []string, inst any, doc map[string]any) []SchemaProblem {
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

// Received names v's JSON type as a problem report says it ("object",
// "array", "string", ...).
func Received(v any) string { return received(v) }

// CheckKeyCase walks v along its schema doc and refuses a key that matches
// one of scopeKeys only by case, at any depth and in any mode (a scope key is
// never corrected), and, when strict, any key that matches a declared
// property only by case (coerce and lenient mode correct those:
// RulePropertyCase). path names v in messages ("$.ensureDevice"). Errors:
// invalid_request_error naming the key and its path.
func CheckKeyCase(path string, v any, doc map[string]any, strict bool, scopeKeys []string) error {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			child, err := keyCaseChild(path, k, t, doc, strict, scopeKeys)
			if err != nil {
				return err
			}
			if err := CheckKeyCase(path+"."+k, val, child, strict, scopeKeys); err != nil {
				return err
			}
		}
	case []any:
		items, _ := doc["items"].(map[string]any)
		for i, e := range t {
			if err := CheckKeyCase(fmt.Sprintf("%s[%d]", path, i), e, items, strict, scopeKeys); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyCaseChild checks key k of obj (at path, under schema doc) and returns
// the schema its value is walked with: its property's, additionalProperties',
// or, for a key the coercer will correct, the corrected property's.
func keyCaseChild(path, k string, obj, doc map[string]any, strict bool, scopeKeys []string) (map[string]any, error) {
	for _, sk := range scopeKeys {
		if k != sk && strings.EqualFold(k, sk) {
			return nil, agent.Errorf(agent.ErrInvalidRequest, "key %q at %s matches field %q only by case (a scope key is never corrected)", k, path, sk)
		}
	}
	props, _ := doc["properties"].(map[string]any)
	if child, known := props[k].(map[string]any); known {
		return child, nil
	}
	if strict {
		for p := range props {
			if strings.EqualFold(p, k) {
				return nil, agent.Errorf(agent.ErrInvalidRequest, "key %q at %s matches field %q only by case", k, path, p)
			}
		}
	}
	child, _ := doc["additionalProperties"].(map[string]any)
	if child == nil && !strict {
		if name, ok := foldProperty(k, props, obj); ok {
			child, _ = props[name].(map[string]any)
		}
	}
	return child, nil
}
