package agent

import (
	"encoding/base64"
	"strings"
	"time"
)

// RunKey is a run's place in ListRuns' order: newest first by CreatedAt,
// then by RunID, both descending. It is unique (run ids are), so a page that
// ends at a key continues exactly after it: runs created meanwhile are newer
// and come before it, never inside a later page.
type RunKey struct {
	CreatedAt time.Time
	RunID     string
}

// Key is r's place in ListRuns' order.
func (r Run) Key() RunKey { return RunKey{CreatedAt: r.CreatedAt, RunID: r.RunID} }

// MaxRunCursorBytes bounds a cursor's text.
const MaxRunCursorBytes = 256

// Cursor is k as an opaque page cursor (GET /v1/runs?cursor=, runs list
// --cursor): base64url of "<createdAt RFC 3339, UTC, nanoseconds>_<runId>".
// It carries no tenant or filter: whose runs a page lists is always the
// caller's Scope.
func (k RunKey) Cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.CreatedAt.UTC().Format(time.RFC3339Nano) + "_" + k.RunID))
}

// ParseRunCursor reads a Cursor. A cursor that is not one (over
// MaxRunCursorBytes, not base64url, a bad time or run id) is an *Error
// invalid_request_error at where ("cursor", "--cursor").
func ParseRunCursor(where, s string) (RunKey, error) {
	bad := func() (RunKey, error) {
		return RunKey{}, Errorf(ErrInvalidRequest, "%s: not a cursor of a previous page (pass nextCursor as it was returned)", where)
	}
	if len(s) == 0 || len(s) > MaxRunCursorBytes {
		return bad()
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad()
	}
	ts, id, ok := strings.Cut(string(b), "_")
	if !ok || !validRunID(id) {
		return bad()
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return bad()
	}
	return RunKey{CreatedAt: t.UTC(), RunID: id}, nil
}

// validRunID: 1-128 of A-Z, a-z, 0-9, '_' and '-' (run ids are ULIDs).
func validRunID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
