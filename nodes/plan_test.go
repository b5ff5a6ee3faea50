package nodes

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// A run this daemon did not accept (another daemon of the fleet, or after
// a restart) gets its plan from the stored Input: one typed decode, no
// schema pass, the same node inputs as at submit; the next node of the run
// decodes nothing. A plan of a newer version is refused.
func TestPlanForStoredPlan(t *testing.T) {
	body := `{"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554","adbServerPort":"5037"},"driverReusePolicy":"reuse_only"},` +
		`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","apkStorageObjectReference":"s3://b/app.apk"}},` +
		`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app"},"launchTimeoutMillis":"9000"},` +
		`"waitIdle":{"idleHeuristicsConfiguration":{"minQuietMillis":500,"countQuietFromLastFrame":"false"}}}`
	run, submitted, err := newSetupPlan("01JSTORED0000000000000000", []byte(body), "t1", 1)
	if err != nil {
		t.Fatal(err)
	}
	plans.drop(run.RunID)
	var passes []string
	stop := strictjson.OnPass(func(kind, path string) { passes = append(passes, kind) })
	defer stop()
	got, err := PlanFor(run, NodeEnsureDevice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanFor(run, NodeProvisionApp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Inputs(), submitted.Inputs()) {
		t.Errorf("stored plan's inputs\n%+v\nsubmitted\n%+v", got.Inputs(), submitted.Inputs())
	}
	if want := []string{"stored-plan"}; !reflect.DeepEqual(passes, want) {
		t.Errorf("passes %q, want %q", passes, want)
	}
	if got.ProvisionApp.TenantID != "t1" || got.WaitIdle.RunID != run.RunID || got.Version != PlanVersion {
		t.Errorf("plan header/ids: %+v", got.PlanHeader)
	}

	newer := run
	newer.RunID = "01JSTORED0000000000000001"
	newer.Input = bytes.Replace(run.Input, []byte(`"plan":{"version":1`), []byte(`"plan":{"version":2`), 1)
	_, err = PlanFor(newer, NodeEnsureDevice)
	if ae := agent.Classify(err); ae == nil || ae.ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), "plan version 2") {
		t.Errorf("a newer plan version: %v", err)
	}
}
