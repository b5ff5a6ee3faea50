package agent

import (
	"context"
	"errors"
	"fmt"
)

// ErrorID is a node error id: the standard error types of node-output-schema.md
// extended with the device ones of DESIGN.md.
type ErrorID string

const (
	ErrTimeout             ErrorID = "timeout"
	ErrInterrupted         ErrorID = "interrupted"
	ErrInvalidRequest      ErrorID = "invalid_request_error"
	ErrPermission          ErrorID = "permission_error"
	ErrNetwork             ErrorID = "network_error"
	ErrProcess             ErrorID = "process_error"
	ErrInternal            ErrorID = "internal_error"
	ErrNodeStopped         ErrorID = "node_stopped"
	ErrDeviceNotFound      ErrorID = "device_not_found"
	ErrDeviceOffline       ErrorID = "device_offline"
	ErrDeviceUnauthorized  ErrorID = "device_unauthorized"
	ErrBootTimeout         ErrorID = "boot_timeout"
	ErrAppiumUnreachable   ErrorID = "appium_unreachable"
	ErrSessionCreateFailed ErrorID = "session_create_failed"
	ErrArtifactUnavailable ErrorID = "artifact_unavailable"
	ErrSignatureMismatch   ErrorID = "signature_mismatch"
	ErrInstallFailed       ErrorID = "install_failed"
	ErrVersionDowngrade    ErrorID = "version_downgrade"
	ErrActivityNotFound    ErrorID = "activity_not_found"
	ErrLaunchTimeout       ErrorID = "launch_timeout"
	ErrIdleTimeout         ErrorID = "idle_timeout"
	ErrCanceled            ErrorID = "canceled"
	// ErrAppCrashed: the app's process died after its launch (an uncaught
	// exception in the crash buffer, a data_app_crash dropbox entry, its
	// crash dialog, or its pid gone). Retryable by default: a crash at launch
	// is retried with a fresh process (policy maxAttemptsByError bounds it to
	// one retry); a crash during WaitIdle is not retryable.
	ErrAppCrashed ErrorID = "app_crashed"
	// ErrAppNotResponding: the app's "isn't responding" (ANR) dialog showed.
	ErrAppNotResponding ErrorID = "app_not_responding"
	// ErrStoreUnavailable: the run store (the fleet's Postgres) cannot be
	// reached (IsStoreUnavailable); HTTP 503. Retryable.
	ErrStoreUnavailable ErrorID = "store_unavailable"
	// ErrResourceExhausted: the daemon's host ran out of a resource it
	// needs, not the device or the network failing: file descriptors
	// (EMFILE/ENFILE: "too many open files"), or disk space for the store
	// (SQLite SQLITE_FULL, Postgres disk_full). Retryable after a back-off:
	// exhaustion passes when the load or the files go. The HTTP API answers
	// it 503 with Retry-After.
	ErrResourceExhausted ErrorID = "resource_exhausted"
)

// ErrorIDs lists every ErrorID above, for validation (policy retryOn lists).
var ErrorIDs = []ErrorID{
	ErrTimeout, ErrInterrupted, ErrInvalidRequest, ErrPermission, ErrNetwork, ErrProcess, ErrInternal,
	ErrNodeStopped, ErrDeviceNotFound, ErrDeviceOffline, ErrDeviceUnauthorized, ErrBootTimeout,
	ErrAppiumUnreachable, ErrSessionCreateFailed, ErrArtifactUnavailable, ErrSignatureMismatch,
	ErrInstallFailed, ErrVersionDowngrade, ErrActivityNotFound, ErrLaunchTimeout, ErrIdleTimeout, ErrCanceled,
	ErrAppCrashed, ErrAppNotResponding, ErrStoreUnavailable, ErrResourceExhausted,
}

// retryableByDefault lists the ids that are worth another attempt unless the
// policy says otherwise. Unknown ids are not retryable.
var retryableByDefault = map[ErrorID]bool{
	ErrTimeout: true, ErrNetwork: true, ErrDeviceOffline: true, ErrAppiumUnreachable: true,
	ErrSessionCreateFailed: true, ErrArtifactUnavailable: true, ErrLaunchTimeout: true,
	ErrBootTimeout: false, ErrIdleTimeout: false,
	ErrAppCrashed: true, ErrAppNotResponding: false,
	ErrStoreUnavailable: true, ErrResourceExhausted: true,
}

// DefaultRetryable reports whether id is retryable by default.
func DefaultRetryable(id ErrorID) bool { return retryableByDefault[id] }

// Error is a classified failure. Adapters return it at their boundary so
// nodes and the orchestrator never look at raw adb or WebDriver errors.
type Error struct {
	ID ErrorID
	// Code refines ID: the INSTALL_FAILED_* code of install_failed, the
	// WebDriver error of session_create_failed, …
	Code      string
	Retryable bool
	Msg       string
	Err       error
}

func (e *Error) Error() string {
	s := string(e.ID)
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with the id's default retryability.
func Errorf(id ErrorID, format string, args ...any) *Error {
	return &Error{ID: id, Retryable: DefaultRetryable(id), Msg: fmt.Sprintf(format, args...)}
}

// Wrap classifies err as id, keeping it as the cause.
func Wrap(id ErrorID, err error, format string, args ...any) *Error {
	return &Error{ID: id, Retryable: DefaultRetryable(id), Msg: fmt.Sprintf(format, args...), Err: err}
}

// Classify returns the *Error in err's chain; a context deadline becomes
// timeout, a cancellation interrupted, anything else internal_error (not retryable).
func Classify(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{ID: ErrTimeout, Retryable: true, Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{ID: ErrInterrupted, Err: err}
	}
	return &Error{ID: ErrInternal, Err: err}
}
