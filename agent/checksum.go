package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gowebpki/jcs"
)

// TimestampLayout is the layout of Event.TS: ISO-8601 / RFC 3339 in UTC with
// exactly three fractional digits (milliseconds), e.g. "2025-10-23T12:00:00.000Z".
const TimestampLayout = "2006-01-02T15:04:05.000Z"

// FormatTS formats t as an event timestamp (TimestampLayout, converted to UTC).
func FormatTS(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// MaxSafeInteger is the largest integer an RFC 8785 payload carries exactly
// (2^53-1): JCS serializes every number as an IEEE-754 double, so larger
// integers in a payload would not survive canonicalization. Seeds and
// counters the engine writes into payloads stay within it.
const MaxSafeInteger = 1<<53 - 1

// CanonicalJSON returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text raw: object members sorted by their names' UTF-16 code units,
// no insignificant whitespace, strings with the minimal JSON escapes,
// numbers in ECMAScript Number-to-String form (so 1.0 -> 1, 1E30 -> 1e+30).
// It uses github.com/gowebpki/jcs (the Go port of the RFC authors' reference
// code). Errors: raw is not valid JSON, or an object repeats a member name
// (RFC 8785 requires I-JSON, RFC 7493).
func CanonicalJSON(raw []byte) ([]byte, error) {
	// jcs.Transform drops some syntax errors inside member names, so check
	// validity first rather than trust a partial result.
	if !json.Valid(raw) {
		return nil, errors.New("canonical json: payload is not valid JSON")
	}
	canonicalCalls.Add(1)
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return out, nil
}

// canonicalCalls counts RFC 8785 transforms (the tests check how many an
// event costs).
var canonicalCalls atomic.Int64

// ChecksumInput returns the exact bytes that Checksum hashes. This is the
// contract for independent verifiers:
//
//	eventId  0x7C  runId  0x7C  sequence  0x7C  kind  0x7C  JCS(payload)
//
// where 0x7C is the ASCII '|', eventId, runId and kind are their UTF-8 bytes
// as in the envelope (no quoting, no escaping), sequence is the base-10 ASCII
// form of the integer without sign or leading zeros ("42"), and JCS(payload)
// is the RFC 8785 canonical JSON of the envelope's payload (an absent payload
// is hashed as the four bytes "null"). There is no trailing separator or
// newline. Checksum is the lowercase hex SHA-256 (64 characters) of these bytes.
// Errors: the payload is not valid I-JSON.
func ChecksumInput(eventID, runID string, sequence int64, kind string, payload json.RawMessage) ([]byte, error) {
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	canon, err := CanonicalJSON(payload)
	if err != nil {
		return nil, err
	}
	return appendChecksumInput(nil, eventID, runID, sequence, kind, canon), nil
}

// appendChecksumInput appends ChecksumInput's bytes to b for a payload
// already in its RFC 8785 form (canon is not canonicalized again).
func appendChecksumInput(b []byte, eventID, runID string, sequence int64, kind string, canon []byte) []byte {
	if b == nil {
		b = make([]byte, 0, len(eventID)+len(runID)+len(kind)+len(canon)+24)
	}
	b = append(b, eventID...)
	b = append(b, '|')
	b = append(b, runID...)
	b = append(b, '|')
	b = strconv.AppendInt(b, sequence, 10)
	b = append(b, '|')
	b = append(b, kind...)
	b = append(b, '|')
	b = append(b, canon...)
	return b
}

// Checksum is hex(sha256(ChecksumInput(...))), lowercase, 64 characters.
func Checksum(eventID, runID string, sequence int64, kind string, payload json.RawMessage) (string, error) {
	in, err := ChecksumInput(eventID, runID, sequence, kind, payload)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:]), nil
}

// ErrChecksumMismatch is returned by VerifyChecksum.
var ErrChecksumMismatch = errors.New("event checksum mismatch")

// Seal sets e.Checksum from e's eventId, runId, sequence, kind and payload.
// The orchestrator calls it after it assigns the sequence.
func (e *Event) Seal() error {
	sum, err := Checksum(e.EventID, e.RunID, e.Sequence, e.Kind, e.Payload)
	if err != nil {
		return err
	}
	e.Checksum = sum
	return nil
}

// VerifyChecksum recomputes e's checksum; it returns an error wrapping
// ErrChecksumMismatch when it differs from e.Checksum.
//
// An event NewEvent sealed in this process is verified without
// canonicalizing its payload again (the RFC 8785 transform is most of a
// checksum's cost, and the store verifies every event the engine sealed):
// NewEvent remembers the checksums it made over canonical payloads (the last
// sealedMemo of them); when e.Checksum is one of them and SHA-256 of
// ChecksumInput taken over e's payload bytes as they are equals e.Checksum,
// those bytes are the canonical ones NewEvent hashed (SHA-256 collision
// resistance), so the full recomputation would agree. Any other event
// (another process's, a payload re-encoded or changed) takes the full path.
func VerifyChecksum(e Event) error {
	if len(e.Payload) > 0 && sealed.has(e.Checksum) {
		sum := sha256.Sum256(appendChecksumInput(nil, e.EventID, e.RunID, e.Sequence, e.Kind, e.Payload))
		if hex.EncodeToString(sum[:]) == e.Checksum {
			return nil
		}
	}
	sum, err := Checksum(e.EventID, e.RunID, e.Sequence, e.Kind, e.Payload)
	if err != nil {
		return err
	}
	if sum != e.Checksum {
		return fmt.Errorf("%w: run %s sequence %d: have %s, computed %s", ErrChecksumMismatch, e.RunID, e.Sequence, e.Checksum, sum)
	}
	return nil
}

