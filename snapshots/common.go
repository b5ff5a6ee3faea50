package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
)

// Errors the stores return besides agent.ErrNotFound, agent.ErrStatusConflict
// and agent.ErrSequenceTaken. Each is wrapped with the run and value at fault.
var (
	// ErrRunExists: CreateRun with a run id already stored.
	ErrRunExists = errors.New("run already exists")
	// ErrSnapshotTaken: CommitStep with a snapshot for a step ordinal the run
	// already has; nothing of the step is written.
	ErrSnapshotTaken = errors.New("step already has a snapshot")
	// ErrSequenceGap: the step's first sequence is not the run's last + 1, or
	// its sequences are not contiguous; nothing is written.
	ErrSequenceGap = errors.New("event sequence not contiguous")
	// ErrInvalid: a malformed argument (not a ULID, empty kind, …).
	ErrInvalid = errors.New("invalid argument")
	// ErrReadOnly: a write on a store opened read-only.
	ErrReadOnly = errors.New("store opened read-only")
)

// StreamName and SubjectPrefix: every event is published on
// agent.events.<tenantId>.<runId> into one JetStream stream, AGENT_EVENTS
// (the outside contract in the README and DESIGN.md).
const (
	StreamName    = "AGENT_EVENTS"
	SubjectPrefix = "agent.events"
)

// Subject returns the NATS subject of an event: agent.events.<tenantId>.<runId>,
// e.g. agent.events.local.01JBD…. The kind is in the envelope, not the subject,
// so a subscriber of one run gets all its events in one ordered subject.
// Characters NATS reserves in a token (space, '*', '>', '.') in tenantId or
// runId are replaced by '_'. kind is accepted for the callers' convenience and
// not used.
func Subject(tenantID, runID, kind string) string {
	_ = kind
	return SubjectPrefix + "." + token(tenantID) + "." + token(runID)
}

// ControlSubjectPrefix: control requests arrive on
// agent.control.<tenantId>.<runId>.
const ControlSubjectPrefix = "agent.control"

// ControlSubject is agent.control.<tenantId>.<runId>.
func ControlSubject(tenantID, runID string) string {
	return ControlSubjectPrefix + "." + token(tenantID) + "." + token(runID)
}

// scopeCond is the SQL condition keeping rows whose run (column runCol)
// belongs to a tenant sc sees, with its arguments: "" for Admin(), an
// EXISTS on runs.tenant_id for a tenant (ph(n) writes the n-th placeholder
// of the dialect, counting from next). The zero Scope is an error wrapping
// agent.ErrNoScope.
func scopeCond(sc agent.Scope, runCol string, ph func(n int) string, next int) (string, []any, error) {
	if err := sc.Valid(); err != nil {
		return "", nil, err
	}
	if sc.IsAdmin() {
		return "", nil, nil
	}
	return ` AND EXISTS (SELECT 1 FROM runs sr WHERE sr.run_id = ` + runCol + ` AND sr.tenant_id = ` + ph(next) + `)`,
		[]any{sc.TenantID()}, nil
}

// leasePageQuery is LeasePage's query in a store's placeholders.
func leasePageQuery(sc agent.Scope, q agent.LeaseQuery, ph func(n int) string) (string, []any, error) {
	if err := q.Check(); err != nil {
		return "", nil, err
	}
	where, args := "true", []any{}
	add := func(cond string, v any) {
		args = append(args, v)
		where += " AND " + cond + " " + ph(len(args))
	}
	if q.Device != "" {
		add("device =", q.Device)
	}
	if q.RunID != "" {
		add("run_id =", q.RunID)
	}
	if q.Before > 0 {
		add("fencing_token <", q.Before)
	}
	cond, sargs, err := scopeCond(sc, "device_leases.run_id", ph, len(args)+1)
	if err != nil {
		return "", nil, err
	}
	args = append(args, sargs...)
	args = append(args, q.Limit)
	return `SELECT ` + leaseCols + ` FROM device_leases WHERE ` + where + cond + ` ORDER BY fencing_token DESC LIMIT ` + ph(len(args)), args, nil
}

// sqlitePH and pgPH write placeholders: "?" and "$n".
func sqlitePH(int) string { return "?" }
func pgPH(n int) string   { return fmt.Sprintf("$%d", n) }

// runNotSeen is the answer to a read of a run the scope does not see: the
// same as for an unknown run, so another tenant's run is not disclosed.
func runNotSeen(runID string) error { return fmt.Errorf("run %s: %w", runID, agent.ErrNotFound) }

func token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, s)
}

// Notifier is implemented by stores that signal their commits: the channel
// receives (without blocking the writer, coalesced) after every CommitStep
// that wrote events, so the relay drains at once instead of waiting for its
// poll interval. One consumer per store.
type Notifier interface {
	Commits() <-chan struct{}
}

