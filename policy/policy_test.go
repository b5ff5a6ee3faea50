package policy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/agenttest"
	"github.com/screengraph/screengraph-agent/policy"
)

func TestDefaultIsValidAndMatchesAgentRetryability(t *testing.T) {
	p := policy.Default()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, id := range agent.ErrorIDs {
		if got, want := p.Retryable(policy.NodeEnsureDevice, id), agent.DefaultRetryable(id); got != want {
			t.Errorf("%s: policy retries=%v, agent.DefaultRetryable=%v", id, got, want)
		}
	}
	if p.Timeout(policy.NodeEnsureDevice) != 3*time.Minute || p.Timeout("SomeLaterNode") != time.Minute {
		t.Errorf("timeouts %s %s", p.Timeout(policy.NodeEnsureDevice), p.Timeout("SomeLaterNode"))
	}
}

func TestDecide(t *testing.T) {
	p := policy.Default()
	p.NodeRetries = map[string]policy.Retry{"ProvisionApp": {MaxAttempts: 2, InitialBackoff: policy.Duration(5 * time.Second), MaxBackoff: policy.Duration(5 * time.Second), Multiplier: 1, RetryOn: []agent.ErrorID{agent.ErrInstallFailed}}}
	for _, c := range []struct {
		node    string
		id      agent.ErrorID
		attempt int
		retry   bool
		backoff time.Duration
	}{
		{"EnsureDevice", agent.ErrDeviceOffline, 1, true, time.Second},
		{"EnsureDevice", agent.ErrDeviceOffline, 2, true, 2 * time.Second},
		{"EnsureDevice", agent.ErrDeviceOffline, 3, false, 0}, // maxAttempts 3 reached
		{"EnsureDevice", agent.ErrBootTimeout, 1, false, 0},   // not listed
		{"EnsureDevice", agent.ErrorID("made_up"), 1, false, 0},
		{"EnsureDevice", agent.ErrNetwork, 0, false, 0},
		{"ProvisionApp", agent.ErrInstallFailed, 1, true, 5 * time.Second},
		{"ProvisionApp", agent.ErrNetwork, 1, false, 0}, // the node's own rule replaces the default
		{"ProvisionApp", agent.ErrInstallFailed, 2, false, 0},
	} {
		retry, backoff := policy.Decide(p, c.node, c.id, c.attempt)
		if retry != c.retry || backoff != c.backoff {
			t.Errorf("Decide(%s, %s, %d) = %v, %s; want %v, %s", c.node, c.id, c.attempt, retry, backoff, c.retry, c.backoff)
		}
	}
	// app_crashed: one retry by default (maxAttemptsByError), none when a
	// policy sets 1.
	if r, _ := p.Decide("LaunchOrAttach", agent.ErrAppCrashed, 1); !r {
		t.Error("app_crashed attempt 1: not retried")
	}
	if r, _ := p.Decide("LaunchOrAttach", agent.ErrAppCrashed, 2); r {
		t.Error("app_crashed attempt 2: retried again")
	}
	if r, _ := p.Decide("LaunchOrAttach", agent.ErrAppNotResponding, 1); r {
		t.Error("app_not_responding retried")
	}
	q, err := policy.Parse([]byte("version: 2\nretries: {maxAttemptsByError: {app_crashed: 1}}"))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := q.Decide("LaunchOrAttach", agent.ErrAppCrashed, 1); r {
		t.Error("maxAttemptsByError app_crashed 1: retried")
	}
	if r, _ := q.Decide("LaunchOrAttach", agent.ErrLaunchTimeout, 2); !r {
		t.Error("maxAttemptsByError changed another id's attempts")
	}
	p.Retries.MaxAttempts = 10
	var got []time.Duration
	for a := 1; a < 10; a++ {
		_, b := p.Decide("WaitIdle", agent.ErrTimeout, a)
		got = append(got, b)
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10, 10, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("backoffs %v", got)
		}
	}
}

// Decide is pure and its backoff never decreases with the attempt and never
// exceeds maxBackoff.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := policy.Default()
		p.Retries.MaxAttempts = rapid.IntRange(1, 50).Draw(rt, "max")
		p.Retries.InitialBackoff = policy.Duration(rapid.IntRange(0, 5000).Draw(rt, "init")) * policy.Duration(time.Millisecond)
		p.Retries.MaxBackoff = p.Retries.InitialBackoff + policy.Duration(rapid.IntRange(0, 60000).Draw(rt, "extra"))*policy.Duration(time.Millisecond)
		p.Retries.Multiplier = 1 + float64(rapid.IntRange(0, 1000).Draw(rt, "mult"))/100
		if err := p.Validate(); err != nil {
			rt.Fatal(err)
		}
		id := rapid.SampledFrom(agent.ErrorIDs).Draw(rt, "id")
		prev := time.Duration(0)
		for a := 1; a <= p.Retries.MaxAttempts+1; a++ {
			r1, b1 := p.Decide("N", id, a)
			r2, b2 := p.Decide("N", id, a)
			if r1 != r2 || b1 != b2 {
				rt.Fatal("not pure")
			}
			limit := p.Retries.MaxAttempts
			if n, ok := p.Retries.MaxAttemptsByError[id]; ok && n < limit {
				limit = n
			}
			if r1 != (a < limit && p.Retryable("N", id)) {
				rt.Fatalf("attempt %d retry %v", a, r1)
			}
			if r1 && (b1 < prev || b1 > p.Retries.MaxBackoff.D()) {
				rt.Fatalf("attempt %d backoff %s after %s (max %s)", a, b1, prev, p.Retries.MaxBackoff.D())
			}
			if r1 {
				prev = b1
			}
		}
	})
}

