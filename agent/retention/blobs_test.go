package retention_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/retention"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
	"github.com/screengraph/screengraph-agent/snapshots/storetest"
)

// TestPassSweepsEvidenceBlobs: a pass deletes the blobs of pruned runs and
// blobs no row ever named, once older than the grace; a blob a kept run
// names, and a young unnamed one (its step may be about to commit), stay.
func TestPassSweepsEvidenceBlobs(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	root := filepath.Join(t.TempDir(), "evidence")
	dir, err := blobs.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	put := func(content string, age time.Time) string {
		sum := blobs.Sum([]byte(content))
		if err := dir.Put(ctx, sum, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(root, "sha256", sum[:2], sum), age, age); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	// run ended: pruned with its row; kept: still running, names its blob.
	withArtifact := func(status agent.RunStatus, content string) string {
		r := storetest.NewRun("t1", "emulator-5554")
		if err := st.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		step := storetest.NodeStep(r, 1, 0, "WaitIdle")
		a := storetest.NewArtifact("WaitIdle", 0, agent.ArtifactLogcat, "text/plain", []byte(content))
		step.Artifacts = []agent.Artifact{a}
		sum := put(content, old)
		if err := st.CommitStep(ctx, step); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= 3; seq++ {
			if err := st.MarkPublished(ctx, r.RunID, seq); err != nil {
				t.Fatal(err)
			}
		}
		if status != "" {
			if err := st.SetStatus(ctx, r.RunID, []agent.RunStatus{agent.RunPending}, status); err != nil {
				t.Fatal(err)
			}
		}
		return sum
	}
	prunedBlob := withArtifact(agent.RunFinished, "pruned run's logcat")
	keptBlob := withArtifact("", "running run's logcat")
	orphanOld := put("a capture whose step never committed", old)
	orphanYoung := put("a capture whose step is committing", time.Now())

	c := &retention.Cleaner{Store: st, Retention: time.Nanosecond, Evidence: st, Blobs: dir}
	res, err := c.Pass(ctx, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Runs != 1 || res.EvidenceRows != 1 || res.EvidenceBlobs != 2 {
		t.Errorf("Pass = %+v; want 1 run, 1 evidence row, 2 blobs", res)
	}
	for sum, want := range map[string]bool{prunedBlob: false, orphanOld: false, keptBlob: true, orphanYoung: true} {
		_, err := dir.Open(ctx, sum)
		if got := err == nil; got != want {
			t.Errorf("blob %s… present = %v (%v), want %v", sum[:8], got, err, want)
		}
		if err != nil && !errors.Is(err, agent.ErrNotFound) {
			t.Errorf("blob %s…: %v", sum[:8], err)
		}
	}
}
