package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
	"github.com/screengraph/screengraph-agent/policy"
)

// SubmitRequest is the body of POST /v1/runs: the run request of
// `run --input` plus who it is for and the policy to run under.
type SubmitRequest struct {
	SetupRequest
	TenantID      string `json:"tenantId,omitempty"`
	ProjectID     string `json:"projectId,omitempty"`
	PolicyVersion int    `json:"policyVersion,omitempty"`
}

// NewSetupRun validates a submitted run request (every node input against
// its JSON Schema, see DecodeSetup) and returns the PENDING run to store:
// tenant defaultTenant and policy currentPolicy unless the request names
// them, Serial = ensureDevice.deviceConfiguration.deviceName, Input = the
// SetupRequest part as submitted. The body is decoded by strictjson:
// unknown top-level keys, duplicate keys and keys matching a field only by
// case (at any depth) are refused.
// The limits of bounds.go apply (MaxRequestBytes, MaxIDLength,
// MaxNameLength, Android's package and activity grammar).
// Errors: an *agent.Error invalid_request_error whose message names the
// JSON path ($.ensureDevice.deviceConfiguration.deviceName, …).
func NewSetupRun(runID string, body []byte, defaultTenant string, currentPolicy int) (agent.Run, error) {
	if len(body) > MaxRequestBytes {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$: the run request is %d bytes, at most %d", len(body), MaxRequestBytes)
	}
	var req SubmitRequest
	// One strict decoder (agent/strictjson): a key matching a field only by
	// case ("TenantID"), a duplicate key or data after the body is refused,
	// so the tenant the service checks is the tenant stored.
	if err := strictjson.Decode(body, &req); err != nil {
		return agent.Run{}, err
	}
	// projectId is free text that rides in every event envelope: it is
	// stored and published redacted (agent.RedactString), like payloads.
	run := agent.Run{
		RunID: runID, TenantID: req.TenantID, ProjectID: agent.RedactString(req.ProjectID), Status: agent.RunPending,
		Graph: SetupGraphName, PolicyVersion: req.PolicyVersion,
	}
	if run.TenantID == "" {
		run.TenantID = defaultTenant
	}
	if run.PolicyVersion == 0 {
		run.PolicyVersion = currentPolicy
	}
	if err := checkRequestIDs(req); err != nil {
		return agent.Run{}, err
	}
	if req.PolicyVersion < 0 {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.policyVersion: %d is not a policy version", req.PolicyVersion)
	}
	if len(req.WaitIdle) == 0 {
		req.WaitIdle = json.RawMessage(`{"idleHeuristicsConfiguration":{}}`)
	}
	inputs, err := DecodeSetup(run, req.SetupRequest)
	if err != nil {
		var ie *InputError
		if asInput(err, &ie) {
			msg := strings.TrimPrefix(ie.Err.Error(), string(agent.ErrInvalidRequest)+": ")
			return agent.Run{}, &agent.Error{ID: agent.ErrInvalidRequest, Msg: "$." + inputKey(ie.Node) + ": " + msg}
		}
		return agent.Run{}, err
	}
	if err := checkInputBounds(inputs); err != nil {
		return agent.Run{}, err
	}
	run.Serial = inputs.EnsureDevice.DeviceConfiguration.DeviceName
	if run.Serial == "" {
		return agent.Run{}, agent.Errorf(agent.ErrInvalidRequest, "$.ensureDevice.deviceConfiguration.deviceName: required (a serial or an AVD name)")
	}
	if run.Input, err = json.Marshal(req.SetupRequest); err != nil {
		return agent.Run{}, fmt.Errorf("run input: %w", err)
	}
	return run, nil
}

func asInput(err error, ie **InputError) bool {
	e, ok := err.(*InputError)
	if ok {
		*ie = e
	}
	return ok
}

func inputKey(node string) string {
	switch node {
	case NodeEnsureDevice:
		return "ensureDevice"
	case NodeProvisionApp:
		return "provisionApp"
	case NodeLaunchOrAttach:
		return "launchOrAttach"
	case NodeWaitIdle:
		return "waitIdle"
	}
	return node
}

// ArtifactRef is the apkStorageObjectReference of a setup run's input ("" when
// none or when the input does not decode).
func ArtifactRef(run agent.Run) string {
	var in struct {
		ProvisionApp struct {
			ApplicationUnderTestDescriptor ApplicationUnderTestDescriptor `json:"applicationUnderTestDescriptor"`
		} `json:"provisionApp"`
	}
	if json.Unmarshal(run.Input, &in) != nil {
		return ""
	}
	return strings.TrimSpace(in.ProvisionApp.ApplicationUnderTestDescriptor.APKStorageObjectReference)
}

// SetupPreparer is the daemon's service.Preparer for the setup graph: it
// decodes a run request with NewSetupRun (current policy version as the
// default), checks the artifact reference against the daemon's artifact
// rules before anything is stored (Artifacts.CheckRef), and refuses a
// policy version neither the daemon nor the fleet's store holds
// (invalid_request_error naming $.policyVersion). The tenant is left "" so that Submit sets the caller's.
type SetupPreparer struct {
	Policies interface {
		Current() *policy.Policy
		// Lookup resolves a version, reading through to the store's KV
		// (policy.Store.Lookup).
		Lookup(ctx context.Context, version int) (*policy.Policy, error)
	}
	// Artifacts checks an apkStorageObjectReference (artifacts.Fetcher).
	Artifacts interface{ CheckRef(ref string) error }
}

// Prepare builds the PENDING run row of the request body; see SetupPreparer.
func (p SetupPreparer) Prepare(ctx context.Context, runID string, body []byte) (agent.Run, error) {
	run, err := NewSetupRun(runID, body, "", p.Policies.Current().PolicyVersion)
	if err != nil {
		return run, err
	}
	if err := p.Artifacts.CheckRef(ArtifactRef(run)); err != nil {
		return run, err
	}
	if _, err := p.Policies.Lookup(ctx, run.PolicyVersion); err != nil {
		return run, agent.Wrap(agent.ErrInvalidRequest, err, "$.policyVersion: %d", run.PolicyVersion)
	}
	return run, nil
}
