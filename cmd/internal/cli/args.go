// Package cli holds what the screengraph-agent commands do beyond mapping
// flags: the command line kong parses, exit codes, config keys derived from
// flag structs, the binary's version, the run requests `run` and `runs
// submit` build from flags and files, and the walkthrough's files. The main
// package maps flags to these calls (and to cmd/internal/daemon and
// cmd/internal/render); each piece is tested here.
package cli

import (
	"errors"
	"strings"

	"github.com/alecthomas/kong"
)

// CommandLine is the command line kong parses for args (os.Args, left as
// it is): `screengraph-agent --version` is the version command (a global
// flag would clash with policy switch's --version); no command is --help
// (the overview, not an error); the real emulator's single-dash flags after
// `emulator sim` pass through (SeparateEmulatorFlags).
func CommandLine(args []string) []string {
	args = SeparateEmulatorFlags(args)
	if len(args) > 1 && args[1] == "--version" {
		args = append([]string{args[0], "version"}, args[2:]...)
	}
	if len(args) == 1 {
		args = append(args, "--help")
	}
	return args
}

// SeparateEmulatorFlags puts a "--" after "sim" in `[globals] emulator sim
// -avd NAME ...` when what follows is the real emulator's command line
// (single-dash flags or @NAME), so that kong hands all of it to the sim
// command's arguments unparsed. Other command lines come back unchanged.
func SeparateEmulatorFlags(args []string) []string {
	for i := 1; i+1 < len(args); i++ {
		if args[i] != "emulator" || args[i+1] != "sim" {
			continue
		}
		rest := args[i+2:]
		for _, a := range rest {
			if a == "--" {
				return args
			}
		}
		for _, a := range rest {
			if strings.HasPrefix(a, "@") || (len(a) > 2 && a[0] == '-' && a[1] != '-') {
				out := append(append([]string{}, args[:i+2]...), "--")
				return append(out, rest...)
			}
		}
		return args
	}
	return args
}

// HelpCommand is the command line whose --help describes the command a
// parse error is about ("screengraph-agent runs list"), without its
// positional arguments.
func HelpCommand(err error) string {
	words := []string{"screengraph-agent"}
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		for _, w := range strings.Fields(pe.Context.Command()) {
			if !strings.HasPrefix(w, "<") {
				words = append(words, w)
			}
		}
	}
	return strings.Join(words, " ")
}

// ExitError carries a process exit code through kong.
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string { return e.Err.Error() }

// Unwrap lets errors.As and errors.Is see the failure under the exit code
// (its agent error id).
func (e ExitError) Unwrap() error { return e.Err }

// ExitCode is the exit code of a command's error: an ExitError's, else 1.
func ExitCode(err error) int {
	var e ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return 1
}
