package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// checkAgentError checks the agent error format printed by `run --output
// json` for a failure before the chain: success false, one error with
// errorID, a message containing each of msgParts, every node not_executed.
func checkAgentError(t *testing.T, raw string, errorID agent.ErrorID, msgParts ...string) {
	t.Helper()
	var out struct {
		Success *bool  `json:"success"`
		Error   string `json:"error"`
		Errors  []struct {
			Category string `json:"category"`
			ErrorID  string `json:"error_id"`
			Message  string `json:"message"`
			NodeID   string `json:"node_id"`
		} `json:"errors"`
		Execution struct {
			Steps []struct {
				NodeID string `json:"node_id"`
				Status string `json:"status"`
			} `json:"steps"`
		} `json:"execution"`
		Checkpoint struct {
			CompletedNodes []string `json:"completed_nodes"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, raw)
	}
	if out.Success == nil || *out.Success {
		t.Errorf("success = %v, want false:\n%s", out.Success, raw)
	}
	if len(out.Errors) != 1 {
		t.Fatalf("errors: %d entries, want 1:\n%s", len(out.Errors), raw)
	}
	e := out.Errors[0]
	if e.ErrorID != string(errorID) {
		t.Errorf("error_id %q, want %q:\n%s", e.ErrorID, errorID, raw)
	}
	if e.Category == "" || out.Error == "" {
		t.Errorf("no category or error:\n%s", raw)
	}
	for _, p := range msgParts {
		if !strings.Contains(e.Message, p) {
			t.Errorf("message %q does not name %q", e.Message, p)
		}
	}
	if len(out.Execution.Steps) != 4 {
		t.Errorf("execution.steps: %d, want the 4 setup nodes", len(out.Execution.Steps))
	}
	for _, s := range out.Execution.Steps {
		if s.Status != "not_executed" {
			t.Errorf("step %s is %s, want not_executed", s.NodeID, s.Status)
		}
	}
	if len(out.Checkpoint.CompletedNodes) != 0 {
		t.Errorf("completed nodes %v", out.Checkpoint.CompletedNodes)
	}
}

// noRunStored opens the data dir's store (which also proves the failed host
// released it) and checks that no run row was written.
func noRunStored(t *testing.T, dataDir string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("store of the failed run: %v", err)
	}
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), agent.Admin(), agent.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Errorf("the failed run left %d run rows: %+v", len(runs), runs)
	}
}

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
