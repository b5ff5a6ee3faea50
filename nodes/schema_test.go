package nodes

import (
	"encoding/json"
	"errors"
	"github.com/screengraph/screengraph-agent/agent/schema"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/screengraph/screengraph-agent/agent"
)

func mustValidate(t *testing.T, node, in string, mode Mode) Validation {
	t.Helper()
	v, err := Validate(node, []byte(in), mode)
	if err != nil {
		t.Fatalf("Validate(%s, %s): %v", node, mode, err)
	}
	return v
}

func jsonEq(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("value (-want +got):\n%s", d)
	}
}

func rules(cs []Coercion) []string {
	var r []string
	for _, c := range cs {
		r = append(r, c.Path+" "+c.Rule)
	}
	sort.Strings(r)
	return r
}

func schemaErr(t *testing.T, err error) *schema.SchemaError {
	t.Helper()
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || ae.Retryable {
		t.Fatalf("want non-retryable invalid_request_error, got %#v", err)
	}
	var se *schema.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("want *schema.SchemaError cause, got %v", err)
	}
	return se
}

func TestValidateSpecExamplesPassStrict(t *testing.T) {
	// The input examples of screengraph-nodes.md, verbatim.
	ex := map[string]string{
		NodeEnsureDevice: `{"runId":"01J...","tenantId":"01T...","projectId":"01P...","iterationOrdinalNumber":0,
			"deviceConfiguration":{"platformName":"android","deviceName":"Pixel_7_Emu","platformVersion":"14","appiumServerUrl":"http://127.0.0.1:4723"},
			"driverReusePolicy":"REUSE_OR_CREATE"}`,
		NodeProvisionApp: `{"runId":"01J...","tenantId":"01T...","projectId":"01P...","deviceRuntimeContext":{"driverSessionId":"b6f7..."},
			"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","apkStorageObjectReference":"s3://bucket/builds/app-1.2.3.apk","expectedBuildSignatureSha256":"ab12..."},
			"installationPolicy":"INSTALL_IF_MISSING"}`,
		NodeLaunchOrAttach: `{"runId":"01J...","deviceRuntimeContext":{"driverSessionId":"b6f7..."},
			"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"},"launchAttachMode":"LAUNCH_OR_ATTACH"}`,
		NodeWaitIdle: `{"runId":"01J...","idleHeuristicsConfiguration":{"minQuietMillis":400,"maxWaitMillis":5000}}`,
	}
	for node, in := range ex {
		v := mustValidate(t, node, in, ModeStrict)
		if len(v.Coercions) != 0 {
			t.Errorf("%s: strict applied coercions %v", node, v.Coercions)
		}
		jsonEq(t, v.Value, in)
	}
	// The output examples, verbatim.
	outs := map[string]string{
		NodeEnsureDevice: `{"runId":"01J...","deviceRuntimeContext":{"driverSessionId":"b6f7...","deviceId":"emulator-5554",
			"capabilitiesEcho":{"platformName":"android","automationName":"UiAutomator2"},"healthProbeStatus":"HEALTHY"},
			"nodeName":"EnsureDevice","stepOrdinal":0,"iterationOrdinalNumber":0,"policyVersion":1,"resumeToken":"01ULID-ensuredevice-000",
			"randomSeed":987654,"nodeExecutionOutcomeStatus":"SUCCESS","errorId":null,"retryable":null,"humanReadableFailureSummary":null}`,
		NodeLaunchOrAttach: `{"runId":"01J...","applicationForegroundContext":{"currentPackageId":"com.example.app",
			"currentActivityName":"com.example.app.HomeActivity","appBroughtToForegroundTimestamp":"2025-10-23T12:00:20Z"},
			"nodeName":"LaunchOrAttach","stepOrdinal":2,"iterationOrdinalNumber":0,"policyVersion":1,"resumeToken":"01ULID-launch-002",
			"randomSeed":222222,"nodeExecutionOutcomeStatus":"SUCCESS","errorId":null,"retryable":null,"humanReadableFailureSummary":null}`,
		NodeWaitIdle: `{"runId":"01J...","uiStabilityAssessment":{"quietWindowObservedMillis":620,"networkInFlightStatus":"NONE"},
			"nodeName":"WaitIdle","stepOrdinal":3,"iterationOrdinalNumber":0,"policyVersion":1,"resumeToken":"01ULID-waitidle-003",
			"randomSeed":333333,"nodeExecutionOutcomeStatus":"SUCCESS","errorId":null,"retryable":null,"humanReadableFailureSummary":null}`,
		NodeProvisionApp: `{"runId":"01J...","applicationProvisioningOutcome":{"appPresenceStatus":"PRESENT","installedVersionName":"1.2.3",
			"installedVersionCode":123,"signatureValidationStatus":"MATCHED"},"nodeName":"ProvisionApp","stepOrdinal":1,
			"iterationOrdinalNumber":0,"policyVersion":1,"resumeToken":"01ULID-provision-001","randomSeed":111111,
			"nodeExecutionOutcomeStatus":"SUCCESS","errorId":null,"retryable":null,"humanReadableFailureSummary":null}`,
	}
	for node, out := range outs {
		if _, err := ValidateOutput(node, []byte(out), ModeStrict); err != nil {
			t.Errorf("%s output example: %v", node, err)
		}
	}
}

