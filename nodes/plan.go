package nodes

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sync"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/schema"
	"github.com/screengraph/screengraph-agent/agent/strictjson"
)

// PlanVersion is the version of the Plan this daemon writes (PlanHeader.Version).
// A stored plan of a higher version is refused (a newer daemon wrote it); a run
// input with no plan header is a run request stored before plans (version 0) and
// is decoded the old way, node input by node input.
const PlanVersion = 1

// Plan is a setup run's request decoded once, at submit: the four node inputs,
// typed, validated against their JSON Schemas and coerced in the request's
// schema mode (schema-enforcement.md), with runId, tenantId and projectId set
// from the run. It is stored as the run's Input (JSON: the run request's own
// shape, each node input under its key, plus the "plan" header), so GET
// /v1/runs/{id} shows the input as the nodes receive it. A node gets its typed
// input from it (PlanFor) and never reads the request text.
//
// Modes and idle heuristics a node input leaves out are not filled here: they
// come from the policy in force at the node's step, which a policy switch
// between nodes may change.
type Plan struct {
	PlanHeader `json:"plan"`
	// SchemaMode is the request's schemaMode as submitted ("" = coerce).
	SchemaMode     string              `json:"schemaMode,omitempty"`
	EnsureDevice   EnsureDeviceInput   `json:"ensureDevice"`
	ProvisionApp   ProvisionAppInput   `json:"provisionApp"`
	LaunchOrAttach LaunchOrAttachInput `json:"launchOrAttach"`
	WaitIdle       WaitIdleInput       `json:"waitIdle"`

	// inputErrs are the node inputs of a run request stored before plans
	// that did not decode, by node: only the nodes reading them fail.
	inputErrs map[string]error
}

// PlanHeader is the "plan" object of a stored Plan.
type PlanHeader struct {
	// Version is PlanVersion when written.
	Version       int    `json:"version"`
	RunID         string `json:"runId"`
	TenantID      string `json:"tenantId,omitempty"`
	ProjectID     string `json:"projectId,omitempty"`
	PolicyVersion int    `json:"policyVersion"`
	// Coercions are the repairs the schema mode applied, node by node in
	// chain order, each path prefixed with the node input's key
	// ("/ensureDevice/deviceConfiguration/bootTimeoutMillis").
	Coercions []Coercion `json:"coercions,omitempty"`
}

// Inputs are the plan's node inputs as SetupInputs (with the coercions).
func (p *Plan) Inputs() SetupInputs {
	return SetupInputs{EnsureDevice: p.EnsureDevice, ProvisionApp: p.ProvisionApp,
		LaunchOrAttach: p.LaunchOrAttach, WaitIdle: p.WaitIdle, Coercions: p.Coercions}
}

// withIDs sets runId, tenantId and projectId of every node input from the
// header (a node input's own values for them never count).
func (p *Plan) withIDs() {
	h := p.PlanHeader
	p.EnsureDevice.RunID, p.EnsureDevice.TenantID, p.EnsureDevice.ProjectID = h.RunID, h.TenantID, h.ProjectID
	p.ProvisionApp.RunID, p.ProvisionApp.TenantID, p.ProvisionApp.ProjectID = h.RunID, h.TenantID, h.ProjectID
	p.LaunchOrAttach.RunID, p.LaunchOrAttach.TenantID, p.LaunchOrAttach.ProjectID = h.RunID, h.TenantID, h.ProjectID
	p.WaitIdle.RunID, p.WaitIdle.TenantID, p.WaitIdle.ProjectID = h.RunID, h.TenantID, h.ProjectID
}

// submitShape is the top level of a run request for the strict decode:
// the keys of SubmitRequest, each node input free-form (the schema judges
// its keys, after case correction).
var submitShape = reflect.TypeFor[SubmitRequest]()

// scopeKeys are the node-input keys that name whose run it is. The run
// sets them; a case variant ("TenantID") is refused in every schema mode,
// never corrected, so no reader can take it for the scope.
var scopeKeys = []string{"runId", "tenantId", "projectId"}

