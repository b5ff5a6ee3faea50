// Package adb is the daemon's adapter to the adb server (host protocol over TCP,
// default 127.0.0.1:5037). The pure parsers of Android shell output (getprop,
// pm, dumpsys, am, wm, logcat, devices-l) live in adb/parse, which code that
// only parses (nodes/) imports without this transport.
//
// Every call takes a context: its deadline becomes the socket deadline and
// cancelling it closes the socket. Every error is an *Error (parse.Error)
// classified once here (device_not_found, device_offline, device_unauthorized,
// timeout, canceled, network_error, install_failed + INSTALL_FAILED_… code,
// activity_not_found, permission_error, process_error); unknown errors are
// process_error, not retryable.
//
// The host protocol is spoken directly rather than through gadb v0.1.0; the
// measured reasons are in docs/decisions.md ("ADB client").
package adb
