package agent

import (
	"context"
	"encoding/json"
)

// Recorder records a run's device screen across nodes (issue 27): the
// engine tells it where the run is, and the Evidence capturer takes the
// video (kind ArtifactVideo) from it at the run's end when the outcome's
// list names video. What is left of a recording when the engine stops
// driving the run (the run ended, was canceled, or the daemon stops) is
// stopped on the device and dropped. Its methods never fail the run: a
// recording that cannot be made is a log line of the implementation.
type Recorder interface {
	// NodeStarting is called before each node attempt the engine runs
	// (after the run's handover, before the node's agent.node.started): the
	// recorder starts recording, or goes on after a pause, when the policy
	// asks for video and the run has reached its first recorded node.
	NodeStarting(ctx context.Context, req RecordRequest)
	// Pause stops the run's recording on the device and keeps what it
	// recorded: a paused run records nothing, and NodeStarting after the
	// resume records the next part.
	Pause(ctx context.Context, runID string)
	// Drop stops the run's recording on the device and forgets it (called
	// when Engine.Run returns, whatever the reason; after the capture took
	// the video it only cleans up).
	Drop(ctx context.Context, runID string)
}

// RecordRequest is what a Recorder knows of a run before a node's attempt.
type RecordRequest struct {
	Run  Run
	Node string
	// Policy is the policy in force (the recorder type-asserts its own).
	Policy RetryPolicy
	// Outputs are the outputs of the nodes finished so far, by node name
	// (EnsureDevice's names the device).
	Outputs map[string]json.RawMessage
	// Window is the run's evidence window (EvidenceRequest.Window): a dirty
	// device is not recorded.
	Window *EvidenceWindow
}