func TestValidateCoercions(t *testing.T) {
	in := `{"runId":"r1","iterationOrdinalNumber":"2",
		"idleHeuristicsConfiguration":{"minQuietMillis":"400","MaxWaitMillis":"5000","samplingIntervalMillis":" 250 "},
		"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`
	v := mustValidate(t, NodeWaitIdle, in, "")
	jsonEq(t, v.Value, `{"runId":"r1","iterationOrdinalNumber":2,
		"idleHeuristicsConfiguration":{"minQuietMillis":400,"maxWaitMillis":5000,"samplingIntervalMillis":250},
		"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`)
	want := []string{
		"/idleHeuristicsConfiguration/MaxWaitMillis property-case",
		"/idleHeuristicsConfiguration/maxWaitMillis string-to-integer",
		"/idleHeuristicsConfiguration/minQuietMillis string-to-integer",
		"/idleHeuristicsConfiguration/samplingIntervalMillis string-to-integer",
		"/iterationOrdinalNumber string-to-integer",
	}
	if d := cmp.Diff(want, rules(v.Coercions)); d != "" {
		t.Errorf("coercions (-want +got):\n%s", d)
	}

	// Enum case folding, scalar to string, the same through DecodeInput.
	var ed EnsureDeviceInput
	cs, err := DecodeInput(NodeEnsureDevice, []byte(`{"runId":"r","driverReusePolicy":"reuse_or_create",
		"deviceConfiguration":{"platformName":"Android","deviceName":"emulator-5554","platformVersion":14,"adbServerPort":"5038"}}`), ModeCoerce, &ed)
	if err != nil {
		t.Fatal(err)
	}
	if ed.DriverReusePolicy != ReuseOrCreate || ed.DeviceConfiguration.PlatformName != "android" ||
		ed.DeviceConfiguration.PlatformVersion != "14" || ed.DeviceConfiguration.ADBServerPort != 5038 {
		t.Errorf("decoded %+v", ed)
	}
	if d := cmp.Diff([]string{"/deviceConfiguration/adbServerPort string-to-integer", "/deviceConfiguration/platformName enum-case",
		"/deviceConfiguration/platformVersion scalar-to-string", "/driverReusePolicy enum-case"}, rules(cs)); d != "" {
		t.Errorf("coercions (-want +got):\n%s", d)
	}
	for _, c := range cs {
		if c.Rule == schema.RuleEnumCase && c.Path == "/driverReusePolicy" && (c.From != `"reuse_or_create"` || c.To != `"REUSE_OR_CREATE"`) {
			t.Errorf("enum coercion recorded as %+v", c)
		}
	}
}

