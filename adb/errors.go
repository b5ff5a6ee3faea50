package adb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

// Error is the one error type every call of this package returns (wrapped in
// nothing): it is parse.Error, shared with the parsers of adb/parse so that
// code which only parses device output need not import the transport.
type Error = parse.Error

// Error ids of the device error taxonomy (DESIGN.md "Errors"), as in adb/parse.
const (
	IDDeviceNotFound     = parse.IDDeviceNotFound
	IDDeviceOffline      = parse.IDDeviceOffline
	IDDeviceUnauthorized = parse.IDDeviceUnauthorized
	IDTimeout            = parse.IDTimeout
	IDCanceled           = parse.IDCanceled
	IDNetworkError       = parse.IDNetworkError
	IDInstallFailed      = parse.IDInstallFailed
	IDActivityNotFound   = parse.IDActivityNotFound
	IDProcessError       = parse.IDProcessError
	IDPermissionError    = parse.IDPermissionError
	IDResourceExhausted  = parse.IDResourceExhausted
)

// IDOf returns the error id of err, "" for nil, IDProcessError for an error that
// did not come from this package (unknown = not retryable). See parse.IDOf.
func IDOf(err error) string { return parse.IDOf(err) }

// IsRetryable reports the Retryable flag of an *Error; false for anything else.
func IsRetryable(err error) bool { return parse.IsRetryable(err) }

// serverFailure classifies the message of a host-protocol FAIL reply. The messages
// are those of adb's acquire_one_transport (transport.cpp, measured on adb 1.0.41):
// "device 'X' not found", "no devices/emulators found", "device offline",
// "device unauthorized.\n…", "device still authorizing", "device still connecting".
func serverFailure(op, msg string) *Error {
	m := strings.TrimSpace(msg)
	low := strings.ToLower(m)
	switch {
	case strings.HasPrefix(low, "device '") && strings.HasSuffix(low, "' not found"),
		strings.HasPrefix(low, "no devices"), strings.HasPrefix(low, "no emulators"),
		strings.HasPrefix(low, "no device with transport id"),
		strings.HasPrefix(low, "no such device"):
		return &Error{ID: IDDeviceNotFound, Retryable: true, Msg: op + ": " + m}
	case strings.HasPrefix(low, "device offline"),
		strings.HasPrefix(low, "device still authorizing"),
		strings.HasPrefix(low, "device still connecting"):
		// A fresh server reports devices offline/authorizing for a moment; the
		// recipes retry this state (bounded).
		return &Error{ID: IDDeviceOffline, Retryable: true, Msg: op + ": " + m}
	case strings.HasPrefix(low, "device unauthorized"), strings.HasPrefix(low, "insufficient permissions"),
		strings.HasPrefix(low, "no permissions"):
		// Needs a human at the device (RSA prompt) or udev rules: retrying cannot help.
		return &Error{ID: IDDeviceUnauthorized, Retryable: false, Msg: op + ": " + firstLine(m)}
	case strings.HasPrefix(low, "more than one"):
		return &Error{ID: IDDeviceNotFound, Retryable: false, Msg: op + ": " + m}
	}
	return &Error{ID: IDProcessError, Retryable: false, Msg: op + ": " + m}
}

// classify turns a transport-level error (dial, read, write) into an *Error.
// ctx decides between timeout and canceled when the conn was closed by it.
func classify(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if ctx != nil {
		switch ctx.Err() {
		case context.DeadlineExceeded:
			return &Error{ID: IDTimeout, Retryable: true, Msg: op + ": deadline exceeded", Err: err}
		case context.Canceled:
			return &Error{ID: IDCanceled, Retryable: false, Msg: op + ": canceled", Err: err}
		}
	}
	switch {
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		// "socket: too many open files": this process (or the host) is out
		// of descriptors. Retrying after a back-off can help once the load
		// passes; it says nothing about the adb server or the device.
		return &Error{ID: IDResourceExhausted, Retryable: true, Msg: op + ": out of file descriptors", Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return &Error{ID: IDTimeout, Retryable: true, Msg: op + ": deadline exceeded", Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{ID: IDCanceled, Retryable: false, Msg: op + ": canceled", Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Error{ID: IDNetworkError, Retryable: true, Msg: op + ": adb server not reachable", Err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		// The server closes a service stream when its device goes away.
		return &Error{ID: IDNetworkError, Retryable: true, Msg: op + ": connection closed", Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return &Error{ID: IDTimeout, Retryable: true, Msg: op + ": i/o timeout", Err: err}
		}
		return &Error{ID: IDNetworkError, Retryable: true, Msg: op, Err: err}
	}
	return &Error{ID: IDProcessError, Retryable: false, Msg: op, Err: err}
}

func protocolError(op string, format string, args ...any) *Error {
	return &Error{ID: IDProcessError, Msg: op + ": " + fmt.Sprintf(format, args...)}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
