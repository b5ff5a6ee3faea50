package nodes_test

import (
	"context"
	"testing"

	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
)

// submitBody is a full run request: the four node inputs, an artifact
// reference, idle heuristics and one value the coerce mode repairs.
const submitBody = `{"projectId":"proj-1","policyVersion":1,` +
	`"ensureDevice":{"deviceConfiguration":{"deviceName":"emulator-5554","platformName":"Android","bootTimeoutMillis":"120000"},"driverReusePolicy":"REUSE_OR_CREATE"},` +
	`"provisionApp":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","androidLaunchActivityName":".MainActivity",` +
	`"apkStorageObjectReference":"https://artifacts.example.com/builds/1234/app-release.apk","expectedBuildSignatureSha256":"` +
	`0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},"installationPolicy":"INSTALL_IF_MISSING"},` +
	`"launchOrAttach":{"applicationUnderTestDescriptor":{"androidPackageId":"com.example.app","androidLaunchActivityName":".MainActivity"},"launchAttachMode":"LAUNCH_OR_ATTACH"},` +
	`"waitIdle":{"idleHeuristicsConfiguration":{"minQuietMillis":800,"maxWaitMillis":20000,"samplingIntervalMillis":200}}}`

// BenchmarkSubmit measures the daemon's submit-side work on one run request
// (nodes.SetupPreparer.Prepare: strict decode, schema validation and
// coercion of the four node inputs, bounds, artifact reference check, policy
// lookup), without the store write. Figures: ns/request, B/request and
// allocs/request.
func BenchmarkSubmit(b *testing.B) {
	ctx := context.Background()
	pols, err := policy.NewStore(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := nodes.SetupPreparer{Policies: pols, Artifacts: refRule{}}
	body := []byte(submitBody)
	if _, err := p.Prepare(ctx, "01J0000000000000000000000", "t1", body); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Prepare(ctx, "01J0000000000000000000000", "t1", body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/request")
}
