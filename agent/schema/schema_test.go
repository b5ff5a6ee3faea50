package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/screengraph/screengraph-agent/agent"
)

// testSchema uses each keyword the node schemas use (type, properties,
// additionalProperties, items, enum, required, scalar bounds).
const testSchema = `{
	"type": "object",
	"additionalProperties": false,
	"required": ["deviceName"],
	"properties": {
		"deviceName": {"type": "string", "minLength": 1},
		"timeoutMillis": {"type": "integer", "minimum": 0},
		"ratio": {"type": "number"},
		"grant": {"type": "boolean"},
		"platformVersion": {"type": "string"},
		"tags": {"type": "array", "items": {"type": "string"}},
		"mode": {"type": "string", "enum": ["REUSE_OR_CREATE", "CREATE"]},
		"level": {"type": "string", "enum": ["Low", "LOW", "high"]},
		"nested": {
			"type": "object",
			"additionalProperties": false,
			"properties": {"packageId": {"type": "string"}, "retries": {"type": "integer"}}
		},
		"labels": {"type": "object", "additionalProperties": {"type": "string"}}
	}
}`

// compileTest is testSchema's document and compiled form.
func compileTest(t *testing.T) (map[string]any, *jsonschema.Schema) {
	t.Helper()
	doc := decode(t, testSchema).(map[string]any)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("https://test/s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("https://test/s.json")
	if err != nil {
		t.Fatal(err)
	}
	return doc, sch
}

// decode reads JSON as the daemon does (numbers as json.Number).
func decode(t *testing.T, s string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func rules(cs []Coercion) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path+" "+c.Rule)
	}
	return out
}

// schemaError is err's *SchemaError, failing the test when err is not an
// invalid_request_error caused by one.
func schemaError(t *testing.T, err error) *SchemaError {
	t.Helper()
	var ae *agent.Error
	var se *SchemaError
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || ae.Retryable || !errors.As(err, &se) {
		t.Fatalf("error %v, want a not retryable invalid_request_error caused by a *SchemaError", err)
	}
	return se
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeCoerce, "coerce": ModeCoerce, " STRICT ": ModeStrict, "Lenient": ModeLenient} {
		if m, err := ParseMode(in); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, m, err, want)
		}
	}
	if _, err := ParseMode("loose"); err == nil {
		t.Error("ParseMode(loose) accepted")
	}
}

