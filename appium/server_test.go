package appium

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

func TestStartServerMissingBinary(t *testing.T) {
	_, err := StartServer(context.Background(), ServerConfig{Bin: filepath.Join(t.TempDir(), "no-appium")})
	var e *agent.Error
	if !errors.As(err, &e) || e.ID != agent.ErrProcess {
		t.Fatalf("err = %v", err)
	}
}

// A server that dies before it is ready: the error carries its log and env.
func TestStartServerExitsEarly(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "appium")
	script := "#!/bin/sh\necho \"args: $*\"\necho \"adb port: $ANDROID_ADB_SERVER_PORT emu: $ADB_EMU home: $ANDROID_HOME\"\necho 'listen EADDRINUSE' >&2\nexit 3\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "appium.log")
	_, err := StartServer(context.Background(), ServerConfig{Bin: bin, Port: 4799, ADBServerPort: 15123, LogFile: logFile, StartTimeout: 20 * time.Second})
	var e *agent.Error
	if !errors.As(err, &e) || e.ID != agent.ErrProcess || !strings.Contains(e.Msg, "exited before ready") || !strings.Contains(e.Msg, "EADDRINUSE") {
		t.Fatalf("err = %v", err)
	}
	b, _ := os.ReadFile(logFile)
	want := []string{
		"args: server --address 127.0.0.1 --port 4799 --allow-insecure=uiautomator2:adb_shell,*:session_discovery --log-no-colors --log-timestamp",
		"adb port: 15123 emu: 0 home: /usr/lib/android-sdk",
	}
	for _, w := range want {
		if !strings.Contains(string(b), w) {
			t.Errorf("log file lacks %q:\n%s", w, b)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	tb.Write([]byte("abcdef"))
	tb.Write([]byte("ghijkl"))
	if got := tb.last(100); got != "efghijkl" {
		t.Errorf("tail = %q", got)
	}
	if got := tb.last(3); got != "jkl" {
		t.Errorf("last(3) = %q", got)
	}
}

// A detached server that exits before it is ready: the error carries the end
// of its log file (it writes nowhere else), so the cause is in the message
// (CI saw "exited before ready (exit status 1); log tail:" and nothing).
func TestDetachedEarlyExitShowsLog(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "appium")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Error: could not load the extension manifest' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := StartServer(context.Background(), ServerConfig{Bin: bin, Detached: true, LogFile: filepath.Join(dir, "appium.log"), StartTimeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before ready") || !strings.Contains(err.Error(), "could not load the extension manifest") {
		t.Fatalf("err = %v", err)
	}
}

// A port picked free can be taken before Appium binds it: a server that
// exits with EADDRINUSE is started again on another port; any other early
// exit is reported at once.
func TestStartServerRetriesTakenPort(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "appium")
	// Exits EADDRINUSE on its first two starts, then serves /status ready
	// on the port it was given (python3's http.server, as Appium would).
	script := `#!/bin/sh
n=$(cat "` + dir + `/starts" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "` + dir + `/starts"
if [ $n -le 2 ]; then echo "Error: listen EADDRINUSE: address already in use 127.0.0.1:$5"; exit 1; fi
exec python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"{\"value\":{\"ready\":true,\"message\":\"ready\",\"build\":{\"version\":\"3.8.0\"}}}"
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
' "$5"
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(context.Background(), ServerConfig{Bin: bin, StartTimeout: 30 * time.Second, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if b, _ := os.ReadFile(filepath.Join(dir, "starts")); strings.TrimSpace(string(b)) != "3" {
		t.Fatalf("starts = %q, want 3", b)
	}
	// Another cause is not retried.
	os.WriteFile(filepath.Join(dir, "starts"), []byte("-5"), 0o644)
	os.WriteFile(bin, []byte("#!/bin/sh\necho 'Error: no driver'\nexit 1\n"), 0o755)
	if _, err := StartServer(context.Background(), ServerConfig{Bin: bin, StartTimeout: 30 * time.Second}); err == nil || !strings.Contains(err.Error(), "no driver") {
		t.Fatalf("err = %v", err)
	}
}
