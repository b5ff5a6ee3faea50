package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A log file (not a terminal) gets console lines without ANSI colour codes,
// with the event's real milliseconds (issue 16: every line read ".000" and
// carried escape codes); JSON lines carry RFC 3339 with milliseconds.
func TestLoggerFileNoColourRealMillis(t *testing.T) {
	t.Setenv("NO_COLOR", "") // set or not, a file is never coloured
	os.Unsetenv("NO_COLOR")
	at := time.Date(2026, 11, 26, 3, 4, 5, 678_000_000, time.UTC)
	old := zerolog.TimestampFunc
	zerolog.TimestampFunc = func() time.Time { return at }
	t.Cleanup(func() { zerolog.TimestampFunc = old })

	for _, jsonLines := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "agent.log")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		log := NewLogger(f, "info", jsonLines)
		log.Warn().Str("serial", "emulator-5554").Msg("device offline")
		f.Close()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		line := string(b)
		if strings.Contains(line, "\x1b[") {
			t.Errorf("json=%v: ANSI codes in a log file: %q", jsonLines, line)
		}
		want := at.Local().Format("15:04:05.678")
		if jsonLines {
			want = `"time":"2026-11-26T03:04:05.678Z"`
		}
		if !strings.Contains(line, want) || !strings.Contains(line, "device offline") {
			t.Errorf("json=%v: log line %q lacks %q", jsonLines, line, want)
		}
	}
}