// Each coercion rule, in document order (keys sorted, so "Grant" before
// the lower-case ones), and the value it leaves.
func TestCheckTreeCoerce(t *testing.T) {
	doc, sch := compileTest(t)
	v := decode(t, `{"deviceName":"emulator-5554","timeoutMillis":"5e3","ratio":" 2.5 ","Grant":"FALSE","platformVersion":14,
		"tags":"smoke","mode":"reuse_or_create","nested":{"retries":"3"},"labels":{"0":"x"}}`)
	got, cs, err := CheckTree("Test.input", doc, sch, v, ModeCoerce)
	if err != nil {
		t.Fatal(err)
	}
	want := decode(t, `{"deviceName":"emulator-5554","timeoutMillis":5000,"ratio":2.5,"grant":false,"platformVersion":"14",
		"tags":["smoke"],"mode":"REUSE_OR_CREATE","nested":{"retries":3},"labels":{"0":"x"}}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("coerced %v\nwant %v", got, want)
	}
	wantRules := []string{"/Grant property-case", "/grant string-to-boolean", "/mode enum-case", "/nested/retries string-to-integer",
		"/platformVersion scalar-to-string", "/ratio string-to-number", "/tags value-to-array", "/timeoutMillis string-to-integer"}
	if !slices.Equal(rules(cs), wantRules) {
		t.Errorf("coercions %q\nwant %q", rules(cs), wantRules)
	}
	if cs[0].From != `"Grant"` || cs[0].To != `"grant"` || cs[7].From != `"5e3"` || cs[7].To != "5000" {
		t.Errorf("from/to: %+v %+v", cs[0], cs[7])
	}
	// Check re-encodes the coerced value.
	val, err := Check("Test.input", doc, sch, decode(t, `{"deviceName":"d","tags":{"0":"a","1":"b"}}`), "")
	if err != nil || string(val.Value) != `{"deviceName":"d","tags":["a","b"]}` || !slices.Equal(rules(val.Coercions), []string{"/tags object-to-array"}) {
		t.Errorf("Check = %s %v, %v", val.Value, rules(val.Coercions), err)
	}
}

// What no rule repairs stays as it was and is reported with its path,
// what was expected and what was received.
func TestCheckTreeCoerceRefuses(t *testing.T) {
	doc, sch := compileTest(t)
	for _, tc := range []struct {
		name, in, path, received string
	}{
		{"a fraction is no integer", `{"deviceName":"d","timeoutMillis":"5000.5"}`, "/timeoutMillis", `"5000.5"`},
		{"beyond 2^53 is no integer", `{"deviceName":"d","timeoutMillis":"1e300"}`, "/timeoutMillis", `"1e300"`},
		{"NaN is no number", `{"deviceName":"d","ratio":"NaN"}`, "/ratio", `"NaN"`},
		{"yes is no boolean", `{"deviceName":"d","grant":"yes"}`, "/grant", `"yes"`},
		{"a broken index list is no array", `{"deviceName":"d","tags":{"0":"a","2":"b"}}`, "/tags", "object"},
		{"null is not wrapped", `{"deviceName":"d","tags":null}`, "/tags", "null"},
		{"an enum variant of no value", `{"deviceName":"d","mode":"reuse"}`, "/mode", `"reuse"`},
		{"an enum variant of two values", `{"deviceName":"d","level":"low"}`, "/level", `"low"`},
		{"a bound is not coerced", `{"deviceName":"d","timeoutMillis":"-1"}`, "/timeoutMillis", "-1"},
		{"required", `{"timeoutMillis":1}`, "/deviceName", "nothing"},
		{"unknown property", `{"deviceName":"d","owner":"x"}`, "/owner", `"x"`},
		{"a case variant beside its property", `{"deviceName":"d","DeviceName":"e"}`, "/DeviceName", `"e"`},
	} {
		_, _, err := CheckTree("Test.input", doc, sch, decode(t, tc.in), ModeCoerce)
		se := schemaError(t, err)
		if se.Schema != "Test.input" || len(se.Problems) == 0 || se.Problems[0].Path != tc.path || se.Problems[0].Received != tc.received {
			t.Errorf("%s: %+v", tc.name, se.Problems)
		}
	}
	// The expectation names the type.
	_, _, err := CheckTree("Test.input", doc, sch, decode(t, `{"deviceName":"d","timeoutMillis":"x"}`), ModeCoerce)
	if p := schemaError(t, err).Problems[0]; p.String() != `/timeoutMillis: expected integer, received "x"` {
		t.Errorf("problem %q", p)
	}
}

func TestCheckTreeModes(t *testing.T) {
	doc, sch := compileTest(t)
	in := `{"deviceName":"d","timeoutMillis":"5000","owner":"x","nested":{"packageId":"a.b","extra":1}}`
	// Strict: nothing repaired, nothing dropped.
	_, cs, err := CheckTree("Test.input", doc, sch, decode(t, in), ModeStrict)
	if se := schemaError(t, err); len(cs) != 0 || len(se.Coercions) != 0 || len(se.Problems) != 3 {
		t.Errorf("strict: coercions %v, problems %v", cs, se.Problems)
	}
	// Coerce: the number repaired, the unknown properties refused, and the
	// error lists the coercions tried.
	_, _, err = CheckTree("Test.input", doc, sch, decode(t, in), ModeCoerce)
	if se := schemaError(t, err); !slices.Equal(rules(se.Coercions), []string{"/timeoutMillis string-to-integer"}) || len(se.Problems) != 2 {
		t.Errorf("coerce: coercions %v, problems %v", rules(se.Coercions), se.Problems)
	}
	// Lenient: unknown properties dropped, at any depth.
	got, cs, err := CheckTree("Test.input", doc, sch, decode(t, in), ModeLenient)
	if err != nil || !reflect.DeepEqual(got, decode(t, `{"deviceName":"d","timeoutMillis":5000,"nested":{"packageId":"a.b"}}`)) {
		t.Fatalf("lenient: %v, %v", got, err)
	}
	if !slices.Equal(rules(cs), []string{"/nested/extra drop-unknown", "/owner drop-unknown", "/timeoutMillis string-to-integer"}) ||
		cs[1].String() != `/owner: drop-unknown (was "x")` {
		t.Errorf("lenient coercions %q", rules(cs))
	}
	if _, _, err := CheckTree("Test.input", doc, sch, decode(t, `{"deviceName":"d"}`), "loose"); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

// CheckKeyCase refuses a scope key's case variant in every mode and at any
// depth (arrays and free-form objects included); strict refuses a declared
// property's case variant, which coerce and lenient correct.
func TestCheckKeyCase(t *testing.T) {
	doc, _ := compileTest(t)
	scope := []string{"tenantId", "runId"}
	for _, strict := range []bool{true, false} {
		for _, in := range []string{
			`{"TenantId":"a"}`,
			`{"nested":{"RUNID":"r"}}`,
			`{"labels":{"tenantid":"x"}}`,
			`{"tags":[{"runID":"x"}]}`,
		} {
			err := CheckKeyCase("$", decode(t, in), doc, strict, scope)
			var ae *agent.Error
			if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "never corrected") {
				t.Errorf("strict=%v %s: %v, want the scope key refused", strict, in, err)
			}
		}
		if err := CheckKeyCase("$", decode(t, `{"tenantId":"a","runId":"r","nested":{"packageId":"a.b"}}`), doc, strict, scope); err != nil {
			t.Errorf("strict=%v: exact keys refused: %v", strict, err)
		}
	}
	// A scope key under a case variant of a property is refused too.
	if err := CheckKeyCase("$", decode(t, `{"Nested":{"TenantID":"x"}}`), doc, false, scope); err == nil || !strings.Contains(err.Error(), `key "TenantID" at $.Nested`) {
		t.Errorf("a scope key under a corrected property: %v", err)
	}
	err := CheckKeyCase("$", decode(t, `{"nested":{"PackageId":"a.b"}}`), doc, true, scope)
	if err == nil || err.Error() != `invalid_request_error: key "PackageId" at $.nested matches field "packageId" only by case` &&
		!strings.Contains(err.Error(), `key "PackageId" at $.nested matches field "packageId" only by case`) {
		t.Errorf("strict property variant: %v", err)
	}
	if err := CheckKeyCase("$", decode(t, `{"nested":{"PackageId":"a.b"}}`), doc, false, scope); err != nil {
		t.Errorf("coerce refused a property variant it corrects: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	doc, _ := compileTest(t)
	if s := At(doc, []string{"nested", "retries"}); s == nil || s["type"] != "integer" {
		t.Errorf("At(nested/retries) = %v", s)
	}
	if s := At(doc, []string{"tags", "3"}); s == nil || s["type"] != "string" {
		t.Errorf("At(tags/3) = %v", s)
	}
	if s := At(doc, []string{"nope"}); s != nil {
		t.Errorf("At(nope) = %v", s)
	}
	for v, want := range map[any]string{"x": `"x"`, json.Number("2"): "2", true: "true", nil: "null", strings.Repeat("y", 100): `"` + strings.Repeat("y", 76) + "..."} {
		if got := Received(v); got != want {
			t.Errorf("Received(%v) = %q, want %q", v, got, want)
		}
	}
	if Received(map[string]any{}) != "object" || Received([]any{}) != "array" {
		t.Error("Received of containers")
	}
	obj := map[string]any{"a": "x", "n": nil, "b": json.Number("1")}
	if s, err := OptionalString(obj, "a"); err != nil || s != "x" {
		t.Errorf("OptionalString(a) = %q %v", s, err)
	}
	for _, k := range []string{"n", "missing"} {
		if s, err := OptionalString(obj, k); err != nil || s != "" {
			t.Errorf("OptionalString(%s) = %q %v", k, s, err)
		}
	}
	if _, err := OptionalString(obj, "b"); err == nil || err.Error() != "invalid_request_error: $.b: expected a string, received 1" &&
		!strings.Contains(err.Error(), "$.b: expected a string, received 1") {
		t.Errorf("OptionalString(b) = %v", err)
	}
}

