package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// ArtifactStore is a store with the evidence index and retention (both of
// ours).
type ArtifactStore interface {
	agent.Store
	agent.ArtifactIndex
	agent.Pruner
}

// RunArtifacts runs the evidence contract (agent.ArtifactIndex and
// Step.Artifacts) against fresh, empty stores made by newStore.
func RunArtifacts(t *testing.T, newStore func(t *testing.T) ArtifactStore) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s ArtifactStore)
	}{
		{"CommittedWithTheStep", testArtifactsCommitted},
		{"TenantScoped", testArtifactsScoped},
		{"InvalidWritesNothing", testArtifactsInvalid},
		{"BlobsInUse", testArtifactBlobsInUse},
		{"PrunedWithTheRun", testArtifactsPruned},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// NewArtifact is an evidence row of kind for content (its sha256 and
// length), with a fresh artifactId; the engine fills run, tenant, node and
// step (the store takes run and tenant from the step).
func NewArtifact(node string, step int, kind, contentType string, content []byte) agent.Artifact {
	sum := sha256.Sum256(content)
	return agent.Artifact{
		ArtifactRef: agent.ArtifactRef{ArtifactID: ulid.Make().String(), Kind: kind, ContentType: contentType,
			Bytes: int64(len(content)), SHA256: hex.EncodeToString(sum[:])},
		Node: node, StepOrdinal: step, CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
	}
}

func sameArtifact(t *testing.T, got, want agent.Artifact) {
	t.Helper()
	if got.ArtifactRef != want.ArtifactRef || got.RunID != want.RunID || got.TenantID != want.TenantID ||
		got.Node != want.Node || got.StepOrdinal != want.StepOrdinal || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("artifact = %+v, want %+v", got, want)
	}
}

func testArtifactsCommitted(t *testing.T, s ArtifactStore) {
	r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
	if got, err := s.Artifacts(ctx(t), agent.Admin(), r.RunID); err != nil || len(got) != 0 {
		t.Fatalf("Artifacts of a run without any = %v, %v; want none", got, err)
	}
	st := NodeStep(r, 1, 0, "WaitIdle")
	shot := NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", []byte("\x89PNG fake"))
	xml := NewArtifact("WaitIdle", 0, agent.ArtifactUIHierarchy, "application/xml", []byte("<hierarchy/>"))
	st.Artifacts = []agent.Artifact{xml, shot}
	mustCommit(t, s, st)
	for _, a := range []*agent.Artifact{&shot, &xml} {
		a.RunID, a.TenantID = r.RunID, r.TenantID
	}
	got, err := s.Artifacts(ctx(t), agent.Admin(), r.RunID)
	if err != nil || len(got) != 2 {
		t.Fatalf("Artifacts = %v, %v; want 2", got, err)
	}
	// Ordered by step, then kind.
	sameArtifact(t, got[0], shot)
	sameArtifact(t, got[1], xml)
	one, err := s.Artifact(ctx(t), agent.Admin(), r.RunID, xml.ArtifactID)
	if err != nil {
		t.Fatalf("Artifact: %v", err)
	}
	sameArtifact(t, one, xml)
	if _, err := s.Artifact(ctx(t), agent.Admin(), r.RunID, ulid.Make().String()); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("unknown artifact: %v, want ErrNotFound", err)
	}
	if _, err := s.Artifacts(ctx(t), agent.Admin(), ulid.Make().String()); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("Artifacts of an unknown run: %v, want ErrNotFound", err)
	}
	// An artifact of another run is not found under this one.
	r2 := mustCreate(t, s, NewRun("t1", "emulator-5556"))
	if _, err := s.Artifact(ctx(t), agent.Admin(), r2.RunID, xml.ArtifactID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("artifact asked under another run: %v, want ErrNotFound", err)
	}
}

func testArtifactsScoped(t *testing.T, s ArtifactStore) {
	r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
	st := NodeStep(r, 1, 0, "WaitIdle")
	a := NewArtifact("WaitIdle", 0, agent.ArtifactLogcat, "text/plain", []byte("log"))
	st.Artifacts = []agent.Artifact{a}
	mustCommit(t, s, st)
	own, _ := agent.Tenant("t1")
	other, _ := agent.Tenant("t2")
	if got, err := s.Artifacts(ctx(t), own, r.RunID); err != nil || len(got) != 1 {
		t.Errorf("own tenant: %v, %v", got, err)
	}
	if _, err := s.Artifact(ctx(t), own, r.RunID, a.ArtifactID); err != nil {
		t.Errorf("own tenant Artifact: %v", err)
	}
	if got, err := s.Artifacts(ctx(t), other, r.RunID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("another tenant's Artifacts = %v, %v; want ErrNotFound as for an unknown run", got, err)
	}
	if _, err := s.Artifact(ctx(t), other, r.RunID, a.ArtifactID); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("another tenant's Artifact: %v, want ErrNotFound", err)
	}
	if _, err := s.Artifacts(ctx(t), agent.Scope{}, r.RunID); !errors.Is(err, agent.ErrNoScope) {
		t.Errorf("zero scope: %v, want ErrNoScope", err)
	}
}

