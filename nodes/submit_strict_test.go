package nodes

import (
	"errors"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/schema"
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
		// Strict mode corrects nothing: a case variant of any key is refused.
		{`{"schemaMode":"strict","ensureDevice":{"deviceConfiguration":{"DeviceName":"e"}},` + app + `}`, `key "DeviceName" at $.ensureDevice.deviceConfiguration matches field "deviceName" only by case`},
		{`{"schemaMode":"STRICT","ensureDevice":{"DriverReusePolicy":"REUSE_OR_CREATE","deviceConfiguration":{"deviceName":"e"}},` + app + `}`, `key "DriverReusePolicy" at $.ensureDevice matches field "driverReusePolicy" only by case`},
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

// Scope keys (runId, tenantId, projectId) name whose run it is: inside a node
// input a case variant of one is refused in every schema mode and at any
// depth, never corrected, so no reader can take it for the run's scope.
func TestNewSetupRunScopeKeyVariantsRefused(t *testing.T) {
	const app = `"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}},` +
		`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`
	for _, mode := range []string{"", "coerce", "lenient", "strict"} {
		for _, tc := range []struct{ input, want string }{
			{`"ensureDevice":{"TenantID":"B","deviceConfiguration":{"deviceName":"d"}}`, `key "TenantID" at $.ensureDevice matches field "tenantId" only by case`},
			{`"ensureDevice":{"tenantid":"B","deviceConfiguration":{"deviceName":"d"}}`, `key "tenantid" at $.ensureDevice matches field "tenantId" only by case`},
			{`"ensureDevice":{"TENANTID":"B","deviceConfiguration":{"deviceName":"d"}}`, `key "TENANTID" at $.ensureDevice matches field "tenantId" only by case`},
			{`"ensureDevice":{"RunId":"01J9","deviceConfiguration":{"deviceName":"d"}}`, `key "RunId" at $.ensureDevice matches field "runId" only by case`},
			{`"ensureDevice":{"ProjectID":"p","deviceConfiguration":{"deviceName":"d"}}`, `key "ProjectID" at $.ensureDevice matches field "projectId" only by case`},
			{`"ensureDevice":{"deviceConfiguration":{"deviceName":"d","TenantId":"B"}}`, `key "TenantId" at $.ensureDevice.deviceConfiguration matches field "tenantId" only by case`},
		} {
			body := `{"schemaMode":"` + mode + `",` + tc.input + `,` + app + `}`
			_, err := NewSetupRun("01J0000000000000000000000", []byte(body), "t1", 1)
			var ae *agent.Error
			if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s:\n got %v\nwant invalid_request_error saying %s", body, err, tc.want)
			}
		}
	}
}

// Coerce (the default) and lenient mode correct a node-input key that
// matches one schema property only by case (schema-enforcement.md, rule D),
// at any depth, and record the correction in the plan's coercions.
func TestNewSetupRunCorrectsKeyCase(t *testing.T) {
	for _, mode := range []string{"", "coerce", "lenient"} {
		body := `{"schemaMode":"` + mode + `","ensureDevice":{"DeviceConfiguration":{"DeviceName":"emulator-5554","BOOTTIMEOUTMILLIS":"9000"}},` +
			`"provisionApp":{"applicationUnderTestDescriptor":{"AndroidPackageId":"com.example.app","apkstorageobjectreference":"/apks/a.apk"}},` +
			`"launchOrAttach":{"ApplicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}}`
		run, p, err := newSetupPlan("01J0000000000000000000000", []byte(body), "t1", 1)
		if err != nil {
			t.Fatalf("mode %q: %v", mode, err)
		}
		if run.Serial != "emulator-5554" || p.EnsureDevice.DeviceConfiguration.BootTimeoutMillis != 9000 ||
			p.ProvisionApp.ApplicationUnderTestDescriptor.APKStorageObjectReference != "/apks/a.apk" ||
			p.LaunchOrAttach.ApplicationUnderTestDescriptor.AndroidPackageID != "com.example.app" {
			t.Errorf("mode %q: plan %+v", mode, p)
		}
		want := map[string]bool{
			"/ensureDevice/DeviceConfiguration": true, "/ensureDevice/deviceConfiguration/DeviceName": true,
			"/ensureDevice/deviceConfiguration/BOOTTIMEOUTMILLIS":                    true,
			"/provisionApp/applicationUnderTestDescriptor/AndroidPackageId":          true,
			"/provisionApp/applicationUnderTestDescriptor/apkstorageobjectreference": true,
			"/launchOrAttach/ApplicationUnderTestDescriptor":                         true,
		}
		for _, c := range p.Coercions {
			if c.Rule == schema.RulePropertyCase {
				delete(want, c.Path)
			}
		}
		if len(want) != 0 {
			t.Errorf("mode %q: no property-case coercion recorded at %v (got %v)", mode, want, p.Coercions)
		}
	}
}
