package nodes

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
	"github.com/screengraph/screengraph-agent/device"
)

// SetupGraphName names the setup chain graph.
const SetupGraphName = "setup"

// SetupRequest is a setup run's input, stored as the run's Input: each node's
// input in the spec's JSON (screengraph-nodes.md), validated and coerced by the
// node's JSON Schema. runId, tenantId and projectId are filled from the run;
// deviceRuntimeContext flows from EnsureDevice's output to the later nodes.
// Modes a node input leaves out come from the policy in force.
type SetupRequest struct {
	EnsureDevice   json.RawMessage `json:"ensureDevice"`
	ProvisionApp   json.RawMessage `json:"provisionApp"`
	LaunchOrAttach json.RawMessage `json:"launchOrAttach"`
	WaitIdle       json.RawMessage `json:"waitIdle"`
	// SchemaMode is strict, coerce (default) or lenient (schema-enforcement.md).
	SchemaMode string `json:"schemaMode,omitempty"`
}

// SetupDeps are the ports the setup graph's nodes run with.
type SetupDeps struct {
	// Ports is the template of every node's ports; Device is replaced by
	// DeviceFor(serial) once EnsureDevice has named the device.
	Ports     Ports
	DeviceFor func(serial string) device.Device
	Sessions  SessionMemory
	Provision ProvisionDeps
	// Progress sees each progress line live (the engine records them as
	// token_delta events when the node returns); may be nil.
	Progress func(node, line string)
}

// SetupInputs are the four decoded node inputs of a SetupRequest.
type SetupInputs struct {
	EnsureDevice   EnsureDeviceInput
	ProvisionApp   ProvisionAppInput
	LaunchOrAttach LaunchOrAttachInput
	WaitIdle       WaitIdleInput
	Coercions      []Coercion
}

// DecodeSetup validates and decodes every node input of req for run r, so a
// bad request is refused (invalid_request_error naming the JSON path) before
// anything runs or is written. With only, just those nodes' inputs are
// decoded (the others stay zero): a node of a stored run, whose request was
// validated at submit, decodes what it uses.
func DecodeSetup(r agent.Run, req SetupRequest, only ...string) (SetupInputs, error) {
	mode, err := ParseMode(req.SchemaMode)
	if err != nil {
		return SetupInputs{}, err
	}
	var in SetupInputs
	steps := []struct {
		node string
		raw  json.RawMessage
		dst  any
	}{
		{NodeEnsureDevice, req.EnsureDevice, &in.EnsureDevice},
		{NodeProvisionApp, req.ProvisionApp, &in.ProvisionApp},
		{NodeLaunchOrAttach, req.LaunchOrAttach, &in.LaunchOrAttach},
		{NodeWaitIdle, req.WaitIdle, &in.WaitIdle},
	}
	for _, s := range steps {
		if len(only) > 0 && !slices.Contains(only, s.node) {
			continue
		}
		// Before the schema and withRunIDs read it: a duplicate key or a key
		// matching a field only by case ("TenantID") is refused; unknown keys
		// are the schema's to judge (lenient mode drops them).
		if len(s.raw) > 0 {
			if err := strictjson.Check("$."+inputKey(s.node), s.raw, reflect.TypeOf(s.dst).Elem(), strictjson.Options{AllowUnknown: true}); err != nil {
				return SetupInputs{}, err
			}
		}
		raw, err := withRunIDs(s.raw, r)
		if err != nil {
			return SetupInputs{}, &InputError{Node: s.node, Err: agent.Wrap(agent.ErrInvalidRequest, err, "%s input", s.node)}
		}
		co, err := DecodeInput(s.node, raw, mode, s.dst)
		if err != nil {
			return SetupInputs{}, &InputError{Node: s.node, Err: err}
		}
		in.Coercions = append(in.Coercions, co...)
	}
	return in, nil
}

// InputError is a node input the schema refused; Err is an *agent.Error
// (invalid_request_error) whose message names the JSON path.
type InputError struct {
	Node string
	Err  error
}

func (e *InputError) Error() string { return e.Node + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// withRunIDs sets runId, tenantId and projectId of a node input object.
func withRunIDs(raw json.RawMessage, r agent.Run) (json.RawMessage, error) {
	obj := map[string]any{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
	}
	obj["runId"] = r.RunID
	if r.TenantID != "" {
		obj["tenantId"] = r.TenantID
	}
	if r.ProjectID != "" {
		obj["projectId"] = r.ProjectID
	}
	return json.Marshal(obj)
}

// NewSetupGraph is the setup chain EnsureDevice -> ProvisionApp ->
// LaunchOrAttach -> WaitIdle as an agent.Graph: each node its own type
// behind the Node adapter.
func NewSetupGraph(deps SetupDeps) (*agent.Graph, error) {
	return agent.NewGraph(SetupGraphName, NodeEnsureDevice,
		&Node[EnsureDeviceInput, EnsureDeviceOutput]{Next: NodeProvisionApp, Deps: deps,
			Input: func(s SetupInputs) EnsureDeviceInput { return s.EnsureDevice }, Impl: ensureDeviceNode{deps.Sessions, &Warm{}}},
		&Node[ProvisionAppInput, ProvisionAppOutput]{Next: NodeLaunchOrAttach, Deps: deps,
			Input: func(s SetupInputs) ProvisionAppInput { return s.ProvisionApp }, Impl: provisionAppNode{deps.Provision}},
		&Node[LaunchOrAttachInput, LaunchOrAttachOutput]{Next: NodeWaitIdle, Deps: deps,
			Input: func(s SetupInputs) LaunchOrAttachInput { return s.LaunchOrAttach }, Impl: launchOrAttachNode{}},
		&Node[WaitIdleInput, WaitIdleOutput]{Next: agent.End, Deps: deps,
			Input: func(s SetupInputs) WaitIdleInput { return s.WaitIdle }, Impl: waitIdleNode{}},
	)
}

// mergeContext gives a node the session and device EnsureDevice established,
// keeping what the node's own input says where it says it.
func mergeContext(own, from *DeviceRuntimeContext) *DeviceRuntimeContext {
	if own == nil {
		return from
	}
	if from == nil {
		return own
	}
	m := *own
	if m.DriverSessionID == "" {
		m.DriverSessionID = from.DriverSessionID
	}
	if m.DeviceID == "" {
		m.DeviceID = from.DeviceID
	}
	if m.CapabilitiesEcho == nil {
		m.CapabilitiesEcho = from.CapabilitiesEcho
	}
	if m.HealthProbeStatus == "" {
		m.HealthProbeStatus = from.HealthProbeStatus
	}
	return &m
}
