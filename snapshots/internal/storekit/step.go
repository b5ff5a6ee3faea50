package storekit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// ScopeCond is the SQL condition keeping rows whose run (column runCol)
// belongs to a tenant sc sees, with its arguments: "" for Admin(), an
// EXISTS on runs.tenant_id for a tenant (ph(n) writes the n-th placeholder
// of the dialect, counting from next). The zero Scope is an error wrapping
// agent.ErrNoScope.
func ScopeCond(sc agent.Scope, runCol string, ph func(n int) string, next int) (string, []any, error) {
	if err := sc.Valid(); err != nil {
		return "", nil, err
	}
	if sc.IsAdmin() {
		return "", nil, nil
	}
	return ` AND EXISTS (SELECT 1 FROM runs sr WHERE sr.run_id = ` + runCol + ` AND sr.tenant_id = ` + ph(next) + `)`,
		[]any{sc.TenantID()}, nil
}

// SQLitePH and PgPH write placeholders: "?" and "$n".
func SQLitePH(int) string { return "?" }
func PgPH(n int) string   { return fmt.Sprintf("$%d", n) }

// RunNotSeen is the answer to a read of a run the scope does not see: the
// same as for an unknown run, so another tenant's run is not disclosed.
func RunNotSeen(runID string) error { return fmt.Errorf("run %s: %w", runID, agent.ErrNotFound) }

// TimeLayout is how the embedded store writes times: fixed width, so text
// order is time order; microseconds, Postgres' precision.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

func FmtTime(t time.Time) string { return t.UTC().Truncate(time.Microsecond).Format(TimeLayout) }

func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

func StoreTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func CheckULID(what, id string) error {
	if _, err := ulid.ParseStrict(id); err != nil {
		return fmt.Errorf("%w: %s %q is not a 26-char ULID: %v", snapshots.ErrInvalid, what, id, err)
	}
	return nil
}

// ControlKinds are the incoming control events RequestControl accepts.
var ControlKinds = []string{
	agent.KindCancelRequested, agent.KindPauseRequested,
	agent.KindResumeRequested, agent.KindPolicySwitchRequested,
}

// MaxControlsPerStep bounds Step.Controls (one IN list): far more requests
// than one boundary ever sees, well below SQLite's 32766 parameters.
const MaxControlsPerStep = 1000

// NewControl checks c and assigns its id and default request time.
func NewControl(c agent.Control, clock agent.Clock) (agent.Control, error) {
	if !slices.Contains(ControlKinds, c.Kind) {
		return c, fmt.Errorf("%w: control kind %q (want one of %s)", snapshots.ErrInvalid, c.Kind, strings.Join(ControlKinds, ", "))
	}
	if c.RunID == "" {
		return c, fmt.Errorf("%w: control request without run id", snapshots.ErrInvalid)
	}
	if c.ID != "" {
		return c, fmt.Errorf("%w: control request id %q is assigned by the store", snapshots.ErrInvalid, c.ID)
	}
	// ulid.Make is monotonic within the process, so ids sort in request order.
	c.ID = ulid.Make().String()
	if c.RequestedAt.IsZero() {
		c.RequestedAt = clock.Now()
	}
	c.RequestedAt = StoreTime(c.RequestedAt)
	return c, nil
}

// CheckControlStatus refuses a request for a run that already ended or has
// agent.MaxPendingControl pending requests.
func CheckControlStatus(c agent.Control, status agent.RunStatus, pending int) error {
	if status.Terminal() {
		return fmt.Errorf("run %s is %s: %w", c.RunID, status, agent.ErrRunTerminal)
	}
	if pending >= agent.MaxPendingControl {
		return fmt.Errorf("run %s has %d pending control requests: %w", c.RunID, pending, agent.ErrControlBacklog)
	}
	return nil
}

func AnySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// PreparedEvent is an event ready to insert with its envelope bytes.
type PreparedEvent struct {
	agent.Event
	Envelope []byte // the event's JSON envelope, as published
}

