package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

type device struct {
	TenantID   string `json:"tenantId,omitempty"`
	DeviceName string `json:"deviceName"`
}

type base struct {
	EnsureDevice json.RawMessage `json:"ensureDevice"`
	Mode         string          `json:"schemaMode,omitempty"`
}

type request struct {
	base
	TenantID string            `json:"tenantId,omitempty"`
	Device   *device           `json:"deviceConfiguration,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	List     []device          `json:"list,omitempty"`
	Skip     string            `json:"-"`
	Version  int               `json:"version,omitempty"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // "" = accepted; else a fragment of the message
		tenant     string
	}{
		{"plain", `{"tenantId":"A","deviceConfiguration":{"deviceName":"d"}}`, "", "A"},
		{"unicode escape of the exact key", `{"tenant\u0049d":"A"}`, "", "A"},
		{"whitespace after the value", "{\"tenantId\":\"A\"} \n\t", "", "A"},
		{"embedded field", `{"ensureDevice":{"x":1},"schemaMode":"strict"}`, "", ""},
		{"case variant beside the key", `{"tenantId":"A","TenantID":"B"}`, `keys "tenantId" and "TenantID" at $ differ only by case`, ""},
		{"case variant alone", `{"TenantID":"B"}`, `key "TenantID" at $ matches field "tenantId" only by case`, ""},
		{"all lower case", `{"tenantid":"B"}`, `key "tenantid" at $ matches field "tenantId" only by case`, ""},
		{"escaped case variant", `{"tenantId":"A","tenant\u0049D":"B"}`, `keys "tenantId" and "tenantID" at $ differ only by case`, ""},
		{"Kelvin sign folds to k", `{"labels":{"k":"1","\u212a":"2"}}`, "keys \"k\" and \"\u212a\" at $.labels differ only by case", ""},
		{"nested case variant", `{"deviceConfiguration":{"deviceName":"d","TenantID":"B"}}`, `key "TenantID" at $.deviceConfiguration matches field "tenantId" only by case`, ""},
		{"case variant in an array element", `{"list":[{"deviceName":"a"},{"DeviceName":"b"}]}`, `key "DeviceName" at $.list[1] matches field "deviceName" only by case`, ""},
		{"duplicate key", `{"tenantId":"A","tenantId":"B"}`, `duplicate key "tenantId" at $`, ""},
		{"duplicate through an escape", `{"tenantId":"A","tenant\u0049d":"B"}`, `duplicate key "tenantId" at $`, ""},
		{"duplicate in a raw message", `{"ensureDevice":{"a":{"b":1,"b":2}}}`, `duplicate key "b" at $.ensureDevice.a`, ""},
		{"case variants in a raw message", `{"ensureDevice":{"tenantId":"A","TENANTID":"B"}}`, `differ only by case`, ""},
		{"duplicate in a map", `{"labels":{"a":"1","a":"2"}}`, `duplicate key "a" at $.labels`, ""},
		{"unknown key", `{"tenantId":"A","owner":"x"}`, `unknown key "owner" at $`, ""},
		{"tag - is no field", `{"Skip":"x"}`, `unknown key "Skip" at $`, ""},
		{"odd key in the path", `{"labels":{"a b":{"c":1}}}`, `expected string`, ""},
		{"trailing value", `{"tenantId":"A"}{"tenantId":"B"}`, `data after the JSON value`, ""},
		{"trailing garbage", `{"tenantId":"A"} x`, `data after the JSON value`, ""},
		{"ends early", `{"tenantId":"A"`, `ends early`, ""},
		{"not JSON", `{tenantId:1}`, `not valid JSON`, ""},
		{"invalid UTF-8", "{\"tenantId\":\"A\xff\"}", `not valid UTF-8`, ""},
		{"wrong type names the path", `{"version":"1"}`, `$.version: expected int`, ""},
		{"too deep", `{"ensureDevice":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, `nested deeper than 64`, ""},
		{"empty", ``, `ends early`, ""},
		{"duplicate in a large object", `{"labels":{` + manyKeys(20) + `,"k3":"x"}}`, `duplicate key "k3" at $.labels`, ""},
		{"case variant in a large object", `{"labels":{` + manyKeys(20) + `,"K19":"x"}}`, `keys "k19" and "K19" at $.labels differ only by case`, ""},
		{"large object", `{"labels":{` + manyKeys(40) + `}}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r request
			err := strictjson.Decode([]byte(tc.body), &r)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r.TenantID != tc.tenant {
					t.Fatalf("tenant %q, want %q", r.TenantID, tc.tenant)
				}
				return
			}
			var ae *agent.Error
			if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest {
				t.Fatalf("got %v, want an invalid_request_error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestDecodeAllowUnknown(t *testing.T) {
	var d device
	if err := strictjson.DecodeAt("$.ensureDevice", []byte(`{"deviceName":"d","extra":1}`), &d, strictjson.Options{AllowUnknown: true}); err != nil || d.DeviceName != "d" {
		t.Fatalf("unknown key refused with AllowUnknown: %v", err)
	}
	err := strictjson.DecodeAt("$.ensureDevice", []byte(`{"DeviceName":"d"}`), &d, strictjson.Options{AllowUnknown: true})
	if err == nil || !strings.Contains(err.Error(), `key "DeviceName" at $.ensureDevice matches field "deviceName" only by case`) {
		t.Fatalf("case variant with AllowUnknown: %v", err)
	}
}

func TestDecodeNotAPointer(t *testing.T) {
	var d device
	err := strictjson.Decode([]byte(`{}`), d)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInternal {
		t.Fatalf("got %v, want internal_error", err)
	}
}

// A long key is cut in messages: a request cannot make its error huge.
func TestLongKeyCut(t *testing.T) {
	key := strings.Repeat("é", 500)
	err := strictjson.Decode([]byte(`{"`+key+`":1}`), &request{})
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("message of %d bytes: %v", len(err.Error()), err)
	}
}

// manyKeys is "k0":"v","k1":"v",… (n members): past the short-list check.
func manyKeys(n int) string {
	var b []string
	for i := range n {
		b = append(b, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(b, ",")
}

// DecodeTree returns what encoding/json decodes into an any with UseNumber,
// and refuses what Check refuses, in the one pass.
func TestDecodeTreeMatchesEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"a":1,"b":[true,false,null,"x\u00e9",2.5e3,{}],"c":{"d":[]},"e":-0.1}`,
		`[1,"two",[3]]`, `"s"`, `12`, `null`, `{}`,
	} {
		got, err := strictjson.DecodeTree("$", []byte(body), nil, strictjson.Options{})
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: DecodeTree %#v, encoding/json %#v", body, got, want)
		}
	}
	for body, msg := range map[string]string{
		`{"deviceName":"a","deviceName":"b"}`: `duplicate key "deviceName" at $`,
		`{"deviceName":"a","DeviceName":"b"}`: `keys "deviceName" and "DeviceName" at $ differ only by case`,
		`{"tenantID":"x"}`:                    `key "tenantID" at $ matches field "tenantId" only by case`,
		`{"tenantId":"x"} {}`:                 `data after the JSON value`,
		`{"tenantId":"x","z":1}`:              `unknown key "z" at $`,
	} {
		_, err := strictjson.DecodeTree("$", []byte(body), reflect.TypeFor[device](), strictjson.Options{})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %s", body, err, msg)
		}
	}
}
