package parse

import (
	"regexp"
	"strings"
)

// failureRe matches "Failure [CODE]" and "Failure [CODE: message]" as printed by
// `pm install` / `cmd package install` (PackageManagerShellCommand), also behind the
// host client's "adb: failed to install X: " prefix.
var failureRe = regexp.MustCompile(`Failure \[([A-Za-z0-9_\-]+)(?::\s*([^\n]*))?\]`)

// codeRe finds a bare INSTALL_FAILED_… / INSTALL_PARSE_FAILED_… constant anywhere.
var codeRe = regexp.MustCompile(`\b((?:INSTALL_FAILED|INSTALL_PARSE_FAILED|DELETE_FAILED)_[A-Z0-9_]+)\b`)

// ParseInstallOutput parses the output of `pm install` / `cmd package install` /
// `pm uninstall`: nil when a line is "Success", else *Error{ID: install_failed,
// Code: the INSTALL_FAILED_… (or INSTALL_PARSE_FAILED_…, DELETE_FAILED_…) constant,
// Msg: the message after the code}. Output with neither Success nor a code
// ("Error: …", "Exception occurred while executing …", empty) is install_failed
// with an empty Code. Format source: fixtures/captures/adb-install/*.txt.
// INSTALL_FAILED_ALREADY_EXISTS is returned as an error too; the caller decides.
func ParseInstallOutput(out string) error {
	for _, l := range lines(out) {
		if strings.TrimSpace(l) == "Success" {
			return nil
		}
	}
	if m := failureRe.FindStringSubmatch(out); m != nil {
		code, msg := m[1], strings.TrimSpace(m[2])
		if msg == "" {
			msg = code
		}
		return &Error{ID: IDInstallFailed, Code: code, Msg: msg}
	}
	if m := codeRe.FindStringSubmatch(out); m != nil {
		return &Error{ID: IDInstallFailed, Code: m[1], Msg: firstLine(strings.TrimSpace(out))}
	}
	msg := strings.TrimSpace(out)
	if msg == "" {
		msg = "package manager printed nothing"
	}
	return &Error{ID: IDInstallFailed, Msg: firstLine(msg)}
}
