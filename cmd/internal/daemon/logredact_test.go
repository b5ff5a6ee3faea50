package daemon

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Whatever a component logs, the log holds no secret: URL credentials with
// quotes, a keyword DSN's password, a signed-URL value, in the message or a
// field, JSON lines or console lines; lines without secrets are untouched.
func TestLoggerRedacts(t *testing.T) {
	for _, jsonLines := range []bool{true, false} {
		var buf bytes.Buffer
		log := NewLogger(&buf, "info", jsonLines)
		log.Info().Str("nats", "nats://bob:Hunt'er2@127.0.0.1:4222").Msgf("fetch %q: refused", "https://u:pa'ss@h/app.apk?token=ab'cd&x=1")
		log.Warn().Msgf("Postgres host=db user=agent password='s3 cr\\'et' dbname=sg: refused")
		log.Info().Str("device", "emulator-5554").Msg("plain line")
		out := buf.String()
		for _, s := range []string{"Hunt'er2", "pa'ss", "ab'cd", "s3 cr", "cr\\'et", "'et'"} {
			if strings.Contains(out, s) {
				t.Errorf("json=%v: the log holds %q:\n%s", jsonLines, s, out)
			}
		}
		for _, s := range []string{"127.0.0.1:4222", "h/app.apk", "x=1", "host=db", "plain line", "emulator-5554"} {
			if !strings.Contains(out, s) {
				t.Errorf("json=%v: the log lost %q:\n%s", jsonLines, s, out)
			}
		}
		if jsonLines {
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if !json.Valid([]byte(l)) {
					t.Errorf("not a JSON line: %s", l)
				}
			}
		}
	}
}