func TestLoadOverlaysDefaults(t *testing.T) {
	p, err := policy.Load("testdata/ci-slow-devices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Version() != 2 || p.Timeout("EnsureDevice") != 4*time.Minute || p.Timeout("WaitIdle") != 45*time.Second ||
		p.Timeout("ProvisionApp") != 5*time.Minute { // from Default
		t.Fatalf("timeouts %+v", p.Timeouts)
	}
	if p.LaunchAttachMode != policy.ForceRestart || p.InstallationPolicy != policy.InstallIfMissing ||
		p.Idle != (policy.IdleHeuristics{MinQuietMillis: 800, MaxWaitMillis: 20000, SampleIntervalMillis: 200, CountQuietFromLastFrame: true}) {
		t.Fatalf("modes/idle %+v", p)
	}
	if r, b := p.Decide("EnsureDevice", agent.ErrTimeout, 2); !r || b != 6*time.Second {
		t.Fatalf("decide %v %s", r, b)
	}
	if r, _ := p.Decide("EnsureDevice", agent.ErrNetwork, 1); r {
		t.Fatal("network_error no longer listed but retried")
	}
	if r, b := p.Decide("ProvisionApp", agent.ErrArtifactUnavailable, 1); !r || b != 5*time.Second {
		t.Fatalf("node rule %v %s", r, b)
	}
	// JSON is accepted too.
	js := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(js, []byte(`{"version": 3, "defaultTimeout": "90s", "retries": {"maxAttempts": 1, "initialBackoff": 0, "maxBackoff": 0, "multiplier": 1, "retryOn": []}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = policy.Load(js)
	if err != nil || p.Version() != 3 || p.Timeout("X") != 90*time.Second {
		t.Fatalf("json: %v %+v", err, p)
	}
	if r, _ := p.Decide("X", agent.ErrTimeout, 1); r {
		t.Fatal("maxAttempts 1 retried")
	}
}

func TestParseRejects(t *testing.T) {
	for doc, want := range map[string]string{
		`timeouts: {A: 1s}`:                                                            "version is required",
		"version: 2\ntimeoutz: {}":                                                     "field timeoutz not found",
		"version: 0":                                                                   "version 0",
		"version: 2\ndriverReusePolicy: SOMETIMES":                                     `driverReusePolicy "SOMETIMES"`,
		"version: 2\nretries: {multiplier: 0.5}":                                       "multiplier 0.5",
		"version: 2\nretries: {retryOn: [oops]}":                                       `unknown errorId "oops"`,
		"version: 2\nretries: {maxAttemptsByError: {app_crashed: 0}}":                  `maxAttemptsByError["app_crashed"] = 0`,
		"version: 2\nretries: {maxAttemptsByError: {oops: 2}}":                         `maxAttemptsByError["oops"]`,
		"version: 2\nretries: {maxBackoff: 10ms}":                                      "initialBackoff",
		"version: 2\ntimeouts: {A: soon}":                                              "soon",
		"version: 2\nidleHeuristics: {minQuietMillis: 100, sampleIntervalMillis: 300}": "sampleIntervalMillis <= minQuietMillis",
	} {
		_, err := policy.Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", doc, err, want)
		}
	}
}

func TestStoreSwitchAndPersistence(t *testing.T) {
	ctx := context.Background()
	kv := agenttest.NewStore()
	s, err := policy.NewStore(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if s.Current().Version() != 1 || !slices.Equal(s.Versions(), []int{1}) {
		t.Fatalf("fresh store %v", s.Versions())
	}
	v2 := policy.Default()
	v2.PolicyVersion = 2
	v2.Retries.MaxAttempts = 7
	if err := s.Add(ctx, v2); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, v2); err != nil {
		t.Fatalf("re-adding identical content: %v", err)
	}
	changed := *v2
	changed.LaunchAttachMode = policy.AttachOnly
	if err := s.Add(ctx, &changed); !errors.Is(err, policy.ErrVersionExists) {
		t.Fatalf("changed v2: %v", err)
	}
	bad := policy.Default()
	bad.PolicyVersion = 3
	bad.Retries.MaxAttempts = 0
	if err := s.Add(ctx, bad); err == nil {
		t.Fatal("invalid policy stored")
	}
	if err := s.Switch(ctx, 9); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("switch to unknown: %v", err)
	}
	if err := s.Switch(ctx, 2); err != nil {
		t.Fatal(err)
	}
	rp, err := s.Policy(ctx, 0)
	if err != nil || rp.Version() != 2 {
		t.Fatalf("current %v %v", rp, err)
	}
	if _, err := s.Policy(ctx, 5); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("unknown version: %v", err)
	}
	// A restarted daemon sees the same versions and current one.
	s2, err := policy.NewStore(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s2.Get(2)
	if err != nil || s2.Current().Version() != 2 || p2.Retries.MaxAttempts != 7 || !slices.Equal(s2.Versions(), []int{1, 2}) {
		t.Fatalf("reloaded: %v %v %+v", s2.Versions(), err, p2)
	}
	// Without a KV the store still works, in memory.
	s3, err := policy.NewStore(ctx, nil)
	if err != nil || s3.Current().Version() != 1 {
		t.Fatalf("memory store: %v", err)
	}
}

func TestCountQuietFromLastFrameDefaultsOn(t *testing.T) {
	if !policy.Default().Idle.CountQuietFromLastFrame {
		t.Fatal("default policy does not count the quiet window from the last frame")
	}
	p, err := policy.Parse([]byte("version: 3\nidleHeuristics:\n  countQuietFromLastFrame: false\n"))
	if err != nil || p.Idle.CountQuietFromLastFrame || p.Idle.MinQuietMillis != 500 {
		t.Fatalf("%+v %v", p, err)
	}
}

// A document stored before a field existed loads with that field's default.
func TestStoredDocumentGainsNewFieldsDefaults(t *testing.T) {
	ctx := context.Background()
	kv := agenttest.NewStore()
	old := `{"version":1,"defaultTimeout":"1m","driverReusePolicy":"REUSE_OR_CREATE","installationPolicy":"INSTALL_IF_MISSING",` +
		`"launchAttachMode":"LAUNCH_OR_ATTACH","idleHeuristics":{"minQuietMillis":500,"maxWaitMillis":10000,"sampleIntervalMillis":200}}`
	for k, v := range map[string]string{"policy/versions": "[1]", "policy/v1": old, "policy/current": "1"} {
		if err := kv.PutKV(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := policy.NewStore(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Current(); !p.Idle.CountQuietFromLastFrame || p.Idle.MinQuietMillis != 500 {
		t.Fatalf("%+v", p.Idle)
	}
}

// TestStoreAddFiles: serve's --policy files are added and the first becomes
// current; run's --policy file becomes current wherever it is in the list;
// the same files again change nothing; other content under a stored version
// or a file that does not load is the user's error naming the file.
func TestStoreAddFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	v3 := filepath.Join(dir, "v3.json")
	if err := os.WriteFile(v3, []byte(`{"version": 3, "defaultTimeout": "90s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := policy.NewStore(ctx, agenttest.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"testdata/ci-slow-devices.yaml", v3}
	if err := s.AddFiles(ctx, files, ""); err != nil {
		t.Fatal(err)
	}
	if s.Current().Version() != 2 || !slices.Equal(s.Versions(), []int{1, 2, 3}) {
		t.Fatalf("current %d, versions %v; want 2 of [1 2 3]", s.Current().Version(), s.Versions())
	}
	if err := s.AddFiles(ctx, files, v3); err != nil || s.Current().Version() != 3 {
		t.Fatalf("again with %s current: %v, current %d", v3, err, s.Current().Version())
	}

	other := filepath.Join(dir, "other-v3.json")
	if err := os.WriteFile(other, []byte(`{"version": 3, "defaultTimeout": "10s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{other, filepath.Join(dir, "missing.yaml")} {
		err := s.AddFiles(ctx, []string{f}, "")
		if agent.Classify(err).ID != agent.ErrInvalidRequest || !strings.Contains(err.Error(), f) {
			t.Errorf("%s: %v, want invalid_request_error naming it", f, err)
		}
	}
	if s.Current().Version() != 3 {
		t.Errorf("current %d after refusals, want 3", s.Current().Version())
	}
}

// Policy versions are fleet data (issue 23 item 4): a daemon's store that
// did not load a version another daemon added to the shared KV resolves it
// from there (Policy, Lookup); a version in neither stays not found.
func TestStoreReadsOtherDaemonsVersions(t *testing.T) {
	ctx := context.Background()
	kv := agenttest.NewStore()
	a, err := policy.NewStore(ctx, kv) // started first: version 1 only
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.NewStore(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	v2 := policy.Default()
	v2.PolicyVersion = 2
	v2.Retries.MaxAttempts = 7
	if err := b.Add(ctx, v2); err != nil {
		t.Fatal(err)
	}
	rp, err := a.Policy(ctx, 2)
	if err != nil || rp.Version() != 2 {
		t.Fatalf("daemon a resolving version 2: %v %v", rp, err)
	}
	if p, err := a.Lookup(ctx, 2); err != nil || p.Retries.MaxAttempts != 7 {
		t.Fatalf("Lookup(2) = %+v, %v", p, err)
	}
	if _, err := a.Policy(ctx, 3); !errors.Is(err, agent.ErrNotFound) {
		t.Fatalf("version in no store: %v, want not found", err)
	}
}
