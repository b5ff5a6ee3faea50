package nodes

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/policy"
)

// SetupGraphName names the setup chain graph.
const SetupGraphName = "setup"

// SetupRequest is a setup run's request: each node's input in the spec's
// JSON (screengraph-nodes.md), validated and coerced by the node's JSON
// Schema. The daemon stores its Plan as the run's Input; `run --input` and
// runs stored before plans hold it as submitted. runId, tenantId and projectId are filled from the run;
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
// anything runs or is written: each node input is decoded once
// (strictjson.DecodeTree), then goes through decodeNodeTree as a submitted
// Plan's do. With only, just those nodes' inputs are decoded (the others
// stay zero). The daemon decodes a request with NewSetupRun into a Plan;
// DecodeSetup serves requests held as SetupRequest (`run --input`, runs
// stored before plans).
func DecodeSetup(r agent.Run, req SetupRequest, only ...string) (SetupInputs, error) {
	mode, err := ParseMode(req.SchemaMode)
	if err != nil {
		return SetupInputs{}, err
	}
	var in SetupInputs
	ids := PlanHeader{RunID: r.RunID, TenantID: r.TenantID, ProjectID: r.ProjectID}
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
		var tree any
		if len(s.raw) > 0 {
			// Duplicate keys and keys of one object differing only by case
			// are refused here; the node's schema judges the rest.
			if tree, err = strictjson.DecodeTree("$."+inputKey(s.node), s.raw, nil, strictjson.Options{AllowUnknown: true}); err != nil {
				return SetupInputs{}, err
			}
		}
		co, err := decodeNodeTree(s.node, tree, mode, ids, s.dst)
		if err != nil {
			return SetupInputs{}, err
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

// NewSetupGraph is the setup chain EnsureDevice -> ProvisionApp ->
// LaunchOrAttach -> WaitIdle as an agent.Graph.
func NewSetupGraph(deps SetupDeps) (*agent.Graph, error) {
	return agent.NewGraph(SetupGraphName, NodeEnsureDevice,
		&setupNode{name: NodeEnsureDevice, next: NodeProvisionApp, deps: deps},
		&setupNode{name: NodeProvisionApp, next: NodeLaunchOrAttach, deps: deps},
		&setupNode{name: NodeLaunchOrAttach, next: NodeWaitIdle, deps: deps},
		&setupNode{name: NodeWaitIdle, next: agent.End, deps: deps},
	)
}

type setupNode struct {
	name, next string
	deps       SetupDeps
}

func (n *setupNode) Name() string { return n.name }

func (n *setupNode) Run(ctx context.Context, in agent.NodeInput) agent.NodeResult {
	plan, err := PlanFor(in.Run, n.name)
	if err != nil {
		return agent.NodeResult{Err: err}
	}
	inputs := plan.Inputs()
	if n.next == agent.End {
		plans.drop(in.Run.RunID) // the last node: a retry decodes the stored plan
	}
	pol, _ := in.Policy.(*policy.Policy)
	if pol == nil {
		pol = policy.Default()
	}
	var (
		mu     sync.Mutex
		deltas []agent.TokenDelta
	)
	p := n.deps.Ports
	p.Rand = in.Rand()
	p.Progress = func(line string) {
		line = agent.RedactString(line) // Logf did; a direct Progress call may not
		if in.Progress != nil {
			in.Progress(agent.Log("%s", line)) // committed while the node runs
		} else {
			mu.Lock()
			deltas = append(deltas, agent.Log("%s", line))
			mu.Unlock()
		}
		if n.deps.Progress != nil {
			n.deps.Progress(n.name, line)
		}
	}
	var drc *DeviceRuntimeContext
	if raw, ok := in.Outputs[NodeEnsureDevice]; ok {
		var ed EnsureDeviceOutput
		if err := json.Unmarshal(raw, &ed); err == nil {
			drc = ed.DeviceRuntimeContext
		}
	}
	if drc != nil && n.deps.DeviceFor != nil {
		p.Device = n.deps.DeviceFor(drc.DeviceID)
	}
	var out any
	switch n.name {
	case NodeEnsureDevice:
		i := inputs.EnsureDevice
		i.IterationOrdinalNumber = in.IterationOrdinalNumber
		if i.DriverReusePolicy == "" {
			i.DriverReusePolicy = DriverReusePolicy(pol.DriverReusePolicy)
		}
		i.Emulator = EmulatorOptions{IdleKill: time.Duration(pol.Emulator.IdleKillMinutes) * time.Minute,
			ColdBoot: !pol.Emulator.QuickBoot, SaveSnapshot: pol.Emulator.SaveSnapshot}
		out, err = EnsureDevice(ctx, i, p, n.deps.Sessions)
	case NodeProvisionApp:
		i := inputs.ProvisionApp
		i.IterationOrdinalNumber = in.IterationOrdinalNumber
		i.DeviceRuntimeContext = mergeContext(i.DeviceRuntimeContext, drc)
		if i.InstallationPolicy == "" {
			i.InstallationPolicy = InstallationPolicy(pol.InstallationPolicy)
		}
		out, err = ProvisionApp(ctx, i, p, n.deps.Provision)
	case NodeLaunchOrAttach:
		i := inputs.LaunchOrAttach
		i.IterationOrdinalNumber = in.IterationOrdinalNumber
		i.DeviceRuntimeContext = mergeContext(i.DeviceRuntimeContext, drc)
		if i.ApplicationUnderTestDescriptor.AndroidPackageID == "" {
			i.ApplicationUnderTestDescriptor = inputs.ProvisionApp.ApplicationUnderTestDescriptor
		}
		if i.LaunchAttachMode == "" {
			i.LaunchAttachMode = LaunchAttachMode(pol.LaunchAttachMode)
		}
		i.Attempt = in.Attempt // a retry starts the app in a fresh process
		out, err = LaunchOrAttach(ctx, i, p)
		if e := agent.Classify(err); e != nil && e.ID == agent.ErrAppCrashed && e.Retryable {
			// A crash at launch is retryable while the policy grants another
			// attempt (retries.maxAttemptsByError, default one retry); the
			// last one says it is not.
			if again, _ := pol.Decide(n.name, e.ID, in.Attempt); !again {
				e.Retryable = false
			}
		}
	case NodeWaitIdle:
		i := inputs.WaitIdle
		i.IterationOrdinalNumber = in.IterationOrdinalNumber
		i.DeviceRuntimeContext = mergeContext(i.DeviceRuntimeContext, drc)
		if i.ApplicationUnderTestDescriptor == nil {
			a := inputs.LaunchOrAttach.ApplicationUnderTestDescriptor
			if a.AndroidPackageID == "" {
				a = inputs.ProvisionApp.ApplicationUnderTestDescriptor
			}
			i.ApplicationUnderTestDescriptor = &a
		}
		h := &i.IdleHeuristicsConfiguration
		setDefault(&h.MinQuietMillis, pol.Idle.MinQuietMillis)
		setDefault(&h.MaxWaitMillis, pol.Idle.MaxWaitMillis)
		setDefault(&h.SamplingIntervalMillis, pol.Idle.SampleIntervalMillis)
		if h.CountQuietFromLastFrame == nil {
			b := pol.Idle.CountQuietFromLastFrame
			h.CountQuietFromLastFrame = &b
		}
		if p.IdleScreens != nil {
			// WaitIdle ends the graph: on success the engine captures the
			// policy's onSuccess kinds, which may ride on its last sample.
			kinds, _ := policy.EvidenceKinds(pol, false)
			i.Evidence = IdleEvidence{StepOrdinal: in.StepOrdinal, Attempt: in.Attempt,
				Screenshot: slices.Contains(kinds, agent.ArtifactScreenshot), Hierarchy: slices.Contains(kinds, agent.ArtifactUIHierarchy)}
		}
		out, err = WaitIdle(ctx, i, p)
	}
	mu.Lock()
	defer mu.Unlock()
	return agent.NodeResult{Output: out, Next: n.next, Err: err, Deltas: deltas}
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

func setDefault(p **int64, v int) {
	if *p == nil && v > 0 {
		x := int64(v)
		*p = &x
	}
}