func TestCoerceArrays(t *testing.T) {
	// No node input has an array today; exercise the rules on a schema of
	// their own, through the same walker and validator code path.
	doc := map[string]any{"type": "object", "properties": map[string]any{
		"a": map[string]any{"type": "array", "items": map[string]any{"type": "integer"}},
		"b": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		"c": map[string]any{"type": "array"},
		"d": map[string]any{"type": "boolean"},
		"e": map[string]any{"type": "number"},
		"f": map[string]any{"type": "array", "items": map[string]any{"type": "object"}},
	}}
	var v any
	if err := json.Unmarshal([]byte(`{"a":{"1":"2","0":"1"},"b":"one","c":{"0":1,"2":3},"d":"TRUE","e":"2.5","f":{"x":1}}`), &v); err != nil {
		t.Fatal(err)
	}
	v = numbers(v)
	got, out := schema.Coerce(v, doc, false)
	want := map[string]any{"a": []any{json.Number("1"), json.Number("2")}, "b": []any{"one"},
		"c": map[string]any{"0": json.Number("1"), "2": json.Number("3")}, "d": true, "e": json.Number("2.5"),
		"f": []any{map[string]any{"x": json.Number("1")}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"/a object-to-array", "/a/0 string-to-integer", "/a/1 string-to-integer", "/b value-to-array",
		"/d string-to-boolean", "/e string-to-number", "/f value-to-array"}, rules(out)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// numbers converts float64 leaves to json.Number, as jsonschema.UnmarshalJSON decodes them.
func numbers(v any) any {
	switch x := v.(type) {
	case float64:
		b, _ := json.Marshal(x)
		return json.Number(b)
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	}
	return v
}

func TestValidateRejectsWithPath(t *testing.T) {
	cases := []struct {
		node, in string
		mode     Mode
		want     []string
	}{
		{NodeWaitIdle, `{"runId":"r","idleHeuristicsConfiguration":{"maxWaitMillis":"soon"}}`, ModeCoerce,
			[]string{`/idleHeuristicsConfiguration/maxWaitMillis: expected integer, received "soon"`}},
		{NodeWaitIdle, `{"runId":"r","idleHeuristicsConfiguration":{"maxWaitMillis":"5000"}}`, ModeStrict,
			[]string{`/idleHeuristicsConfiguration/maxWaitMillis: expected integer, received "5000"`}},
		{NodeEnsureDevice, `{"runId":"r","deviceConfiguration":{},"driverReusePolicy":"sometimes"}`, ModeCoerce,
			[]string{`/deviceConfiguration/deviceName: expected string (required), received nothing`,
				`/driverReusePolicy: expected one of "REUSE_OR_CREATE", "CREATE_NEW", "REUSE_ONLY", received "sometimes"`}},
		{NodeLaunchOrAttach, `{"runId":"r","applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"},"colour":"red"}`, ModeCoerce,
			[]string{`/colour: expected no such property (known: applicationUnderTestDescriptor, deviceRuntimeContext, iterationOrdinalNumber, launchAttachMode, launchTimeoutMillis, projectId, runId, tenantId), received "red"`}},
		{NodeLaunchOrAttach, `{"applicationUnderTestDescriptor":{"androidPackageId":"not a package"}}`, ModeCoerce,
			[]string{`/applicationUnderTestDescriptor/androidPackageId: expected a string matching ^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$, received "not a package"`,
				`/runId: expected string (required), received nothing`}},
		{NodeWaitIdle, `{"runId":"r","idleHeuristicsConfiguration":{"minQuietMillis":-5}}`, ModeCoerce,
			[]string{`/idleHeuristicsConfiguration/minQuietMillis: expected a number >= 0, received -5`}},
	}
	for _, c := range cases {
		_, err := Validate(c.node, []byte(c.in), c.mode)
		se := schemaErr(t, err)
		var got []string
		for _, p := range se.Problems {
			got = append(got, p.String())
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%s %s: problems (-want +got):\n%s", c.node, c.in, d)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error text %q lacks %q", err, w)
			}
		}
	}
	if _, err := Validate(NodeWaitIdle, []byte(`{"runId":`), ""); err == nil || agent.Classify(err).ID != agent.ErrInvalidRequest {
		t.Errorf("truncated JSON: %v", err)
	}
	if _, err := Validate("NoSuchNode", []byte(`{}`), ""); err == nil {
		t.Error("unknown node validated")
	}
	if _, err := Validate(NodeWaitIdle, []byte(`{"runId":"r"}`), "loose"); err == nil {
		t.Error("unknown mode accepted")
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestLenientDropsUnknown(t *testing.T) {
	in := `{"runId":"r","colour":"red","idleHeuristicsConfiguration":{"maxWaitMillis":"100","shape":1}}`
	if _, err := Validate(NodeWaitIdle, []byte(in), ModeCoerce); err == nil {
		t.Fatal("coerce accepted unknown properties")
	}
	v := mustValidate(t, NodeWaitIdle, in, ModeLenient)
	jsonEq(t, v.Value, `{"runId":"r","idleHeuristicsConfiguration":{"maxWaitMillis":100}}`)
	if d := cmp.Diff([]string{"/colour drop-unknown", "/idleHeuristicsConfiguration/maxWaitMillis string-to-integer",
		"/idleHeuristicsConfiguration/shape drop-unknown"}, rules(v.Coercions)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// Lenient still rejects what cannot be repaired.
	if _, err := Validate(NodeWaitIdle, []byte(`{"runId":"r","idleHeuristicsConfiguration":{"maxWaitMillis":"soon"}}`), ModeLenient); err == nil {
		t.Error("lenient accepted maxWaitMillis \"soon\"")
	}
}

// The schemas use only the keywords the coercion walker understands.
func TestSchemaKeywords(t *testing.T) {
	allowed := map[string]bool{"$schema": true, "title": true, "description": true, "type": true, "properties": true,
		"additionalProperties": true, "required": true, "items": true, "enum": true, "default": true,
		"minimum": true, "maximum": true, "minLength": true, "pattern": true, "format": true}
	ids := SchemaIDs()
	if len(ids) != 8 {
		t.Fatalf("schemas %v, want an input and an output for each of the 4 nodes", ids)
	}
	for _, id := range ids {
		b, _ := SchemaJSON(id)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var walk func(s map[string]any, at string)
		walk = func(s map[string]any, at string) {
			for k, v := range s {
				if !allowed[k] {
					t.Errorf("%s%s: keyword %q not handled by the coercion walker", id, at, k)
				}
				switch k {
				case "properties":
					for n, p := range v.(map[string]any) {
						walk(p.(map[string]any), at+"/"+n)
					}
				case "items", "additionalProperties":
					if m, ok := v.(map[string]any); ok {
						walk(m, at+"/"+k)
					}
				}
			}
		}
		walk(doc, "")
	}
}

// Every output schema carries exactly agent.Common's fields, all required.
func TestOutputSchemasCarryCommon(t *testing.T) {
	var names []string
	ct := reflect.TypeOf(Common{})
	for i := 0; i < ct.NumField(); i++ {
		names = append(names, strings.Split(ct.Field(i).Tag.Get("json"), ",")[0])
	}
	for _, node := range []string{NodeEnsureDevice, NodeProvisionApp, NodeLaunchOrAttach, NodeWaitIdle} {
		b, _ := SchemaJSON(node + ".output")
		var doc struct {
			Required   []string                  `json:"required"`
			Properties map[string]map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if doc.Properties[n] == nil || !contains(doc.Required, n) {
				t.Errorf("%s.output: common field %q missing or not required", node, n)
			}
		}
		// Extensions beyond the spec: EnsureDevice's emulatorLifecycle;
		// LaunchOrAttach's and WaitIdle's appFailure and dismissedSystemDialogs.
		ext := map[string]int{NodeEnsureDevice: 1, NodeLaunchOrAttach: 2, NodeWaitIdle: 2}[node]
		if len(doc.Properties) != len(names)+2+ext {
			t.Errorf("%s.output: %d properties, want common + runId + one context + %d extensions", node, len(doc.Properties), ext)
		}
	}
}

// The schemas' "default" values are the ones the nodes apply in Go.
func TestSchemaDefaultsMatchGo(t *testing.T) {
	def := func(id string, path ...string) any {
		b, _ := SchemaJSON(id)
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		s := schema.At(doc, path)
		if s == nil {
			t.Fatalf("%s: no schema at %v", id, path)
		}
		return s["default"]
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) }
	for _, c := range []struct {
		got, want any
	}{
		{def("EnsureDevice.input", "driverReusePolicy"), string(ReuseOrCreate)},
		{def("EnsureDevice.input", "deviceConfiguration", "bootTimeoutMillis"), ms(DefaultBootTimeout)},
		{def("LaunchOrAttach.input", "launchAttachMode"), string(LaunchOrAttachMode)},
		{def("LaunchOrAttach.input", "launchTimeoutMillis"), ms(DefaultLaunchTimeout)},
		{def("WaitIdle.input", "idleHeuristicsConfiguration", "minQuietMillis"), ms(DefaultMinQuiet)},
		{def("WaitIdle.input", "idleHeuristicsConfiguration", "maxWaitMillis"), ms(DefaultMaxWait)},
		{def("WaitIdle.input", "idleHeuristicsConfiguration", "samplingIntervalMillis"), ms(DefaultSampleInterval)},
	} {
		if c.got != c.want {
			t.Errorf("schema default %v, Go default %v", c.got, c.want)
		}
	}
}
