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
