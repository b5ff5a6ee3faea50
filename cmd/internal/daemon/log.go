package daemon

import (
	"bytes"
	"io"
	"log/slog"
	"os"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
)

// One logger: the daemon and every piece it builds log through the
// zerolog.Logger of Config (HostConfig.Log). The packages below take a
// printf-style Logf (agent, service, httpapi, natsapi, evidence, retention)
// or a slog level (service.Daemon); logf and daemonLog adapt the one logger
// to them here, so no other file builds a logging closure.

// logf is l at level as a printf-style func.
func logf(l zerolog.Logger, level zerolog.Level) func(format string, args ...any) {
	return func(format string, args ...any) { l.WithLevel(level).Msgf(format, args...) }
}

// daemonLog is l as service.Daemon's log func (a slog level, a message, an
// error that may be nil).
func daemonLog(l zerolog.Logger) func(level slog.Level, msg string, err error) {
	return func(level slog.Level, msg string, err error) { l.WithLevel(zerologLevel(level)).Err(err).Msg(msg) }
}

// zerologLevel is the zerolog level of a slog level.
func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

// logTimeFormat is RFC 3339 with milliseconds, UTC offset included: the
// timestamp of JSON log lines, and what the console writer parses (with
// zerolog's default, second precision, every console line read ".000").
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Set once, before any logger exists: zerolog reads this global on every
// event, so setting it per logger would race with loggers already running.
func init() { zerolog.TimeFieldFormat = logTimeFormat }

// NewLogger logs to w at level (info when unknown): JSON lines, or console
// lines coloured only when w is a terminal (and NO_COLOR is unset), so a
// log file carries no ANSI escape codes.
func NewLogger(w io.Writer, level string, jsonLines bool) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if jsonLines {
		return zerolog.New(redactingWriter{w}).Level(lvl).With().Timestamp().Logger()
	}
	_, noColor := os.LookupEnv("NO_COLOR")
	cw := zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: noColor || !isTTY(w)}
	return zerolog.New(redactingWriter{cw}).Level(lvl).With().Timestamp().Logger()
}

// redactingWriter takes zerolog's events (one JSON object per Write) and
// passes them on with their secrets hidden (agent.RedactJSON: every string
// field, the message included, decoded first), whatever the code that
// logged them did: the log is a place secrets must not reach. An event
// without secrets passes unchanged; one with secrets is re-encoded (keys
// sorted).
type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	line := bytes.TrimRight(p, "\n")
	out := agent.RedactJSON(line)
	if bytes.Equal(out, line) {
		return r.w.Write(p)
	}
	if _, err := r.w.Write(append(out, '\n')); err != nil {
		return 0, err
	}
	return len(p), nil
}

// isTTY reports whether w is a character device (a terminal), not a
// file or a pipe.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
