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
// its JSON Schema, in the request's schemaMode) and returns the PENDING run
// to store: tenant defaultTenant and policy currentPolicy unless the request
// names them, Serial = ensureDevice.deviceConfiguration.deviceName, Input =
// the request's Plan (see Plan: the typed node inputs, as JSON, with the
// "plan" header). The body is read once (strictjson.DecodeTree): unknown
// top-level keys, duplicate keys, keys of one object differing only by case
// and, inside node inputs, a case variant of runId, tenantId or projectId
// are refused at any depth; another node-input key matching a schema
// property only by case is corrected in coerce and lenient mode
// (RulePropertyCase) and refused in strict mode.
// The limits of bounds.go apply (MaxRequestBytes, MaxIDLength,
// MaxNameLength, Android's package and activity grammar).
// Errors: an *agent.Error invalid_request_error whose message names the
// JSON path ($.ensureDevice.deviceConfiguration.deviceName, …).
func NewSetupRun(runID string, body []byte, defaultTenant string, currentPolicy int) (agent.Run, error) {
	run, _, err := newSetupPlan(runID, body, defaultTenant, currentPolicy)
	return run, err
}

// newSetupPlan is NewSetupRun, also returning the Plan (held for the run's
// nodes, see PlanFor).
func newSetupPlan(runID string, body []byte, defaultTenant string, currentPolicy int) (agent.Run, *Plan, error) {
	if len(body) > MaxRequestBytes {
		return agent.Run{}, nil, agent.Errorf(agent.ErrInvalidRequest, "$: the run request is %d bytes, at most %d", len(body), MaxRequestBytes)
	}
	p, err := decodePlanIDs(runID, body, defaultTenant, currentPolicy)
	if err != nil {
		var ie *InputError
		if asInput(err, &ie) {
			msg := strings.TrimPrefix(ie.Err.Error(), string(agent.ErrInvalidRequest)+": ")
			return agent.Run{}, nil, &agent.Error{ID: agent.ErrInvalidRequest, Msg: "$." + inputKey(ie.Node) + ": " + msg}
		}
		return agent.Run{}, nil, err
	}
	run := agent.Run{
		RunID: runID, TenantID: p.TenantID, ProjectID: p.ProjectID, Status: agent.RunPending,
		Graph: SetupGraphName, PolicyVersion: p.PolicyVersion,
	}
	if err := checkInputBounds(p.Inputs()); err != nil {
		return agent.Run{}, nil, err
	}
	run.Serial = p.EnsureDevice.DeviceConfiguration.DeviceName
	if run.Serial == "" {
		return agent.Run{}, nil, agent.Errorf(agent.ErrInvalidRequest, "$.ensureDevice.deviceConfiguration.deviceName: required (a serial or an AVD name)")
	}
	if run.Input, err = json.Marshal(p); err != nil {
		return agent.Run{}, nil, fmt.Errorf("run input: %w", err)
	}
	plans.put(run.Input, p)
	return run, p, nil
}

// decodePlanIDs is decodePlan with the request's ids checked and defaulted
// before the node inputs take them: projectId is free text that rides in
// every event envelope, so it is stored and published redacted
// (agent.RedactString), like payloads.
func decodePlanIDs(runID string, body []byte, defaultTenant string, currentPolicy int) (*Plan, error) {
	return decodePlanWith(runID, body, func(h *PlanHeader) error {
		// The tenant is validated once, by the service's Submit
		// (agent.ValidTenantID, the rule of tokens too).
		if err := checkID("$.projectId", h.ProjectID); err != nil {
			return err
		}
		if h.PolicyVersion < 0 {
			return agent.Errorf(agent.ErrInvalidRequest, "$.policyVersion: %d is not a policy version", h.PolicyVersion)
		}
		h.ProjectID = agent.RedactString(h.ProjectID)
		if h.TenantID == "" {
			h.TenantID = defaultTenant
		}
		if h.PolicyVersion == 0 {
			h.PolicyVersion = currentPolicy
		}
		return nil
	})
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
	strictjson.NotePass("artifact-ref", run.RunID)
	if json.Unmarshal(run.Input, &in) != nil {
		return ""
	}
	return strings.TrimSpace(in.ProvisionApp.ApplicationUnderTestDescriptor.APKStorageObjectReference)
}

// SetupPreparer is the daemon's service.Preparer for the setup graph: it
// decodes a run request with NewSetupRun (the tenant Submit passes and the
// current policy version as the defaults), checks the artifact reference
// against the daemon's artifact rules before anything is stored
// (Artifacts.CheckRef), and refuses a policy version neither the daemon nor
// the fleet's store holds (invalid_request_error naming $.policyVersion).
// Submit validates the tenant.
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
func (p SetupPreparer) Prepare(ctx context.Context, runID, tenant string, body []byte) (agent.Run, error) {
	run, plan, err := newSetupPlan(runID, body, tenant, p.Policies.Current().PolicyVersion)
	if err != nil {
		return run, err
	}
	if err := p.Artifacts.CheckRef(strings.TrimSpace(plan.ProvisionApp.ApplicationUnderTestDescriptor.APKStorageObjectReference)); err != nil {
		return run, err
	}
	if _, err := p.Policies.Lookup(ctx, run.PolicyVersion); err != nil {
		return run, agent.Wrap(agent.ErrInvalidRequest, err, "$.policyVersion: %d", run.PolicyVersion)
	}
	return run, nil
}