// PrepareStep validates a Step independently of the database: ULIDs, one
// run, contiguous sequences, checksums (agent.VerifyChecksum), a CAS with its
// from-set. It does not know the
// run's tenant yet; checkTenant does, inside the transaction.
func PrepareStep(s agent.Step) ([]PreparedEvent, error) {
	if err := checkStepShape(s); err != nil {
		return nil, err
	}
	out := make([]PreparedEvent, 0, len(s.Events))
	for i, e := range s.Events {
		if err := checkStepEvent(s, i, e); err != nil {
			return nil, err
		}
		env, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: %v", snapshots.ErrInvalid, e.EventID, err)
		}
		out = append(out, PreparedEvent{Event: e, Envelope: env})
	}
	return out, nil
}

// checkStepShape checks what of s is not its events: the run id, the
// control request ids, the CAS's from-set, the snapshot and the artifacts.
func checkStepShape(s agent.Step) error {
	if s.RunID == "" {
		return fmt.Errorf("%w: step without run id", snapshots.ErrInvalid)
	}
	if len(s.Controls) > MaxControlsPerStep {
		return fmt.Errorf("%w: %d control requests in one step (at most %d)", snapshots.ErrInvalid, len(s.Controls), MaxControlsPerStep)
	}
	if slices.ContainsFunc(s.Controls, func(id string) bool { return CheckULID("control request id", id) != nil }) {
		return fmt.Errorf("%w: a control request id in the step is not a ULID", snapshots.ErrInvalid)
	}
	if s.StatusTo != "" && len(s.StatusFrom) == 0 {
		return fmt.Errorf("%w: status compare-and-set to %s without StatusFrom", snapshots.ErrInvalid, s.StatusTo)
	}
	if sn := s.Snapshot; sn != nil {
		if sn.RunID != "" && sn.RunID != s.RunID {
			return fmt.Errorf("%w: snapshot of run %s in a step of run %s", snapshots.ErrInvalid, sn.RunID, s.RunID)
		}
		if sn.StepOrdinal < 0 || sn.NodeName == "" {
			return fmt.Errorf("%w: snapshot needs stepOrdinal >= 0 and nodeName", snapshots.ErrInvalid)
		}
	}
	return CheckStepArtifacts(s)
}

// checkStepEvent checks s's event i (e): its run, id, fields, checksum and
// sequence (at least 1, following event i-1's).
func checkStepEvent(s agent.Step, i int, e agent.Event) error {
	if e.RunID != s.RunID {
		return fmt.Errorf("%w: event %s of run %q in a step of run %s", snapshots.ErrInvalid, e.EventID, e.RunID, s.RunID)
	}
	if err := CheckULID("eventId", e.EventID); err != nil {
		return err
	}
	if e.Kind == "" || e.TS == "" || e.Checksum == "" {
		return fmt.Errorf("%w: event %s needs kind, ts and checksum", snapshots.ErrInvalid, e.EventID)
	}
	if err := agent.VerifyChecksum(e); err != nil {
		return fmt.Errorf("%w: event %s: %v", snapshots.ErrInvalid, e.EventID, err)
	}
	if e.Sequence < 1 {
		return fmt.Errorf("%w: event %s sequence %d < 1", snapshots.ErrInvalid, e.EventID, e.Sequence)
	}
	if i > 0 && e.Sequence != s.Events[i-1].Sequence+1 {
		return fmt.Errorf("run %s: sequence %d after %d: %w", s.RunID, e.Sequence, s.Events[i-1].Sequence, snapshots.ErrSequenceGap)
	}
	return nil
}

// CheckStepAgainstRun checks, inside the transaction, what needs the run's
// row and last sequence: tenant of every event, the CAS, the next sequence.
func CheckStepAgainstRun(s agent.Step, evs []PreparedEvent, tenant string, status agent.RunStatus, last int64) error {
	for _, e := range evs {
		if e.TenantID != tenant {
			return fmt.Errorf("%w: event %s tenant %q, run %s belongs to %q", snapshots.ErrInvalid, e.EventID, e.TenantID, s.RunID, tenant)
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
			return fmt.Errorf("run %s first sequence %d after last %d: %w", s.RunID, first, last, snapshots.ErrSequenceGap)
		}
	}
	return nil
}

func DecodeEvent(envelope []byte) (agent.Event, error) {
	var e agent.Event
	if err := json.Unmarshal(envelope, &e); err != nil {
		return e, fmt.Errorf("snapshots: decode stored event envelope: %w", err)
	}
	return e, nil
}

func StatusStrings(ss []agent.RunStatus) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