// StepEventer is implemented by stores that know which events were committed
// with which snapshot (run_events.step_ordinal): Replay uses it.
type StepEventer interface {
	StepEvents(ctx context.Context, runID string, stepOrdinal int) ([]agent.Event, error)
}

// UpToMarker is implemented by stores that mark a run's outbox prefix in one
// statement: every unpublished row of the run with sequence <= upTo. The
// relay uses it to mark acked rows in groups instead of one write each.
type UpToMarker interface {
	MarkPublishedUpTo(ctx context.Context, runID string, upTo int64) (int, error)
}

// OutboxCursor is implemented by stores whose outbox has a single relay and
// whose row ids grow in commit order (the embedded store: one writer, ids
// from AUTOINCREMENT). UnpublishedAfter returns up to limit unpublished rows
// with an outbox id above after, in id order (each run's in sequence order),
// and the id of the last one returned (after itself when none).
type OutboxCursor interface {
	UnpublishedAfter(ctx context.Context, after int64, limit int) (rows []agent.OutboxRow, last int64, err error)
}

// MultiUpToMarker is implemented by stores that mark several runs' outbox
// prefixes in one transaction: for each entry of upTo (run id -> sequence),
// what MarkPublishedUpTo does. The relay marks a whole pipelined window with
// one write instead of one per run. It returns how many rows it marked; on
// an error nothing is marked.
type MultiUpToMarker interface {
	MarkPublishedUpToMany(ctx context.Context, upTo map[string]int64) (int, error)
}

// Requeuer is implemented by stores that can enqueue published events again
// (operator recovery after a stream was lost; tests of deduplication). It
// clears published_at of the run's outbox rows with sequence >= from and
// returns how many rows it reset.
type Requeuer interface {
	Requeue(ctx context.Context, runID string, fromSequence int64) (int, error)
}

// timeLayout is how the embedded store writes times: fixed width, so text
// order is time order; microseconds, Postgres' precision.
const timeLayout = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) string { return t.UTC().Truncate(time.Microsecond).Format(timeLayout) }

func parseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

func storeTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func checkULID(what, id string) error {
	if _, err := ulid.ParseStrict(id); err != nil {
		return fmt.Errorf("%w: %s %q is not a 26-char ULID: %v", ErrInvalid, what, id, err)
	}
	return nil
}

// controlKinds are the incoming control events RequestControl accepts.
var controlKinds = []string{
	agent.KindCancelRequested, agent.KindPauseRequested,
	agent.KindResumeRequested, agent.KindPolicySwitchRequested,
}

// maxControlsPerStep bounds Step.Controls (one IN list): far more requests
// than one boundary ever sees, well below SQLite's 32766 parameters.
const maxControlsPerStep = 1000

// newControl checks c and assigns its id and default request time.
func newControl(c agent.Control, clock agent.Clock) (agent.Control, error) {
	if !slices.Contains(controlKinds, c.Kind) {
		return c, fmt.Errorf("%w: control kind %q (want one of %s)", ErrInvalid, c.Kind, strings.Join(controlKinds, ", "))
	}
	if c.RunID == "" {
		return c, fmt.Errorf("%w: control request without run id", ErrInvalid)
	}
	if c.ID != "" {
		return c, fmt.Errorf("%w: control request id %q is assigned by the store", ErrInvalid, c.ID)
	}
	// ulid.Make is monotonic within the process, so ids sort in request order.
	c.ID = ulid.Make().String()
	if c.RequestedAt.IsZero() {
		c.RequestedAt = clock.Now()
	}
	c.RequestedAt = storeTime(c.RequestedAt)
	return c, nil
}

