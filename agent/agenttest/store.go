// Package agenttest holds test doubles for package agent: an in-memory Store
// that keeps the Store contract (CAS on runs.status, unique event sequences,
// atomic steps), scriptable fake nodes with named knobs, and a simple
// versioned retry policy.
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// Store is an in-memory agent.Store. CommitStep is atomic: it checks the CAS
// and every sequence before writing anything. Safe for concurrent use.
type Store struct {
	// BeforeCommit, when set, runs before each CommitStep is applied, outside
	// the lock: tests use it to race a control request against a commit.
	BeforeCommit func(s agent.Step)
	// CommitErr, when set, is consulted before each CommitStep; a non-nil
	// result fails the commit (nothing written).
	CommitErr func(s agent.Step) error

	mu        sync.Mutex
	runs      map[string]agent.Run
	events    map[string][]agent.Event
	snapshots map[string]map[int]agent.Snapshot
	outbox    []agent.OutboxRow
	control   map[string][]agent.Control
	kv        map[string][]byte
	commits   int
	artifacts []agent.Artifact
	closed    bool
}

var _ agent.Store = (*Store)(nil)

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{
		runs: map[string]agent.Run{}, events: map[string][]agent.Event{},
		snapshots: map[string]map[int]agent.Snapshot{}, control: map[string][]agent.Control{},
		kv: map[string][]byte{},
	}
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed {
		return fmt.Errorf("agenttest store: closed")
	}
	return nil
}

// CreateRun inserts r; an existing runId is an error.
func (s *Store) CreateRun(ctx context.Context, r agent.Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	if _, ok := s.runs[r.RunID]; ok {
		return fmt.Errorf("run %s exists", r.RunID)
	}
	if r.Status == "" {
		r.Status = agent.RunPending
	}
	// The stores' defaults (storetest: Runs): created now, updated when
	// created, in the stores' microsecond precision.
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now()
	}
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = r.CreatedAt
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC().Truncate(time.Microsecond), r.UpdatedAt.UTC().Truncate(time.Microsecond)
	s.runs[r.RunID] = r
	return nil
}

// sees reports whether sc sees the run (false for an unknown run); the
// caller holds s.mu.
func (s *Store) sees(sc agent.Scope, runID string) bool {
	r, ok := s.runs[runID]
	return ok && sc.Sees(r.TenantID)
}

func (s *Store) GetRun(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return agent.Run{}, err
	}
	if err := sc.Valid(); err != nil {
		return agent.Run{}, err
	}
	r, ok := s.runs[runID]
	if !ok || !sc.Sees(r.TenantID) {
		return agent.Run{}, fmt.Errorf("run %s: %w", runID, agent.ErrNotFound)
	}
	return r, nil
}