// decodePlanWith decodes body (a run request, see NewSetupRun) into a Plan
// in one pass over the text (strictjson.DecodeTree); everything after works
// on the decoded value. The header gets runID, and tenant/project/policy
// version as the request names them, then ids checks and defaults them
// before the node inputs are decoded with them.
func decodePlanWith(runID string, body []byte, ids func(*PlanHeader) error) (*Plan, error) {
	tree, err := strictjson.DecodeTree("$", body, submitShape, strictjson.Options{})
	if err != nil {
		return nil, err
	}
	top, ok := tree.(map[string]any)
	if !ok {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "$: expected a JSON object, received %s", schema.Received(tree))
	}
	p := &Plan{PlanHeader: PlanHeader{Version: PlanVersion, RunID: runID}}
	if err := p.readHeader(top); err != nil {
		return nil, err
	}
	if err := ids(&p.PlanHeader); err != nil {
		return nil, err
	}
	mode, err := ParseMode(p.SchemaMode)
	if err != nil {
		return nil, err
	}
	if v, ok := top["waitIdle"]; !ok || v == nil {
		top["waitIdle"] = map[string]any{"idleHeuristicsConfiguration": map[string]any{}}
	}
	for _, s := range p.steps() {
		co, err := decodeNodeTree(s.node, top[inputKey(s.node)], mode, p.PlanHeader, s.dst)
		if err != nil {
			return nil, err
		}
		p.Coercions = append(p.Coercions, co...)
	}
	return p, nil
}

// readHeader reads the request's tenantId, projectId, schemaMode and
// policyVersion into p (each optional; a wrong type is refused).
func (p *Plan) readHeader(top map[string]any) error {
	var err error
	if p.TenantID, err = treeString(top, "tenantId"); err != nil {
		return err
	}
	if p.ProjectID, err = treeString(top, "projectId"); err != nil {
		return err
	}
	if p.SchemaMode, err = treeString(top, "schemaMode"); err != nil {
		return err
	}
	if v, ok := top["policyVersion"]; ok && v != nil {
		n, isNum := v.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || int64(int(i)) != i {
			return agent.Errorf(agent.ErrInvalidRequest, "$.policyVersion: expected an integer, received %s", schema.Received(v))
		}
		p.PolicyVersion = int(i)
	}
	return nil
}

type planStep struct {
	node string
	dst  any
}

func (p *Plan) steps() []planStep {
	return []planStep{
		{NodeEnsureDevice, &p.EnsureDevice},
		{NodeProvisionApp, &p.ProvisionApp},
		{NodeLaunchOrAttach, &p.LaunchOrAttach},
		{NodeWaitIdle, &p.WaitIdle},
	}
}

func treeString(obj map[string]any, key string) (string, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", agent.Errorf(agent.ErrInvalidRequest, "$.%s: expected a string, received %s", key, schema.Received(v))
	}
	return s, nil
}

// decodeNodeTree is the decode of one node input (v, as DecodeTree returned
// it; nil = absent) into dst (a pointer to the node's input struct): scope
// keys refused in any case variant; in strict mode every other case variant
// refused too; the node's JSON Schema with the mode's coercions (case
// correction of the other keys included); then the typed assignment, which
// reads no text. The run ids are not read from v: the Plan sets them.
// Errors: an *InputError whose Err is an *agent.Error invalid_request_error
// naming the path, or a strictjson error naming $.<input>.….
func decodeNodeTree(node string, v any, mode Mode, ids PlanHeader, dst any) ([]Coercion, error) {
	key := inputKey(node)
	obj, ok := v.(map[string]any)
	switch {
	case v == nil:
		obj = map[string]any{}
	case !ok:
		return nil, &InputError{Node: node, Err: agent.Errorf(agent.ErrInvalidRequest, "%s input: not a JSON object (received %s)", node, schema.Received(v))}
	}
	s, err := schemaFor(node + ".input")
	if err != nil {
		return nil, err
	}
	if err := schema.CheckKeyCase("$."+key, obj, s.doc, mode == ModeStrict, scopeKeys); err != nil {
		return nil, err
	}
	// The run's ids, never the node input's own (the schema checks them).
	for _, k := range scopeKeys {
		delete(obj, k)
	}
	obj["runId"] = ids.RunID
	if ids.TenantID != "" {
		obj["tenantId"] = ids.TenantID
	}
	if ids.ProjectID != "" {
		obj["projectId"] = ids.ProjectID
	}
	tree, cs, err := validateTree(node+".input", obj, mode)
	if err != nil {
		return nil, &InputError{Node: node, Err: err}
	}
	if err := strictjson.Assign(dst, tree); err != nil {
		return nil, &InputError{Node: node, Err: agent.Wrap(agent.ErrInvalidRequest, err, "%s input", node)}
	}
	for i := range cs {
		cs[i].Path = "/" + key + cs[i].Path
	}
	return cs, nil
}

// planCache hands a node the Plan decoded at submit when the daemon that
// accepted the run executes it (the usual case on one host): by runId, valid
// only while the run's stored Input is byte for byte the plan's encoding, so
// a run stored some other way (another daemon, `run`, a test) never gets a
// stale plan. Bounded: past planCacheSize the oldest entry goes; a run not
// found decodes its stored plan once (PlanFor) and is cached again.
type planCache struct {
	mu    sync.Mutex
	order []string
	byID  map[string]cachedPlan
}

