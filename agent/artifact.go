package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Evidence kinds (issue 14): what a capture keeps of a device after a node.
const (
	// ArtifactScreenshot is image/png, from adb `exec-out screencap -p`.
	ArtifactScreenshot = "screenshot"
	// ArtifactUIHierarchy is application/xml: the Appium session's page
	// source, or `uiautomator dump` without a session.
	ArtifactUIHierarchy = "ui_hierarchy"
	// ArtifactLogcat is text/plain: `logcat -d -v threadtime` since the
	// run's start, of the app's pid, and the crash buffer.
	ArtifactLogcat = "logcat"
	// ArtifactANRTraces is text/plain: the data_app_anr dropbox entries
	// (with their traces) since the run's start, when there are.
	ArtifactANRTraces = "anr_traces"
	// ArtifactVideo is video/mp4 (H.264): the device's screen from
	// LaunchOrAttach's start to the run's end, `screenrecord` segments
	// joined (issue 27; Recorder).
	ArtifactVideo = "video"
)

// ArtifactKinds lists the evidence kinds, for validating policies.
var ArtifactKinds = []string{ArtifactScreenshot, ArtifactUIHierarchy, ArtifactLogcat, ArtifactANRTraces, ArtifactVideo}

// MaxArtifactBytes bounds one artifact (a 4K screenshot PNG is ~10 MB; a
// logcat since a run's start rarely passes a few MB; a video is bounded by
// its policy's evidence.video.maxBytes, at most this): a capture that would
// be larger is cut (logcat, keeping its end; a video, its later segments)
// or refused (screenshot).
const MaxArtifactBytes = 32 << 20

// ArtifactRef is how a step's state snapshot and its node's
// agent.node.finished payload point at an artifact: never the bytes.
//
//	{"artifactId":"01J…","kind":"screenshot","contentType":"image/png","bytes":48213,"sha256":"9f…"}
type ArtifactRef struct {
	ArtifactID  string `json:"artifactId"`
	Kind        string `json:"kind"`
	ContentType string `json:"contentType"`
	// Bytes is the content's length in bytes; SHA256 its lowercase hex
	// digest, which is also the blob's name (content addressing).
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Artifact is one row of the artifacts table: a piece of evidence a run's
// step kept, its blob named by SHA256 in the BlobStore.
type Artifact struct {
	ArtifactRef
	RunID       string    `json:"runId"`
	TenantID    string    `json:"tenantId"`
	Node        string    `json:"node"`
	StepOrdinal int       `json:"stepOrdinal"`
	CreatedAt   time.Time `json:"createdAt"`
}

// StepArtifact is an artifact as RunState lists it: the ref with the node
// and step that kept it.
type StepArtifact struct {
	Node        string `json:"node"`
	StepOrdinal int    `json:"stepOrdinal"`
	ArtifactRef
}

// ValidSHA256 reports whether s is a lowercase hex sha256 digest (64 chars).
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrInvalidArtifact is returned by CommitStep for an artifact row that
// breaks the rules (CheckArtifact); nothing is written.
var ErrInvalidArtifact = errors.New("invalid artifact")

// CheckArtifact checks a row before a store writes it: a ULID artifactId, a
// known kind, a content type, 0 <= bytes <= MaxArtifactBytes, a sha256 digest,
// a node, stepOrdinal >= 0, and runID matching the step's run.
func CheckArtifact(runID string, a Artifact) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: artifact %q: %s", ErrInvalidArtifact, a.ArtifactID, fmt.Sprintf(format, args...))
	}
	switch {
	case len(a.ArtifactID) != 26:
		return bad("artifactId must be a ULID")
	case a.RunID != "" && a.RunID != runID:
		return bad("of run %s in a step of run %s", a.RunID, runID)
	case !validKind(a.Kind):
		return bad("unknown kind %q", a.Kind)
	case a.ContentType == "" || len(a.ContentType) > 100:
		return bad("content type must be 1-100 bytes")
	case a.Bytes < 0 || a.Bytes > MaxArtifactBytes:
		return bad("bytes %d outside 0..%d", a.Bytes, MaxArtifactBytes)
	case !ValidSHA256(a.SHA256):
		return bad("sha256 must be 64 lowercase hex digits")
	case a.Node == "" || len(a.Node) > 100:
		return bad("node must be 1-100 bytes")
	case a.StepOrdinal < 0:
		return bad("stepOrdinal %d is negative", a.StepOrdinal)
	}
	return nil
}

