package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The CLI tests of this package that run the real binary (exit codes, stderr)
// build it once per test process; the end-to-end tests that drive a serving
// daemon live in cmd/internal/e2e with their own harness.
var agentBin struct {
	once sync.Once
	path string
	err  error
}

func buildAgent(t testing.TB) string {
	t.Helper()
	agentBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "screengraph-agent-bin-")
		if err != nil {
			agentBin.err = err
			return
		}
		p := filepath.Join(dir, "screengraph-agent")
		out, err := exec.Command("go", "build", "-o", p, ".").CombinedOutput()
		if err != nil {
			agentBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		agentBin.path = p
	})
	if agentBin.err != nil {
		t.Fatal(agentBin.err)
	}
	return agentBin.path
}
