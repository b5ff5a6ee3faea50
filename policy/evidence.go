package policy

import (
	"slices"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// Evidence says what a run keeps of the device (issue 14), e.g.
//
//	evidence: {onSuccess: [screenshot, ui_hierarchy], onFailure: [screenshot, ui_hierarchy, logcat], budget: 20s}
//
// OnSuccess is captured after the graph's last node (WaitIdle) succeeds,
// OnFailure after the node whose failure ends the run; kinds are
// agent.ArtifactKinds. An empty list captures nothing.
type Evidence struct {
	OnSuccess []string `yaml:"onSuccess" json:"onSuccess"`
	OnFailure []string `yaml:"onFailure" json:"onFailure"`
	// Budget bounds one capture (all its kinds); a kind not done by then is
	// a log line, never a failure of the run. Default 20s: a screenshot
	// and a page source take about a second on an emulator, a logcat dump
	// a few; a wedged device must not hold the run's end for long.
	Budget Duration `yaml:"budget" json:"budget"`
}

// defaultEvidence: a successful run keeps what the screen looked like
// (screenshot and hierarchy, for the graph's next nodes and for humans);
// a failed one also the logcat, where a crash's stack is.
func defaultEvidence() Evidence {
	return Evidence{
		OnSuccess: []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy},
		OnFailure: []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy, agent.ArtifactLogcat, agent.ArtifactANRTraces},
		Budget:    Duration(20 * time.Second),
	}
}

func (e Evidence) validate(bad func(format string, args ...any)) {
	for _, l := range []struct {
		name  string
		kinds []string
	}{{"onSuccess", e.OnSuccess}, {"onFailure", e.OnFailure}} {
		for _, k := range l.kinds {
			if !slices.Contains(agent.ArtifactKinds, k) {
				bad("evidence.%s: unknown kind %q (want one of %v)", l.name, k, agent.ArtifactKinds)
			}
		}
		if len(l.kinds) > len(agent.ArtifactKinds) {
			bad("evidence.%s: %d kinds, at most %d", l.name, len(l.kinds), len(agent.ArtifactKinds))
		}
	}
	if e.Budget <= 0 || e.Budget.D() > 5*time.Minute {
		bad("evidence.budget %s: must be > 0 and at most 5m", e.Budget.D())
	}
}

// EvidenceKinds is what a capture after a final success (failed false) or
// failure keeps under pol, and its time budget. A policy that is not a
// *Policy gets the defaults.
func EvidenceKinds(pol agent.RetryPolicy, failed bool) ([]string, time.Duration) {
	e := defaultEvidence()
	if p, ok := pol.(*Policy); ok {
		e = p.Evidence
	}
	if failed {
		return slices.Clone(e.OnFailure), e.Budget.D()
	}
	return slices.Clone(e.OnSuccess), e.Budget.D()
}
