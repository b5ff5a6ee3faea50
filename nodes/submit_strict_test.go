package nodes

import (
	"errors"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// The run request is decoded strictly (agent/strictjson): a body whose
// tenant a map lookup and a struct decode would read differently is refused
// with 400 naming the key, at the top and inside node inputs.
func TestNewSetupRunStrictKeys(t *testing.T) {
	const dev = `"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554"}}`
	const app = `"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}},` +
		`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`
	for _, tc := range []struct{ body, want string }{
		{`{"tenantId":"A","TenantID":"B",` + dev + `,` + app + `}`, `keys "tenantId" and "TenantID" at $ differ only by case`},
		{`{"TenantID":"B",` + dev + `,` + app + `}`, `key "TenantID" at $ matches field "tenantId" only by case`},
		{`{"tenantId":"A","tenantId":"B",` + dev + `,` + app + `}`, `duplicate key "tenantId" at $`},
		{`{"tenantId":"A",` + dev + `,` + app + `} {"tenantId":"B"}`, `data after the JSON value`},
		{`{"EnsureDevice":{},` + app + `}`, `key "EnsureDevice" at $ matches field "ensureDevice" only by case`},
		{`{"ensureDevice":{"TenantID":"B","deviceConfiguration":{"deviceName":"d"}},` + app + `}`, `key "TenantID" at $.ensureDevice matches field "tenantId" only by case`},
		{`{"ensureDevice":{"deviceConfiguration":{"deviceName":"d","DeviceName":"e"}},` + app + `}`, `keys "deviceName" and "DeviceName" at $.ensureDevice.deviceConfiguration differ only by case`},
		{`{"schemaMode":"lenient","ensureDevice":{"deviceConfiguration":{"DeviceName":"e"}},` + app + `}`, `key "DeviceName" at $.ensureDevice.deviceConfiguration matches field "deviceName" only by case`},
	} {
		_, err := NewSetupRun("01J0000000000000000000000", []byte(tc.body), "t1", 1)
		var ae *agent.Error
		if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant invalid_request_error saying %s", tc.body, err, tc.want)
		}
	}
	run, err := NewSetupRun("01J0000000000000000000000", []byte(`{"tenant\u0049d":"A",`+dev+`,`+app+`}`), "t1", 1)
	if err != nil || run.TenantID != "A" {
		t.Fatalf("an escaped exact key: %v, tenant %q", err, run.TenantID)
	}
}