type cachedPlan struct {
	input []byte
	plan  *Plan
}

const planCacheSize = 256

var plans = &planCache{byID: map[string]cachedPlan{}}

func (c *planCache) put(input []byte, p *Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[p.RunID]; !ok {
		c.order = append(c.order, p.RunID)
	}
	c.byID[p.RunID] = cachedPlan{input: input, plan: p}
	for len(c.order) > planCacheSize {
		delete(c.byID, c.order[0])
		c.order = slices.Delete(c.order, 0, 1)
	}
}

func (c *planCache) get(runID string, input []byte) *Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[runID]
	if !ok || !bytes.Equal(e.input, input) {
		return nil
	}
	return e.plan
}

func (c *planCache) drop(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[runID]; !ok {
		return
	}
	delete(c.byID, runID)
	c.order = slices.DeleteFunc(c.order, func(id string) bool { return id == runID })
}

// PlanFor is the Plan of a setup run, for its nodes: the one decoded at
// submit when this daemon accepted the run and still holds it, otherwise
// the run's stored Input decoded once (a version-1 plan: one typed decode,
// no schema pass, it was validated at submit; a run request stored before
// plans: each node input through its schema, as DecodeSetup) and held for
// the run's next nodes. runId, tenantId and projectId of every node input
// are the run row's. The Plan is shared: a node copies what it changes.
// Errors: invalid_request_error for an Input that does not decode or a plan
// version this daemon does not know.
func PlanFor(run agent.Run, node string) (*Plan, error) {
	p, err := planFor(run)
	if err != nil {
		return nil, err
	}
	for _, n := range setupUses[node] {
		if err := p.inputErrs[n]; err != nil {
			return nil, err
		}
	}
	return p, nil
}

// setupUses are the node inputs each setup node reads (its own, and the
// application descriptor of those before it).
var setupUses = map[string][]string{
	NodeEnsureDevice:   {NodeEnsureDevice},
	NodeProvisionApp:   {NodeProvisionApp},
	NodeLaunchOrAttach: {NodeLaunchOrAttach, NodeProvisionApp},
	NodeWaitIdle:       {NodeWaitIdle, NodeLaunchOrAttach, NodeProvisionApp},
}

func planFor(run agent.Run) (*Plan, error) {
	if p := plans.get(run.RunID, run.Input); p != nil {
		if p.TenantID == run.TenantID && p.ProjectID == run.ProjectID {
			return p, nil
		}
		// Submit set the tenant after Prepare: a copy with the run's ids.
		q := *p
		q.TenantID, q.ProjectID = run.TenantID, run.ProjectID
		q.withIDs()
		plans.put(run.Input, &q)
		return &q, nil
	}
	var p Plan
	strictjson.NotePass("stored-plan", run.RunID)
	if err := json.Unmarshal(run.Input, &p); err != nil || p.Version == 0 {
		lp, lerr := legacyPlan(run)
		if lerr != nil {
			return nil, lerr
		}
		p = *lp
	} else if p.Version > PlanVersion {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "run input: plan version %d is newer than this daemon's (%d); run it on an upgraded daemon", p.Version, PlanVersion)
	}
	p.RunID, p.TenantID, p.ProjectID = run.RunID, run.TenantID, run.ProjectID
	p.withIDs()
	plans.put(run.Input, &p)
	return &p, nil
}

// legacyPlan decodes a run request stored as submitted (before plans, or by
// `run`): every node input through its schema; one that fails fails only
// the nodes reading it (PlanFor).
func legacyPlan(run agent.Run) (*Plan, error) {
	var req SetupRequest
	strictjson.NotePass("legacy-input", run.RunID)
	if err := json.Unmarshal(run.Input, &req); err != nil {
		return nil, agent.Wrap(agent.ErrInvalidRequest, err, "run input")
	}
	p := &Plan{PlanHeader: PlanHeader{Version: PlanVersion, PolicyVersion: run.PolicyVersion}, SchemaMode: req.SchemaMode}
	for _, s := range p.steps() {
		in, err := DecodeSetup(run, req, s.node)
		if err != nil {
			if p.inputErrs == nil {
				p.inputErrs = map[string]error{}
			}
			p.inputErrs[s.node] = err
			continue
		}
		switch s.node {
		case NodeEnsureDevice:
			p.EnsureDevice = in.EnsureDevice
		case NodeProvisionApp:
			p.ProvisionApp = in.ProvisionApp
		case NodeLaunchOrAttach:
			p.LaunchOrAttach = in.LaunchOrAttach
		case NodeWaitIdle:
			p.WaitIdle = in.WaitIdle
		}
		p.Coercions = append(p.Coercions, in.Coercions...)
	}
	return p, nil
}
