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
	// Video tunes the recording kept as kind video (issue 27). The device
	// records whenever either list names video (the outcome is known only
	// at the end); the outcome's list decides whether it is kept.
	Video Video `yaml:"video" json:"video"`
}

// Video says how a run's screen is recorded (`screenrecord` on the device,
// from LaunchOrAttach's start to the run's end), e.g.
//
//	video: {shortSide: 720, bitRate: 4000000, segment: 180s, maxLength: 10m, maxBytes: 33554432}
type Video struct {
	// ShortSide is the video's shorter side in pixels (screenrecord
	// --size is the display's size scaled to it, aspect kept, even
	// dimensions); a display smaller than it is recorded at its own size.
	// Default 720 (720p), 144..2160.
	ShortSide int `yaml:"shortSide" json:"shortSide"`
	// BitRate is screenrecord --bit-rate in bits/s; default 4000000 (4
	// Mbit/s, about 30 MB a minute of full motion, far less on a still
	// screen), 100000..200000000 as screenrecord accepts.
	BitRate int `yaml:"bitRate" json:"bitRate"`
	// Segment is screenrecord --time-limit: each segment ends by itself
	// after it, and the next starts until the run ends (1s..180s, the
	// limit of most Android releases; default 180s).
	Segment Duration `yaml:"segment" json:"segment"`
	// MaxLength bounds the recording of one run: no segment starts after
	// it (default 10m, at most 1h).
	MaxLength Duration `yaml:"maxLength" json:"maxLength"`
	// MaxBytes bounds the kept video in bytes: segments past it are left
	// out, with a log line (default and at most agent.MaxArtifactBytes).
	MaxBytes int64 `yaml:"maxBytes" json:"maxBytes"`
}

// DefaultVideo is the recording a policy that says nothing of it gets.
func DefaultVideo() Video {
	return Video{ShortSide: 720, BitRate: 4000000, Segment: Duration(180 * time.Second),
		MaxLength: Duration(10 * time.Minute), MaxBytes: agent.MaxArtifactBytes}
}

// VideoOf is pol's video settings, and whether either of its evidence
// lists names video; the defaults for a policy that is not a *Policy.
func VideoOf(pol agent.RetryPolicy) (Video, bool) {
	e := defaultEvidence()
	if p, ok := pol.(*Policy); ok {
		e = p.Evidence
	}
	return e.Video, slices.Contains(e.OnSuccess, agent.ArtifactVideo) || slices.Contains(e.OnFailure, agent.ArtifactVideo)
}

// defaultEvidence: a successful run keeps what the screen looked like
// (screenshot and hierarchy, for the graph's next nodes and for humans);
// a failed one also the logcat, where a crash's stack is, and the video of
// how it got there (issue 27).
func defaultEvidence() Evidence {
	return Evidence{
		OnSuccess: []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy},
		OnFailure: []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy, agent.ArtifactLogcat, agent.ArtifactANRTraces, agent.ArtifactVideo},
		Budget:    Duration(20 * time.Second),
		Video:     DefaultVideo(),
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
	e.Video.validate(bad)
}

// validate checks the video settings against screenrecord's ranges and the
// artifact cap.
func (v Video) validate(bad func(format string, args ...any)) {
	if v.ShortSide < 144 || v.ShortSide > 2160 {
		bad("evidence.video.shortSide %d: must be 144..2160", v.ShortSide)
	}
	if v.BitRate < 100000 || v.BitRate > 200000000 {
		bad("evidence.video.bitRate %d: must be 100000..200000000 (screenrecord's range)", v.BitRate)
	}
	if v.Segment.D() < time.Second || v.Segment.D() > 180*time.Second || v.Segment.D()%time.Second != 0 {
		bad("evidence.video.segment %s: must be whole seconds, 1s..180s (screenrecord --time-limit)", v.Segment.D())
	}
	if v.MaxLength.D() < time.Second || v.MaxLength.D() > time.Hour {
		bad("evidence.video.maxLength %s: must be 1s..1h", v.MaxLength.D())
	}
	if v.MaxBytes < 1 || v.MaxBytes > agent.MaxArtifactBytes {
		bad("evidence.video.maxBytes %d: must be 1..%d", v.MaxBytes, agent.MaxArtifactBytes)
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