// A Set compiles its directory once, offline.
func TestSet(t *testing.T) {
	fsys := fstest.MapFS{
		"schemas/A.input.json": {Data: []byte(testSchema)},
		"schemas/B.input.json": {Data: []byte(`{"type":"string"}`)},
		"schemas/notes.txt":    {Data: []byte("not a schema")},
	}
	s := &Set{FS: fsys, Dir: "schemas", BaseURL: "https://test/", Name: "test schemas"}
	if ids := s.IDs(); !slices.Equal(ids, []string{"A.input", "B.input"}) {
		t.Errorf("IDs = %v", ids)
	}
	doc, sch, err := s.Get("B.input")
	if err != nil || doc["type"] != "string" || sch.Validate("x") != nil || sch.Validate(json.Number("1")) == nil {
		t.Errorf("Get(B.input) = %v, %v", doc, err)
	}
	_, _, err = s.Get("C.input")
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "A.input, B.input") {
		t.Errorf("Get(unknown) = %v", err)
	}
	if b, ok := s.Text("A.input"); !ok || string(b) != testSchema {
		t.Errorf("Text = %q %v", b, ok)
	}
	// A $ref outside the set is never fetched: the set does not compile.
	bad := &Set{FS: fstest.MapFS{"schemas/R.json": {Data: []byte(`{"$ref":"https://example.com/x.json"}`)}}, Dir: "schemas", BaseURL: "https://test/", Name: "bad"}
	if _, _, err := bad.Get("R"); !errors.As(err, &ae) || ae.ID != agent.ErrInternal || !strings.Contains(err.Error(), "not embedded") {
		t.Errorf("a remote $ref: %v", err)
	}
}
