package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/agent/service/servicetest"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// tenantKeys are spellings of the key "tenantId": exact, escaped (the same
// key once decoded), and case variants encoding/json would match to the
// field.
var tenantKeys = []string{`tenantId`, `tenant\u0049d`, `\u0074enantId`, `TenantID`, `tenantid`, `TENANTID`, `tenantID`, `tenant\u0069d`}

// tenantBodies builds run requests carrying one or two tenantId spellings
// with tenants acme and beta, at the top and inside a node input.
func tenantBodies() []string {
	const dev = `"deviceConfiguration":{"deviceName":"emulator-5554"}`
	const rest = `"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}},` +
		`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}`
	pair := func(k, v string) string { return `"` + k + `":"` + v + `",` }
	var out []string
	for i, k1 := range tenantKeys {
		for j, k2 := range tenantKeys {
			if (i+j)%3 != 0 && i != j { // a sample of the pairs, every key twice or more
				continue
			}
			top := pair(k1, "acme") + pair(k2, "beta")
			out = append(out,
				`{`+top+`"ensureDevice":{`+dev+`},`+rest+`}`,
				`{`+pair(k1, "acme")+`"ensureDevice":{`+pair(k2, "beta")+dev+`},`+rest+`}`,
				`{"ensureDevice":{`+dev+`,"x":{`+pair(k1, "beta")+`"y":1}},`+rest+`}`,
				`{`+pair(k1, "acme")+`"ensureDevice":{`+dev+`},`+rest+`}{`+pair(k2, "beta")+`"z":1}`)
		}
	}
	return out
}

// FuzzSubmitTenant: whatever the body and whichever tenant calls, a run the
// service accepts belongs to the caller's tenant (an admin's to the tenant
// it names or the default), and so does every node input stored with it.
// Refusals are request or permission errors, never anything else.
func FuzzSubmitTenant(f *testing.F) {
	for _, b := range tenantBodies() {
		for _, caller := range []string{"acme", "beta"} {
			f.Add([]byte(b), caller, false)
		}
		f.Add([]byte(b), "", true)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(f.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	svc, err := service.New(service.Config{Store: st, Leases: st, Holder: "serve:fuzz", NewID: func() string { return ulid.Make().String() },
		Prepare: servicetest.Prepare(func(_ context.Context, runID string, body []byte) (agent.Run, error) {
			return nodes.NewSetupRun(runID, body, "", 1)
		})})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, caller string, admin bool) {
		sc := agent.Admin()
		if !admin {
			if sc, err = agent.Tenant(caller); err != nil {
				return // no token has an invalid tenant (token create refuses it)
			}
		}
		run, err := svc.Submit(context.Background(), sc, body)
		if err != nil {
			var ae *agent.Error
			if !errors.As(err, &ae) || (ae.ID != agent.ErrInvalidRequest && ae.ID != agent.ErrPermission) {
				t.Fatalf("Submit(%q) as %s: %v, want a request or permission error", body, sc, err)
			}
			return
		}
		stored, err := st.GetRun(context.Background(), agent.Admin(), run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if !admin && stored.TenantID != caller {
			t.Fatalf("tenant %s submitted %s and got a run of tenant %s", caller, body, stored.TenantID)
		}
		// No reader of the body may see another tenant: every top-level key
		// encoding/json would match to tenantId says the stored tenant.
		for _, v := range tenantValues(t, body) {
			if v != stored.TenantID {
				t.Fatalf("run %s stored for tenant %s, but the body %s also says tenant %q", stored.RunID, stored.TenantID, body, v)
			}
		}
		if !agent.ValidTenantID(stored.TenantID) {
			t.Fatalf("stored tenant %q", stored.TenantID)
		}
		var req nodes.SetupRequest
		if err := json.Unmarshal(stored.Input, &req); err != nil {
			t.Fatal(err)
		}
		in, err := nodes.DecodeSetup(stored, req)
		if err != nil {
			t.Fatalf("stored input of an accepted run: %v", err)
		}
		for node, tenant := range map[string]string{nodes.NodeEnsureDevice: in.EnsureDevice.TenantID, nodes.NodeProvisionApp: in.ProvisionApp.TenantID,
			nodes.NodeLaunchOrAttach: in.LaunchOrAttach.TenantID, nodes.NodeWaitIdle: in.WaitIdle.TenantID} {
			if tenant != stored.TenantID {
				t.Fatalf("%s input of run %s (tenant %s) says tenant %s: %s", node, stored.RunID, stored.TenantID, tenant, body)
			}
		}
		if strings.Contains(string(stored.Input), "TenantID") {
			t.Fatalf("stored input keeps a case variant: %s", stored.Input)
		}
	})
}

// tenantValues are the values of the top-level keys of body equal to
// "tenantId" under case folding, in order, duplicates included.
func tenantValues(t *testing.T, body []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("an accepted body that is not an object: %s", body)
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		var s string
		if strings.EqualFold(k.(string), "tenantId") && json.Unmarshal(v, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}
