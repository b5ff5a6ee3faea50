package nodes_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
)

// Asserted here, not in nodes: agent/service reaches net/http (Prometheus),
// which nodes must not (tools/repocheck/layers_test.go).
var _ service.Preparer = nodes.SetupPreparer{}

type refRule struct{ refused string }

func (r refRule) CheckRef(ref string) error {
	if ref != "" && ref == r.refused {
		return agent.Errorf(agent.ErrInvalidRequest, "$.provisionApp.applicationUnderTestDescriptor.apkStorageObjectReference: refused")
	}
	return nil
}

// TestSetupPreparer: the daemon's Preparer defaults the policy version to the
// current one and the tenant to the one Submit passes (the request's own
// wins; the stored plan's node inputs carry it), and refuses an artifact reference
// the rules refuse and a policy version the daemon does not hold, before
// anything is stored.
func TestSetupPreparer(t *testing.T) {
	ctx := context.Background()
	pols, err := policy.NewStore(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := nodes.SetupPreparer{Policies: pols, Artifacts: refRule{refused: "https://evil.example/a.apk"}}
	body := func(top, ref string) []byte {
		aut := `{"androidPackageId":"com.example.app"` + ref + `}`
		return []byte(`{` + top + `"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554"}},` +
			`"provisionApp":{"applicationUnderTestDescriptor":` + aut + `},` +
			`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"}}}`)
	}
	run, err := p.Prepare(ctx, "01J0000000000000000000000", "t1", body("", ""))
	if err != nil || run.RunID != "01J0000000000000000000000" || run.TenantID != "t1" || run.Status != agent.RunPending ||
		run.PolicyVersion != pols.Current().PolicyVersion {
		t.Fatalf("prepared %+v, %v", run, err)
	}
	if plan, err := nodes.PlanFor(run, nodes.NodeProvisionApp); err != nil || plan.ProvisionApp.TenantID != "t1" || plan.ProvisionApp.RunID != run.RunID {
		t.Errorf("plan of %s: %+v, %v", run.RunID, plan, err)
	}
	if run, err := p.Prepare(ctx, "01J0000000000000000000003", "t1", body(`"tenantId":"t2",`, "")); err != nil || run.TenantID != "t2" {
		t.Errorf("a request naming its tenant: %q, %v", run.TenantID, err)
	}
	_, err = p.Prepare(ctx, "01J0000000000000000000001", "t1", body("", `,"apkStorageObjectReference":"https://evil.example/a.apk"`))
	if !strings.Contains(errString(err), "refused") {
		t.Errorf("refused reference accepted: %v", err)
	}
	_, err = p.Prepare(ctx, "01J0000000000000000000002", "t1", body(`"policyVersion":7,`, ""))
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "$.policyVersion: 7") ||
		!errors.Is(err, agent.ErrNotFound) {
		t.Errorf("unknown policy version: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