func (s *Store) ListRuns(ctx context.Context, sc agent.Scope, f agent.RunFilter) ([]agent.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	var out []agent.Run
	for _, r := range s.runs {
		if !sc.Sees(r.TenantID) {
			continue
		}
		if len(f.Status) > 0 && !slices.Contains(f.Status, r.Status) {
			continue
		}
		if f.Serial != "" && r.Serial != f.Serial {
			continue
		}
		if f.After != nil && !runKeyBefore(*f.After, r.Key()) {
			continue
		}
		out = append(out, r)
	}
	// Newest first, as the stores (RunKey order).
	sort.Slice(out, func(i, j int) bool { return runKeyBefore(out[i].Key(), out[j].Key()) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// CommitStep applies s atomically (see agent.Step).
func (s *Store) CommitStep(ctx context.Context, st agent.Step) error {
	if s.BeforeCommit != nil {
		s.BeforeCommit(st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	if s.CommitErr != nil {
		if err := s.CommitErr(st); err != nil {
			return err
		}
	}
	r, err := s.checkStep(st)
	if err != nil {
		return err
	}
	s.applyStep(st, r)
	return nil
}

// checkStep checks st against its run (returned) and what the store
// holds: the CAS, the events, the control requests, the artifacts and the
// snapshot's step. Called with s.mu held.
func (s *Store) checkStep(st agent.Step) (agent.Run, error) {
	r, ok := s.runs[st.RunID]
	if !ok {
		return r, fmt.Errorf("run %s: %w", st.RunID, agent.ErrNotFound)
	}
	if st.StatusTo != "" && !slices.Contains(st.StatusFrom, r.Status) {
		return r, fmt.Errorf("run %s is %s, want one of %v: %w", st.RunID, r.Status, st.StatusFrom, agent.ErrStatusConflict)
	}
	if err := s.checkEvents(st, r); err != nil {
		return r, err
	}
	if err := s.checkControl(st); err != nil {
		return r, err
	}
	for _, a := range st.Artifacts {
		if err := agent.CheckArtifact(st.RunID, a); err != nil {
			return r, err
		}
	}
	if st.Snapshot != nil {
		// As the stores: a run's snapshots are committed in step order, so
		// an ordinal at or below the latest's is taken (snapshots.ErrSnapshotTaken).
		for k := range s.snapshots[st.RunID] {
			if st.Snapshot.StepOrdinal <= k {
				return r, fmt.Errorf("run %s snapshot step %d: step %d exists", st.RunID, st.Snapshot.StepOrdinal, k)
			}
		}
	}
	return r, nil
}

// applyStep writes st (checked by checkStep) of run r. Called with s.mu
// held.
func (s *Store) applyStep(st agent.Step, r agent.Run) {
	for _, a := range st.Artifacts {
		a.RunID, a.TenantID = st.RunID, r.TenantID
		s.artifacts = append(s.artifacts, a)
	}
	for _, e := range st.Events {
		s.events[st.RunID] = append(s.events[st.RunID], e)
		body, _ := json.Marshal(e)
		// The subject of the stores (snapshots.Subject): tenant and run ids
		// are single subject tokens already (checked at CreateRun upstream).
		s.outbox = append(s.outbox, agent.OutboxRow{RunID: e.RunID, Sequence: e.Sequence, EventID: e.EventID, Subject: "agent.events." + e.TenantID + "." + e.RunID, Body: body})
	}
	sort.Slice(s.events[st.RunID], func(i, j int) bool { return s.events[st.RunID][i].Sequence < s.events[st.RunID][j].Sequence })
	if st.Snapshot != nil {
		if s.snapshots[st.RunID] == nil {
			s.snapshots[st.RunID] = map[int]agent.Snapshot{}
		}
		sn := *st.Snapshot
		sn.RunID = st.RunID
		if sn.CreatedAt.IsZero() {
			sn.CreatedAt = now()
		}
		s.snapshots[st.RunID][st.Snapshot.StepOrdinal] = sn
	}
	if st.PolicyVersion > 0 {
		r.PolicyVersion = st.PolicyVersion
		s.runs[st.RunID] = r
	}
	if st.StatusTo != "" {
		r.Status = st.StatusTo
		r.UpdatedAt = now()
		s.runs[st.RunID] = r
	}
	s.control[st.RunID] = slices.DeleteFunc(s.control[st.RunID], func(c agent.Control) bool { return slices.Contains(st.Controls, c.ID) })
	s.commits++
}

func (s *Store) LastSequence(ctx context.Context, runID string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	ev := s.events[runID]
	if len(ev) == 0 {
		return 0, nil
	}
	return ev[len(ev)-1].Sequence, nil
}

func (s *Store) Events(ctx context.Context, sc agent.Scope, runID string, after int64) ([]agent.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := sc.Valid(); err != nil {
		return nil, err
	}
	if !s.sees(sc, runID) {
		return nil, nil
	}
	var out []agent.Event
	for _, e := range s.events[runID] {
		if e.Sequence > after {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *Store) Snapshot(ctx context.Context, sc agent.Scope, runID string, stepOrdinal int) (agent.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return agent.Snapshot{}, err
	}
	if err := sc.Valid(); err != nil {
		return agent.Snapshot{}, err
	}
	sn, ok := s.snapshots[runID][stepOrdinal]
	if !ok || !s.sees(sc, runID) {
		return agent.Snapshot{}, fmt.Errorf("run %s snapshot %d: %w", runID, stepOrdinal, agent.ErrNotFound)
	}
	return sn, nil
}

func (s *Store) LatestSnapshot(ctx context.Context, sc agent.Scope, runID string) (agent.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return agent.Snapshot{}, err
	}
	if err := sc.Valid(); err != nil {
		return agent.Snapshot{}, err
	}
	if !s.sees(sc, runID) {
		return agent.Snapshot{}, fmt.Errorf("run %s snapshot: %w", runID, agent.ErrNotFound)
	}
	best := -1
	for k := range s.snapshots[runID] {
		best = max(best, k)
	}
	if best < 0 {
		return agent.Snapshot{}, fmt.Errorf("run %s snapshot: %w", runID, agent.ErrNotFound)
	}
	return s.snapshots[runID][best], nil
}

func (s *Store) SetStatus(ctx context.Context, runID string, from []agent.RunStatus, to agent.RunStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	r, ok := s.runs[runID]
	if !ok {
		return fmt.Errorf("run %s: %w", runID, agent.ErrNotFound)
	}
	if !slices.Contains(from, r.Status) {
		return fmt.Errorf("run %s is %s, want one of %v: %w", runID, r.Status, from, agent.ErrStatusConflict)
	}
	r.Status = to
	r.UpdatedAt = now()
	s.runs[runID] = r
	return nil
}

// RequestControl records c with a fresh ULID (see agent.Store): refused with
// agent.ErrRunTerminal for an ended run; a cancel moves the status to
// CANCELED_REQUESTED.
func (s *Store) RequestControl(ctx context.Context, c agent.Control) (agent.Control, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return c, err
	}
	r, ok := s.runs[c.RunID]
	if !ok {
		return c, fmt.Errorf("run %s: %w", c.RunID, agent.ErrNotFound)
	}
	if r.Status.Terminal() {
		return c, fmt.Errorf("run %s is %s: %w", c.RunID, r.Status, agent.ErrRunTerminal)
	}
	if !slices.Contains(controlKinds, c.Kind) {
		return c, fmt.Errorf("control kind %q: want one of %v", c.Kind, controlKinds)
	}
	if c.ID != "" {
		return c, fmt.Errorf("control request id %q: ids are assigned by the store", c.ID)
	}
	if n := len(s.control[c.RunID]); n >= agent.MaxPendingControl {
		return c, fmt.Errorf("run %s has %d pending control requests: %w", c.RunID, n, agent.ErrControlBacklog)
	}
	c.ID = ulid.Make().String()
	if c.RequestedAt.IsZero() {
		c.RequestedAt = now()
	}
	s.control[c.RunID] = append(s.control[c.RunID], c)
	if c.Kind == agent.KindCancelRequested {
		r.Status = agent.RunCancelRequested
		s.runs[c.RunID] = r
	}
	return c, nil
}

// PendingControl returns the run's requests no commit has taken.
func (s *Store) PendingControl(ctx context.Context, runID string) ([]agent.Control, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return slices.Clone(s.control[runID]), nil
}

// controlKinds are the control requests the stores accept (RequestControl).
var controlKinds = []string{agent.KindCancelRequested, agent.KindPauseRequested, agent.KindResumeRequested, agent.KindPolicySwitchRequested}

// now is the stores' reading of the clock: UTC, microseconds.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// checkEvents is CommitStep's check of the step's events against the run
// r: each of r's run and tenant, sealed, and their sequences the next ones
// after the run's last, without a gap (the stores' ErrSequenceGap) or a
// repeat (agent.ErrSequenceTaken). The caller holds s.mu.
func (s *Store) checkEvents(st agent.Step, r agent.Run) error {
	last := int64(0)
	if ev := s.events[st.RunID]; len(ev) > 0 {
		last = ev[len(ev)-1].Sequence
	}
	for i, e := range st.Events {
		if e.RunID != st.RunID || e.TenantID != r.TenantID {
			return fmt.Errorf("event %s of run %s tenant %q in a step of run %s tenant %q", e.EventID, e.RunID, e.TenantID, st.RunID, r.TenantID)
		}
		if err := agent.VerifyChecksum(e); err != nil {
			return fmt.Errorf("event %s: %w", e.EventID, err)
		}
		if i == 0 && e.Sequence <= last {
			return fmt.Errorf("run %s sequence %d (last is %d): %w", st.RunID, e.Sequence, last, agent.ErrSequenceTaken)
		}
		if want := last + 1 + int64(i); e.Sequence != want {
			return fmt.Errorf("run %s sequence %d, want %d: not contiguous", st.RunID, e.Sequence, want)
		}
	}
	return nil
}

// checkControl is CommitStep's check of Controls and NoOtherControl.
func (s *Store) checkControl(st agent.Step) error {
	pending := s.control[st.RunID]
	for i, id := range st.Controls {
		if !slices.ContainsFunc(pending, func(c agent.Control) bool { return c.ID == id }) || slices.Contains(st.Controls[:i], id) {
			return fmt.Errorf("run %s: control request %s not pending: %w", st.RunID, id, agent.ErrControlTaken)
		}
	}
	if st.NoOtherControl && len(pending) > len(st.Controls) {
		return fmt.Errorf("run %s: %d control requests pending: %w", st.RunID, len(pending)-len(st.Controls), agent.ErrControlPending)
	}
	return nil
}

func (s *Store) Unpublished(ctx context.Context, limit int) ([]agent.OutboxRow, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []agent.OutboxRow
	for _, o := range s.outbox {
		if o.PublishedAt == nil {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].RunID != out[j].RunID {
			return out[i].RunID < out[j].RunID
		}
		return out[i].Sequence < out[j].Sequence
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (s *Store) MarkPublished(ctx context.Context, runID string, sequence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	for i := range s.outbox {
		if s.outbox[i].RunID == runID && s.outbox[i].Sequence == sequence {
			at := now()
			s.outbox[i].PublishedAt = &at
			return nil
		}
	}
	return fmt.Errorf("outbox %s/%d: %w", runID, sequence, agent.ErrNotFound)
}

func (s *Store) GetKV(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	v, ok := s.kv[key]
	if !ok {
		return nil, fmt.Errorf("kv %q: %w", key, agent.ErrNotFound)
	}
	return slices.Clone(v), nil
}

func (s *Store) PutKV(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	s.kv[key] = slices.Clone(value)
	return nil
}

func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// AllEvents returns every event of runID, in sequence order (test helper).
func (s *Store) AllEvents(runID string) []agent.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events[runID])
}

// Snapshots returns the run's snapshots by ascending stepOrdinal.
func (s *Store) Snapshots(runID string) []agent.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []agent.Snapshot
	for _, sn := range s.snapshots[runID] {
		out = append(out, sn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StepOrdinal < out[j].StepOrdinal })
	return out
}

// Commits is the number of successful CommitStep calls.
func (s *Store) Commits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

var _ agent.ArtifactIndex = (*Store)(nil)

// Artifacts implements agent.ArtifactIndex (rows in commit order).
func (s *Store) Artifacts(ctx context.Context, sc agent.Scope, runID string) ([]agent.Artifact, error) {
	if _, err := s.GetRun(ctx, sc, runID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []agent.Artifact
	for _, a := range s.artifacts {
		if a.RunID == runID {
			out = append(out, a)
		}
	}
	return out, nil
}

// Artifact implements agent.ArtifactIndex.
func (s *Store) Artifact(ctx context.Context, sc agent.Scope, runID, artifactID string) (agent.Artifact, error) {
	all, err := s.Artifacts(ctx, sc, runID)
	if err != nil {
		return agent.Artifact{}, err
	}
	for _, a := range all {
		if a.ArtifactID == artifactID {
			return a, nil
		}
	}
	return agent.Artifact{}, fmt.Errorf("run %s artifact %s: %w", runID, artifactID, agent.ErrNotFound)
}

// ArtifactBlobsInUse implements agent.ArtifactIndex.
func (s *Store) ArtifactBlobsInUse(ctx context.Context, sums []string) (map[string]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := map[string]bool{}
	for _, a := range s.artifacts {
		if slices.Contains(sums, a.SHA256) {
			used[a.SHA256] = true
		}
	}
	return used, nil
}

// runKeyBefore reports whether a comes before b in ListRuns' order (newer,
// or as new with a greater run id).
func runKeyBefore(a, b agent.RunKey) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.RunID > b.RunID
}