// checkControlStatus refuses a request for a run that already ended or has
// agent.MaxPendingControl pending requests.
func checkControlStatus(c agent.Control, status agent.RunStatus, pending int) error {
	if status.Terminal() {
		return fmt.Errorf("run %s is %s: %w", c.RunID, status, agent.ErrRunTerminal)
	}
	if pending >= agent.MaxPendingControl {
		return fmt.Errorf("run %s has %d pending control requests: %w", c.RunID, pending, agent.ErrControlBacklog)
	}
	return nil
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// preparedEvent is an event ready to insert: envelope bytes and subject.
type preparedEvent struct {
	agent.Event
	envelope []byte
	payload  string
	subject  string
}

// prepareStep validates a Step independently of the database: ULIDs, one
// run, contiguous sequences, checksums (agent.VerifyChecksum), a CAS with its
// from-set. It does not know the
// run's tenant yet; checkTenant does, inside the transaction.
func prepareStep(s agent.Step) ([]preparedEvent, error) {
	if s.RunID == "" {
		return nil, fmt.Errorf("%w: step without run id", ErrInvalid)
	}
	if len(s.Controls) > maxControlsPerStep {
		return nil, fmt.Errorf("%w: %d control requests in one step (at most %d)", ErrInvalid, len(s.Controls), maxControlsPerStep)
	}
	if slices.ContainsFunc(s.Controls, func(id string) bool { return checkULID("control request id", id) != nil }) {
		return nil, fmt.Errorf("%w: a control request id in the step is not a ULID", ErrInvalid)
	}
	if s.StatusTo != "" && len(s.StatusFrom) == 0 {
		return nil, fmt.Errorf("%w: status compare-and-set to %s without StatusFrom", ErrInvalid, s.StatusTo)
	}
	if s.Snapshot != nil {
		if s.Snapshot.RunID != "" && s.Snapshot.RunID != s.RunID {
			return nil, fmt.Errorf("%w: snapshot of run %s in a step of run %s", ErrInvalid, s.Snapshot.RunID, s.RunID)
		}
		if s.Snapshot.StepOrdinal < 0 || s.Snapshot.NodeName == "" {
			return nil, fmt.Errorf("%w: snapshot needs stepOrdinal >= 0 and nodeName", ErrInvalid)
		}
	}
	if err := checkStepArtifacts(s); err != nil {
		return nil, err
	}
	out := make([]preparedEvent, 0, len(s.Events))
	for i, e := range s.Events {
		if e.RunID != s.RunID {
			return nil, fmt.Errorf("%w: event %s of run %q in a step of run %s", ErrInvalid, e.EventID, e.RunID, s.RunID)
		}
		if err := checkULID("eventId", e.EventID); err != nil {
			return nil, err
		}
		if e.Kind == "" || e.TS == "" || e.Checksum == "" {
			return nil, fmt.Errorf("%w: event %s needs kind, ts and checksum", ErrInvalid, e.EventID)
		}
		if err := agent.VerifyChecksum(e); err != nil {
			return nil, fmt.Errorf("%w: event %s: %v", ErrInvalid, e.EventID, err)
		}
		if e.Sequence < 1 {
			return nil, fmt.Errorf("%w: event %s sequence %d < 1", ErrInvalid, e.EventID, e.Sequence)
		}
		if i > 0 && e.Sequence != s.Events[i-1].Sequence+1 {
			return nil, fmt.Errorf("run %s: sequence %d after %d: %w", s.RunID, e.Sequence, s.Events[i-1].Sequence, ErrSequenceGap)
		}
		env, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: %v", ErrInvalid, e.EventID, err)
		}
		payload := "null"
		if len(e.Payload) > 0 {
			payload = string(e.Payload)
		}
		out = append(out, preparedEvent{Event: e, envelope: env, payload: payload, subject: Subject(e.TenantID, e.RunID, e.Kind)})
	}
	return out, nil
}

// checkStepAgainstRun checks, inside the transaction, what needs the run's
// row and last sequence: tenant of every event, the CAS, the next sequence.
func checkStepAgainstRun(s agent.Step, evs []preparedEvent, tenant string, status agent.RunStatus, last int64) error {
	for _, e := range evs {
		if e.TenantID != tenant {
			return fmt.Errorf("%w: event %s tenant %q, run %s belongs to %q", ErrInvalid, e.EventID, e.TenantID, s.RunID, tenant)
		}
	}
	for _, a := range s.Artifacts {
		if a.TenantID != "" && a.TenantID != tenant {
			return fmt.Errorf("%w: artifact %s of tenant %q, run %s belongs to %q", agent.ErrInvalidArtifact, a.ArtifactID, a.TenantID, s.RunID, tenant)
		}
	}
	if s.StatusTo != "" && !slices.Contains(s.StatusFrom, status) {
		return fmt.Errorf("run %s is %s, not one of %v: %w", s.RunID, status, s.StatusFrom, agent.ErrStatusConflict)
	}
	if len(evs) > 0 {
		first := evs[0].Sequence
		if first <= last {
			return fmt.Errorf("run %s sequence %d (last is %d): %w", s.RunID, first, last, agent.ErrSequenceTaken)
		}
		if first != last+1 {
			return fmt.Errorf("run %s first sequence %d after last %d: %w", s.RunID, first, last, ErrSequenceGap)
		}
	}
	return nil
}

func decodeEvent(envelope []byte) (agent.Event, error) {
	var e agent.Event
	if err := json.Unmarshal(envelope, &e); err != nil {
		return e, fmt.Errorf("snapshots: decode stored event envelope: %w", err)
	}
	return e, nil
}

func statusStrings(ss []agent.RunStatus) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
