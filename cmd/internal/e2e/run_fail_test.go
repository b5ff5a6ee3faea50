package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
)

// No Appium anywhere: the binary runs from a directory outside the module
// (so the repository's tools/node Appium is not found) with a PATH without
// appium. openHost fails after the store, NATS and the relay started.
func TestRunFailsCleanlyWithoutAppium(t *testing.T) {
	bin := buildAgent(t)
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "appium")); err == nil {
			continue
		}
		path = append(path, d)
	}
	dataDir := t.TempDir()
	apk, err := filepath.Abs(fixtureAPK("demo-v2.apk"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--data-dir", dataDir, "--adb-server", "127.0.0.1:1",
		"--serial", "emulator-5554", "--package", appPkg, "--apk", apk, "--output", "json")
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutEnv(os.Environ(), "PATH"), "PATH="+strings.Join(path, string(filepath.ListSeparator)))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var xe *exec.ExitError
	if !errors.As(err, &xe) || xe.ExitCode() != 2 {
		t.Fatalf("exit %v, want code 2\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, bad := range []string{"panic:", "goroutine ", "nil pointer"} {
		if strings.Contains(stderr.String(), bad) {
			t.Fatalf("stderr has %q:\n%s", bad, stderr.String())
		}
	}
	checkAgentError(t, stdout.String(), agent.ErrAppiumUnreachable, "Appium", "--appium")
	if !strings.Contains(stderr.String(), "Appium") {
		t.Errorf("stderr does not say what failed:\n%s", stderr.String())
	}
	noRunStored(t, dataDir)
}

func withoutEnv(env []string, keys ...string) []string {
	var out []string
next:
	for _, kv := range env {
		for _, k := range keys {
			if strings.HasPrefix(kv, k+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
