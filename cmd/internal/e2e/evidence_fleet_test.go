package e2e

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestFleetEvidenceInBucket: two daemons on one Postgres keep evidence in
// one bucket (gofakes3 on loopback, static credentials, no instance
// metadata): the artifacts of a run driven by either land in the bucket,
// not in a data dir, and both daemons serve them.
func TestFleetEvidenceInBucket(t *testing.T) {
	slow(t, "a fleet on Postgres and NATS with an S3 bucket")
	f := startFleet(t)
	be := s3mem.New()
	if err := be.CreateBucket("evidence"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(s3srv.Close)
	env := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}
	args := f.daemonArgs("--artifact-store", "s3://evidence/fleet", "--artifact-store-endpoint", s3srv.URL)

	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	a := startDaemonEnv(t, srv, env, args...)
	b := startDaemonEnv(t, srv, env, args...)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	id := a.submit(t, runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "", "", nil))
	a.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	if v := a.run(t, id); v.Status != agent.RunFinished {
		t.Fatalf("run %s: %s\n%s\n%s", id, v.Status, a.log(), b.log())
	}
	arts := checkSuccessEvidence(t, a, srv.Addr(), emu.Serial(), id)

	// In the bucket, under the prefix, by digest.
	list, err := be.ListBucket("evidence", nil, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, o := range list.Contents {
		keys[o.Key] = true
	}
	for _, x := range arts {
		if !keys["fleet/sha256/"+x.SHA256] {
			t.Errorf("artifact %s (%s) is not in the bucket: %v", x.ArtifactID, x.Kind, keys)
		}
		// Either daemon serves it, whichever drove the run.
		for _, d := range []*daemon{a, b} {
			d.artifactBytes(t, id, x)
		}
	}
	for _, d := range []*daemon{a, b} {
		var files []string
		filepath.WalkDir(filepath.Join(d.dataDir, "evidence"), func(p string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				files = append(files, strings.TrimPrefix(p, d.dataDir))
			}
			return nil
		})
		if len(files) != 0 {
			t.Errorf("fleet daemon kept evidence in its data dir: %v", files)
		}
	}
}