func validKind(k string) bool {
	for _, v := range ArtifactKinds {
		if v == k {
			return true
		}
	}
	return false
}

// ArtifactIndex is the store's side of evidence: the artifacts table. Rows
// are written by CommitStep (Step.Artifacts) in the step's transaction and
// deleted with their run by PruneRuns. Both stores implement it and pass
// snapshots/storetest's artifacts suite.
type ArtifactIndex interface {
	// Artifacts lists the run's artifacts by step ordinal, then kind, then
	// artifactId. A run sc does not see (or an unknown one) is ErrNotFound;
	// the zero Scope is ErrNoScope.
	Artifacts(ctx context.Context, sc Scope, runID string) ([]Artifact, error)
	// Artifact is one artifact of the run; ErrNotFound when the run is not
	// seen by sc or has no such artifact (the two are not told apart).
	Artifact(ctx context.Context, sc Scope, runID, artifactID string) (Artifact, error)
	// ArtifactBlobsInUse returns the digests among sha256s that some
	// artifact row still names (the retention cleaner keeps those blobs).
	ArtifactBlobsInUse(ctx context.Context, sha256s []string) (map[string]bool, error)
}

// BlobStore keeps artifact contents by their sha256 (content addressing):
// files under the data dir on one host, a bucket in a fleet. A blob is
// written before the row naming it is committed, so a row never points at
// a missing blob; a blob no row names is removed by the retention cleaner
// once it is older than its grace.
type BlobStore interface {
	// Put stores data under its digest sum (lowercase hex sha256, which Put
	// verifies); storing an existing blob again is a no-op.
	Put(ctx context.Context, sum string, data []byte) error
	// Open reads a blob; ErrNotFound when there is none.
	Open(ctx context.Context, sum string) (io.ReadCloser, error)
	// Delete removes a blob (none is not an error).
	Delete(ctx context.Context, sum string) error
	// List calls fn for every blob with its last modification time, in no
	// order; fn's error stops the listing and is returned.
	List(ctx context.Context, fn func(sum string, modified time.Time) error) error
}

// EvidenceRequest is what the engine tells the evidence capturer after a
// node's attempt that ends something: the graph (success, Next == End) or
// the run (a failure that is not retried).
type EvidenceRequest struct {
	Run         Run
	Node        string
	StepOrdinal int
	Attempt     int
	// Failed is true for a final failure (ErrorID set), false for the
	// graph's last successful node.
	Failed  bool
	ErrorID ErrorID
	// Policy is the policy in force (the capturer type-asserts its own).
	Policy RetryPolicy
	// Outputs are the outputs of the nodes finished so far plus this
	// attempt's (common fields included), by node name.
	Outputs map[string]json.RawMessage
	// Window bounds the evidence to the run's device lease (Engine.Handover);
	// nil when the engine has no Handover or the run holds no lease, and
	// then Run.CreatedAt starts the logcat window.
	Window *EvidenceWindow
}

// EvidenceWindow is what evidence may show of a device under one lease.
type EvidenceWindow struct {
	// Since is the device clock (UTC) at the lease's start, after any reset:
	// logs and crash/ANR reports stamped before it belong to earlier leases.
	// Zero when the clock could not be read: then no log is captured.
	Since time.Time
	// Dirty: a reset was due (another tenant's run held the device before)
	// and did not complete, so the screen may still show that run; no
	// screenshot or hierarchy is captured.
	Dirty bool
}

// Evidence captures the artifacts the policy asks for. Its blobs are
// stored before it returns; it returns the rows to commit with the step and
// log lines (a capture that failed, with why) for the node's token_delta
// events. It never fails the run: it has its own time budget, and what it
// could not capture is a line, not an error.
type Evidence interface {
	Capture(ctx context.Context, req EvidenceRequest) ([]Artifact, []TokenDelta)
}