func testArtifactsInvalid(t *testing.T, s ArtifactStore) {
	r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
	good := NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", []byte("x"))
	for name, mutate := range map[string]func(a *agent.Artifact){
		"bad sha256":     func(a *agent.Artifact) { a.SHA256 = "../../etc/passwd" },
		"unknown kind":   func(a *agent.Artifact) { a.Kind = "video" },
		"too large":      func(a *agent.Artifact) { a.Bytes = agent.MaxArtifactBytes + 1 },
		"not a ULID":     func(a *agent.Artifact) { a.ArtifactID = "x" },
		"other tenant":   func(a *agent.Artifact) { a.TenantID = "t2" },
		"other run":      func(a *agent.Artifact) { a.RunID = ulid.Make().String() },
		"no contentType": func(a *agent.Artifact) { a.ContentType = "" },
	} {
		st := NodeStep(r, 1, 0, "WaitIdle")
		bad := good
		mutate(&bad)
		st.Artifacts = []agent.Artifact{good, bad}
		if err := s.CommitStep(ctx(t), st); !errors.Is(err, agent.ErrInvalidArtifact) {
			t.Errorf("%s: CommitStep = %v, want ErrInvalidArtifact", name, err)
		}
		if _, evs, _, snaps := state(t, s, r.RunID); len(evs) != 0 || snaps != 0 {
			t.Fatalf("%s: %d events, %d snapshots written by a failed commit", name, len(evs), snaps)
		}
		if got, _ := s.Artifacts(ctx(t), agent.Admin(), r.RunID); len(got) != 0 {
			t.Fatalf("%s: %d artifact rows written by a failed commit", name, len(got))
		}
	}
	// The same artifactId twice (a second step reusing it) writes nothing.
	st := NodeStep(r, 1, 0, "WaitIdle")
	st.Artifacts = []agent.Artifact{good}
	mustCommit(t, s, st)
	st2 := NodeStep(r, 4, 1, "WaitIdle")
	st2.Artifacts = []agent.Artifact{good}
	if err := s.CommitStep(ctx(t), st2); !errors.Is(err, agent.ErrInvalidArtifact) {
		t.Errorf("duplicate artifactId: %v, want ErrInvalidArtifact", err)
	}
	if _, evs, _, _ := state(t, s, r.RunID); len(evs) != 3 {
		t.Errorf("%d events after the duplicate's failed commit, want 3", len(evs))
	}
}

func testArtifactBlobsInUse(t *testing.T, s ArtifactStore) {
	r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
	st := NodeStep(r, 1, 0, "WaitIdle")
	a := NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", []byte("one"))
	b := NewArtifact("WaitIdle", 0, agent.ArtifactLogcat, "text/plain", []byte("two"))
	st.Artifacts = []agent.Artifact{a, b}
	mustCommit(t, s, st)
	unused := NewArtifact("x", 0, agent.ArtifactLogcat, "text/plain", []byte("three")).SHA256
	used, err := s.ArtifactBlobsInUse(ctx(t), []string{a.SHA256, unused})
	if err != nil {
		t.Fatal(err)
	}
	if !used[a.SHA256] || used[unused] || used[b.SHA256] || len(used) != 1 {
		t.Errorf("ArtifactBlobsInUse = %v, want only %s", used, a.SHA256)
	}
	if used, err := s.ArtifactBlobsInUse(ctx(t), nil); err != nil || len(used) != 0 {
		t.Errorf("ArtifactBlobsInUse(nil) = %v, %v", used, err)
	}
}

func testArtifactsPruned(t *testing.T, s ArtifactStore) {
	r := mustCreate(t, s, NewRun("t1", "emulator-5554"))
	st := NodeStep(r, 1, 0, "WaitIdle")
	a := NewArtifact("WaitIdle", 0, agent.ArtifactScreenshot, "image/png", []byte("one"))
	st.Artifacts = []agent.Artifact{a}
	mustCommit(t, s, st)
	if err := s.SetStatus(ctx(t), r.RunID, []agent.RunStatus{agent.RunPending}, agent.RunFinished); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		if err := s.MarkPublished(ctx(t), r.RunID, seq); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.PruneRuns(ctx(t), time.Now().Add(time.Hour), 0)
	if err != nil || res.Runs != 1 || res.EvidenceRows != 1 {
		t.Fatalf("PruneRuns = %+v, %v; want the run and its artifact row", res, err)
	}
	if used, err := s.ArtifactBlobsInUse(ctx(t), []string{a.SHA256}); err != nil || used[a.SHA256] {
		t.Errorf("blob still in use after its run was pruned: %v, %v", used, err)
	}
}
