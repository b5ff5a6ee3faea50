package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// setupPrepare is serve's run request validation (nodes.NewSetupRun, no
// default tenant: Submit sets the caller's).
func setupPrepare(_ context.Context, runID string, body []byte) (agent.Run, error) {
	return nodes.NewSetupRun(runID, body, "", 1)
}

const setupNodes = `"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554"}},` +
	`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}},` +
	`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`

// Issue 13 item 1: with tenant acme's token, no spelling of tenantId makes a
// run of tenant beta. Bodies a map lookup and a struct decode read
// differently are 400 naming the key; beta sees no run.
func TestSubmitStrictKeys(t *testing.T) {
	e := newTenancyEnvWith(t, servicetest.Prepare(setupPrepare))
	for _, tc := range []struct{ body, want string }{
		{`{"tenantId":"acme","TenantID":"beta",` + setupNodes + `}`, `keys \"tenantId\" and \"TenantID\" at $ differ only by case`},
		{`{"TenantID":"beta",` + setupNodes + `}`, `key \"TenantID\" at $ matches field \"tenantId\" only by case`},
		{`{"tenantid":"beta",` + setupNodes + `}`, `key \"tenantid\" at $ matches field \"tenantId\" only by case`},
		{`{"tenantId":"beta","tenantId":"acme",` + setupNodes + `}`, `duplicate key \"tenantId\" at $`},
		{`{"tenantId":"acme","tenant\u0049D":"beta",` + setupNodes + `}`, `differ only by case`},
		{`{"tenantId":"acme",` + setupNodes + `}{"tenantId":"beta"}`, `data after the JSON value`},
		{`{"ensureDevice":{"TenantID":"beta","deviceConfiguration":{"deviceName":"emulator-5554"}},` + setupNodes[strings.Index(setupNodes, `"provisionApp"`):] + `}`,
			`key \"TenantID\" at $.ensureDevice matches field \"tenantId\" only by case`},
	} {
		st, b, _ := e.as("acme", "POST", "/v1/runs", tc.body)
		if st != http.StatusBadRequest || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %s\nwant 400 saying %s", tc.body, st, b, tc.want)
			continue
		}
		agentError(t, b, agent.ErrInvalidRequest)
	}
	if st, b, _ := e.as("beta", "GET", "/v1/runs", ""); st != 200 || len(listIDs(t, b)) != 0 {
		t.Errorf("beta lists %d %s, want no run", st, b)
	}
	if st, b, _ := e.as("acme", "GET", "/v1/runs", ""); st != 200 || len(listIDs(t, b)) != 0 {
		t.Errorf("acme lists %d %s, want no run (every body was refused)", st, b)
	}
	// The exact key, even escaped, is the tenant.
	id := e.submitAs("acme", `{"tenant\u0049d":"acme",`+setupNodes+`}`)
	if r, err := e.store.GetRun(context.Background(), agent.Admin(), id); err != nil || r.TenantID != "acme" {
		t.Fatalf("run %s: %+v %v", id, r, err)
	}
}

// The policy switch body goes through the same decoder.
func TestPolicyBodyStrict(t *testing.T) {
	e := newTenancyEnvWith(t, servicetest.Prepare(setupPrepare))
	id := e.submitAs("acme", `{`+setupNodes+`}`)
	for _, tc := range []struct{ body, want string }{
		{`{"version":1,"version":2}`, `duplicate key \"version\" at $`},
		{`{"Version":2}`, `key \"Version\" at $ matches field \"version\" only by case`},
		{`{"version":1,"extra":true}`, `unknown key \"extra\" at $`},
		{`{"version":1} {"version":2}`, `data after the JSON value`},
		{`{}`, `$.version: required`},
	} {
		st, b, _ := e.as("acme", "POST", "/v1/runs/"+id+"/policy", tc.body)
		if st != http.StatusBadRequest || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d %s\nwant 400 saying %s", tc.body, st, b, tc.want)
		}
	}
}
