package snapshots

import (
	"errors"
	"strings"
)

// Errors the stores return besides agent.ErrNotFound, agent.ErrStatusConflict
// and agent.ErrSequenceTaken. Each is wrapped with the run and value at fault.
var (
	// ErrRunExists: CreateRun with a run id already stored.
	ErrRunExists = errors.New("run already exists")
	// ErrSnapshotTaken: CommitStep with a snapshot for a step ordinal the run
	// already has, or below its latest snapshot's (a run's snapshots are
	// committed in step order: migration 00014); nothing of the step is
	// written.
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
	return SubjectPrefix + "." + SubjectToken(tenantID) + "." + SubjectToken(runID)
}

// ControlSubjectPrefix: control requests arrive on
// agent.control.<tenantId>.<runId>.
const ControlSubjectPrefix = "agent.control"

// ControlSubject is agent.control.<tenantId>.<runId>.
func ControlSubject(tenantID, runID string) string {
	return ControlSubjectPrefix + "." + SubjectToken(tenantID) + "." + SubjectToken(runID)
}

// SubjectToken is s as one NATS subject token: "" becomes "_", and the
// characters NATS reserves in a token ('.', '*', '>', space and controls) become '_'.
func SubjectToken(s string) string {
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
