package parse

import (
	"errors"
	"strings"
)

// Error ids of the device error taxonomy (DESIGN.md "Errors"). The nodes map them to
// agent error ids; nothing outside adb and adb/parse should parse adb messages again.
const (
	IDDeviceNotFound     = "device_not_found"
	IDDeviceOffline      = "device_offline"
	IDDeviceUnauthorized = "device_unauthorized"
	IDTimeout            = "timeout"
	IDCanceled           = "canceled"
	IDNetworkError       = "network_error"
	IDInstallFailed      = "install_failed"
	IDActivityNotFound   = "activity_not_found"
	IDProcessError       = "process_error"
	// IDResourceExhausted: this host is out of file descriptors (EMFILE,
	// ENFILE) when dialing the adb server: not the network, not the device.
	IDResourceExhausted = "resource_exhausted"
)

// Error is the one error type every call of this package returns (wrapped in nothing):
// an error id, an optional code (INSTALL_FAILED_… / DELETE_FAILED_… when the device
// printed one), whether retrying the same call can help, a human message and the
// underlying cause. Use errors.As(err, &*parse.Error) or IDOf. The
// adb transport returns the same type (adb.Error is an alias), so callers that
// only parse need not import the transport.
type Error struct {
	ID        string
	Code      string // INSTALL_FAILED_… or DELETE_FAILED_… when any
	Retryable bool
	Msg       string
	Err       error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("adb: ")
	b.WriteString(e.ID)
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil && (e.Msg == "" || !strings.Contains(e.Msg, e.Err.Error())) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// IDOf returns the error id of err, "" for nil, IDProcessError for an error that
// did not come from this package (unknown = not retryable).
func IDOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.ID
	}
	return IDProcessError
}

// IsRetryable reports the Retryable flag of an *Error; false for anything else.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