func NormalizeRun(r agent.Run, clock agent.Clock) (agent.Run, error) {
	if err := CheckULID("runId", r.RunID); err != nil {
		return r, err
	}
	if !agent.ValidTenantID(r.TenantID) {
		// Checked here too, the last point before storage: a tenant id is one
		// NATS subject token as is, so "a.b", "*" and ">" never reach a row.
		return r, fmt.Errorf("%w: run %s tenantId %q: 1-64 of A-Z, a-z, 0-9, '_' and '-'", snapshots.ErrInvalid, r.RunID, r.TenantID)
	}
	if r.Status == "" {
		r.Status = agent.RunPending
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = clock.Now()
	}
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = r.CreatedAt
	}
	r.CreatedAt, r.UpdatedAt = StoreTime(r.CreatedAt), StoreTime(r.UpdatedAt)
	return r, nil
}

// RowScanner is a *sql.Row, or errRow when the statement could not be
// prepared.
type RowScanner interface{ Scan(...any) error }

// LeasePageQuery is LeasePage's query in a store's placeholders.
func LeasePageQuery(sc agent.Scope, q agent.LeaseQuery, ph func(n int) string) (string, []any, error) {
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
	cond, sargs, err := ScopeCond(sc, "device_leases.run_id", ph, len(args)+1)
	if err != nil {
		return "", nil, err
	}
	args = append(args, sargs...)
	args = append(args, q.Limit)
	return `SELECT ` + LeaseCols + ` FROM device_leases WHERE ` + where + cond + ` ORDER BY fencing_token DESC LIMIT ` + ph(len(args)), args, nil
}

// ScanEvent decodes a row holding one stored event envelope (column
// envelope), the rows of Events and StepEvents on both stores.
func ScanEvent(r RowScanner) (agent.Event, error) {
	var env []byte
	if err := r.Scan(&env); err != nil {
		return agent.Event{}, err
	}
	return DecodeEvent(env)
}

// OutboxCols are the columns ScanOutboxRow reads of an unpublished event
// (run_events e joined with its run r): the subject is derived from the
// run's tenant (snapshots.Subject), the body is the envelope.
const OutboxCols = `e.run_id, e.sequence, e.event_id, r.tenant_id, e.envelope`

// OutboxFrom is the FROM clause OutboxCols reads.
const OutboxFrom = ` FROM run_events e JOIN runs r ON r.run_id = e.run_id`

// ScanOutboxRow scans OutboxCols into an outbox row.
func ScanOutboxRow(r RowScanner) (agent.OutboxRow, error) {
	var (
		o      agent.OutboxRow
		tenant string
	)
	err := r.Scan(&o.RunID, &o.Sequence, &o.EventID, &tenant, &o.Body)
	o.Subject = snapshots.Subject(tenant, o.RunID, "")
	return o, err
}

// ScanString scans a row of one text column.
func ScanString(r RowScanner) (string, error) {
	var v string
	err := r.Scan(&v)
	return v, err
}

// OldestFirst sorts runs oldest first (CreatedAt, then RunID) and drops
// repeats of a run id, in place (agent.RunQueue's order).
func OldestFirst(runs []agent.Run) []agent.Run {
	slices.SortFunc(runs, func(a, b agent.Run) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	return slices.CompactFunc(runs, func(a, b agent.Run) bool { return a.RunID == b.RunID })
}

// SnapshotColumns are the columns a dialect's scan of a snapshot reads from
// SnapshotFrom (the Postgres store reads state as text).
const SnapshotColumns = `sn.run_id, sn.step_ordinal, sn.node_name, sn.resume_token, sn.state, sn.created_at`

// SnapshotFrom is the FROM clause of one run's snapshots, as sn: those on
// their steps' last event rows (migration 00014; node_name is set on those
// rows only) and those of steps committed without events
// (agent_state_snapshot). p1 and p2 are placeholders, each bound to the run
// id. The first half reads the run's rows through
// run_events_run_sequence_key: Snapshot, LatestSnapshot and StepEvents read
// a run's every event row (tens in a run), never on a step commit's path.
func SnapshotFrom(p1, p2 string) string {
	return ` FROM (SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM run_events WHERE run_id = ` + p1 + ` AND node_name IS NOT NULL
		UNION ALL SELECT run_id, step_ordinal, node_name, resume_token, state, created_at FROM agent_state_snapshot WHERE run_id = ` + p2 + `) sn`
}
