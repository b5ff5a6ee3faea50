package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A bad flag or command: the error and the closest name first, then one line
// pointing at the command's --help, exit 2; no usage dump before it. No
// command at all prints the overview (exit 0).
func TestBadFlagErrorFirst(t *testing.T) {
	bin := buildAgent(t)
	for _, c := range []struct {
		args       []string
		first, cmd string
	}{
		{[]string{"runs", "list", "--limt", "3"}, `screengraph-agent: error: unknown flag --limt, did you mean "--limit"?`, "screengraph-agent runs list"},
		{[]string{"runs", "lst"}, `screengraph-agent: error: unexpected argument lst, did you mean "list"?`, "screengraph-agent runs"},
		{[]string{"runs", "show", "R1", "--outpt", "json"}, `screengraph-agent: error: unknown flag --outpt, did you mean "--output"?`, "screengraph-agent runs show"},
	} {
		cmd := exec.Command(bin, c.args...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit 2\n%s", c.args, err, out)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 || lines[0] != c.first || lines[1] != "Run '"+c.cmd+" --help' for usage." {
			t.Errorf("%v printed:\n%s", c.args, out)
		}
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage: screengraph-agent <command>") {
		t.Errorf("no command: %v\n%s", err, out)
	}
}

// The runs commands read a local store, never create one: with no daemon and
// no agent.db they say which store they looked for instead of printing an
// empty table.
func TestRunsListNoStore(t *testing.T) {
	bin := buildAgent(t)
	data := filepath.Join(t.TempDir(), "sg-data")
	for _, args := range [][]string{{"runs", "list"}, {"runs", "show", "01J0000000000000000000000A"}, {"runs", "events", "01J0000000000000000000000A"}} {
		out, err := exec.Command(bin, append(args, "--data-dir", data)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no local store at "+filepath.Join(data, "agent.db")) {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the runs commands created %s (stat: %v)", data, err)
	}
}