// NewEvent builds a sealed event of run with the given sequence and kind:
// a fresh eventId from ids, ts = clock.Now() (TimestampLayout), version
// EventVersion, the run's tenantId/projectId (projectId redacted), and payload marshaled with
// encoding/json and stored in its RFC 8785 canonical form (so the stored bytes
// are the hashed bytes). Secrets are redacted first (RedactJSON: URL
// credentials, signed-URL query parameters, secret-named keys), so no event
// stored, published or printed carries them. A nil payload is stored as {}.
// Errors: the payload does not marshal, or is not I-JSON.
func NewEvent(run Run, sequence int64, kind string, payload any, clock Clock, ids IDGenerator) (Event, error) {
	var raw []byte
	switch p := payload.(type) {
	case nil:
		raw = []byte("{}")
	case json.RawMessage:
		raw = RedactJSON(p)
	default:
		var err error
		if raw, err = json.Marshal(payload); err != nil {
			return Event{}, fmt.Errorf("event %s payload: %w", kind, err)
		}
		raw, _ = redactValidJSON(raw) // json.Marshal's output is valid JSON
	}
	canon, err := CanonicalJSON(raw)
	if err != nil {
		return Event{}, fmt.Errorf("event %s payload: %w", kind, err)
	}
	e := Event{
		EventID:   ids.NewID(),
		RunID:     run.RunID,
		TenantID:  run.TenantID,
		ProjectID: RedactString(run.ProjectID), // free text; the run's row holds it redacted already
		Sequence:  sequence,
		TS:        FormatTS(clock.Now()),
		Kind:      kind,
		Version:   EventVersion,
		Payload:   canon,
	}
	// canon is canonical already: hash it as it is (Seal would transform it
	// again) and remember the checksum for VerifyChecksum.
	sum := sha256.Sum256(appendChecksumInput(nil, e.EventID, e.RunID, e.Sequence, e.Kind, canon))
	e.Checksum = hex.EncodeToString(sum[:])
	sealed.add(e.Checksum)
	return e, nil
}

// sealedMemo bounds how many of NewEvent's checksums VerifyChecksum's fast
// path remembers (about 100 bytes each): far more than the events of the
// steps in flight, which the store verifies right after they are sealed.
const sealedMemo = 8192

// sealed is the set of the last sealedMemo checksums NewEvent made, oldest
// evicted first.
var sealed = &checksumMemo{set: make(map[string]struct{}, sealedMemo)}

type checksumMemo struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring [sealedMemo]string
	next int
}

func (m *checksumMemo) add(sum string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.set[sum]; ok {
		return
	}
	if old := m.ring[m.next]; old != "" {
		delete(m.set, old)
	}
	m.ring[m.next] = sum
	m.set[sum] = struct{}{}
	m.next = (m.next + 1) % sealedMemo
}

func (m *checksumMemo) has(sum string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.set[sum]
	return ok
}

// IDGenerator makes the ULID strings of eventIds and resumeTokens.
type IDGenerator interface {
	NewID() string
}

// ULIDs makes ULIDs (github.com/ulid/spec: 48-bit Unix milliseconds then 80
// random bits, as 26 characters of Crockford base32) whose time part is the
// Clock's time. Within one millisecond the random part is incremented, so ids
// made in the same millisecond still sort in creation order (the spec's
// monotonic mode). Written here rather than taken from oklog/ulid because that
// module imports database/sql/driver, and nodes/, which imports agent, must
// not depend on database packages. Safe for concurrent use.
type ULIDs struct {
	mu      sync.Mutex
	clock   Clock
	entropy io.Reader
	lastMS  uint64
	last    [10]byte
}

// NewULIDs returns a generator reading time from clock and randomness from
// entropy (crypto/rand when nil; tests pass a seeded reader for repeatable ids).
func NewULIDs(clock Clock, entropy io.Reader) *ULIDs {
	if entropy == nil {
		entropy = rand.Reader
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &ULIDs{clock: clock, entropy: entropy}
}

// NewID returns the next ULID. When the clock stands still or moves back,
// the previous millisecond is reused and its random part incremented, so ids
// stay strictly increasing; when that 80-bit increment overflows it moves to
// the next millisecond. It panics only when the entropy reader fails.
func (g *ULIDs) NewID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := uint64(g.clock.Now().UnixMilli())
	if g.lastMS != 0 && ms <= g.lastMS {
		ms = g.lastMS
		if increment(&g.last) {
			return encodeULID(ms, g.last)
		}
		ms++ // overflow of the random part: next millisecond, fresh randomness
	}
	if _, err := io.ReadFull(g.entropy, g.last[:]); err != nil {
		// Only a broken entropy reader gets here (crypto/rand does not fail).
		panic(fmt.Sprintf("agent: ulid entropy: %v", err))
	}
	g.lastMS = ms
	return encodeULID(ms, g.last)
}

// increment adds one to the big-endian 80-bit number; false on overflow.
func increment(b *[10]byte) bool {
	for i := len(b) - 1; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			return true
		}
	}
	return false
}

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// encodeULID writes the 128-bit value ms<<80 | random as 26 base32 digits.
func encodeULID(ms uint64, random [10]byte) string {
	hi := ms<<16 | uint64(random[0])<<8 | uint64(random[1])
	lo := binary.BigEndian.Uint64(random[2:])
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
