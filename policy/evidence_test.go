package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/policy"
)

func TestEvidenceDefaultsAndParse(t *testing.T) {
	kinds, budget := policy.EvidenceKinds(policy.Default(), false)
	if strings.Join(kinds, ",") != "screenshot,ui_hierarchy" || budget != 20*time.Second {
		t.Errorf("default onSuccess = %v, %s", kinds, budget)
	}
	if kinds, _ := policy.EvidenceKinds(policy.Default(), true); strings.Join(kinds, ",") != "screenshot,ui_hierarchy,logcat,anr_traces,video" {
		t.Errorf("default onFailure = %v", kinds)
	}
	p, err := policy.Parse([]byte("version: 2\nevidence: {onSuccess: [], onFailure: [logcat], budget: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k, b := policy.EvidenceKinds(p, false); len(k) != 0 || b != 5*time.Second {
		t.Errorf("onSuccess = %v, %s; want none, 5s", k, b)
	}
	if k, _ := policy.EvidenceKinds(p, true); len(k) != 1 || k[0] != agent.ArtifactLogcat {
		t.Errorf("onFailure = %v", k)
	}
	// A document without evidence keeps the defaults.
	p, err = policy.Parse([]byte("version: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := policy.EvidenceKinds(p, false); len(k) != 2 {
		t.Errorf("omitted evidence: onSuccess %v", k)
	}
	for _, bad := range []string{
		"version: 2\nevidence: {onSuccess: [movie]}\n",
		"version: 2\nevidence: {video: {shortSide: 100}}\n",
		"version: 2\nevidence: {video: {bitRate: 50000}}\n",
		"version: 2\nevidence: {video: {segment: 181s}}\n",
		"version: 2\nevidence: {video: {segment: 1500ms}}\n",
		"version: 2\nevidence: {video: {maxLength: 2h}}\n",
		"version: 2\nevidence: {video: {maxBytes: 33554433}}\n",
		"version: 2\nevidence: {budget: 0s}\n",
		"version: 2\nevidence: {budget: 1h}\n",
		"version: 2\nevidence: {onFailure: [logcat, logcat, logcat, logcat, logcat, logcat]}\n",
		"version: 2\nevidence: {onSucess: [logcat]}\n",
	} {
		if _, err := policy.Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestVideoPolicy: the default records for the failure list only, with
// CI-sized settings; a document sets them key by key over the defaults.
func TestVideoPolicy(t *testing.T) {
	v, on := policy.VideoOf(policy.Default())
	if !on || v != policy.DefaultVideo() || v.ShortSide != 720 || v.BitRate != 4000000 || v.Segment.D() != 180*time.Second {
		t.Fatalf("default video %+v on=%v", v, on)
	}
	p, err := policy.Parse([]byte("version: 2\nevidence: {onSuccess: [video], onFailure: [], video: {segment: 5s, bitRate: 2000000}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	v, on = policy.VideoOf(p)
	if !on || v.Segment.D() != 5*time.Second || v.BitRate != 2000000 || v.ShortSide != 720 || v.MaxBytes != agent.MaxArtifactBytes {
		t.Fatalf("parsed video %+v on=%v", v, on)
	}
	p, _ = policy.Parse([]byte("version: 2\nevidence: {onFailure: [logcat]}\n"))
	if _, on := policy.VideoOf(p); on {
		t.Fatal("a policy naming video in neither list records")
	}
}
