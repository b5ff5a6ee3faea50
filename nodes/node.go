package nodes

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/policy"
)

// Node adapts one setup node, a type with a typed input In and output Out
// (NodeType), to agent.Node. The run's typed Plan (decoded once at submit,
// PlanFor) is taken here and only here, and Input picks the node's own
// struct; the node type
// completes it from the policy and the earlier nodes (NodeType.Prepare) and
// runs it on the ports built for the step (Deps.Ports with the step's
// random generator, progress and the device EnsureDevice named).
type Node[In, Out any] struct {
	Impl NodeType[In, Out]
	// Next is the node after this one (agent.End for the last).
	Next string
	Deps SetupDeps
	// Input picks the node's typed input out of the run's decoded inputs.
	Input func(SetupInputs) In
}

// NodeType is one setup node: its name, how the step completes its input,
// and the node's work (the node inputs it reads are setupUses[Name()]).
type NodeType[In, Out any] interface {
	Name() string
	Prepare(in *In, s StepContext)
	Run(ctx context.Context, in In, s StepContext, p Ports) (Out, error)
}

// StepContext is what a node knows of its step beyond its own input: the
// engine's NodeInput, the policy in force (policy.Default when the step
// carries none), every node input of the request it Uses, and the device
// runtime context EnsureDevice put in its output (nil before it ran).
type StepContext struct {
	Step    agent.NodeInput
	Policy  *policy.Policy
	Inputs  SetupInputs
	Context *DeviceRuntimeContext
}

var _ agent.Node = (*Node[WaitIdleInput, WaitIdleOutput])(nil)

// Name is the node type's name.
func (n *Node[In, Out]) Name() string { return n.Impl.Name() }

// Run decodes the node's input, prepares it and runs the node; the result
// carries the output (also on failure: its Common block says why), the
// node's error and, when the engine takes no live progress, the lines.
func (n *Node[In, Out]) Run(ctx context.Context, ni agent.NodeInput) agent.NodeResult {
	plan, err := PlanFor(ni.Run, n.Impl.Name())
	if err != nil {
		return agent.NodeResult{Err: err}
	}
	inputs := plan.Inputs()
	if n.Next == agent.End {
		plans.drop(ni.Run.RunID) // the last node: a retry decodes the stored plan
	}
	s := StepContext{Step: ni, Inputs: inputs, Context: runtimeContext(ni)}
	if s.Policy, _ = ni.Policy.(*policy.Policy); s.Policy == nil {
		s.Policy = policy.Default()
	}
	in := n.Input(inputs)
	n.Impl.Prepare(&in, s)
	lines := &progressLines{}
	out, err := n.Impl.Run(ctx, in, s, n.ports(ni, s.Context, lines))
	return agent.NodeResult{Output: out, Next: n.Next, Err: err, Deltas: lines.take()}
}

// ports are Deps.Ports for the step: its seeded generator, its progress
// (live through the engine, else kept in lines) and the device EnsureDevice
// named.
func (n *Node[In, Out]) ports(ni agent.NodeInput, drc *DeviceRuntimeContext, lines *progressLines) Ports {
	p := n.Deps.Ports
	p.Rand = ni.Rand()
	name, seen := n.Impl.Name(), n.Deps.Progress
	p.Progress = func(line string) {
		line = agent.RedactString(line) // Logf did; a direct Progress call may not
		if ni.Progress != nil {
			ni.Progress(agent.Log("%s", line)) // committed while the node runs
		} else {
			lines.add(agent.Log("%s", line))
		}
		if seen != nil {
			seen(name, line)
		}
	}
	if drc != nil && n.Deps.DeviceFor != nil {
		p.Device = n.Deps.DeviceFor(drc.DeviceID)
	}
	return p
}

// progressLines keeps a node's lines for its result (any goroutine may add).
type progressLines struct {
	mu     sync.Mutex
	deltas []agent.TokenDelta
}

func (l *progressLines) add(d agent.TokenDelta) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deltas = append(l.deltas, d)
}

func (l *progressLines) take() []agent.TokenDelta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deltas
}

// runtimeContext is the deviceRuntimeContext of EnsureDevice's output, nil
// before it ran (or when its output has none).
func runtimeContext(ni agent.NodeInput) *DeviceRuntimeContext {
	raw, ok := ni.Outputs[NodeEnsureDevice]
	if !ok {
		return nil
	}
	var ed EnsureDeviceOutput
	if err := json.Unmarshal(raw, &ed); err != nil {
		return nil
	}
	return ed.DeviceRuntimeContext
}
