package emulator

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// stateWriterEnv makes this test binary, started by
// TestStateFileTwoProcesses, a second process writing the state file.
const stateWriterEnv = "SCREENGRAPH_TEST_STATE_WRITER"

const stateWrites = 150

func writeState(t testing.TB, m *Manager, prefix string) {
	for i := range stateWrites {
		if err := m.updateStateBooted(fmt.Sprintf("%s-%d", prefix, i), Booted{AVD: prefix, PID: i}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateFileTwoProcesses: serve and a one-shot run on one host record the
// emulators they boot in one emulators.json at the same time; neither loses
// the other's entries (a read-modify-write guarded only in-process lost some).
func TestStateFileTwoProcesses(t *testing.T) {
	if dir := os.Getenv(stateWriterEnv); dir != "" {
		writeState(t, New(Config{StateDir: dir}), "child")
		return
	}
	dir := t.TempDir()
	m := New(Config{StateDir: dir})
	child := exec.Command(os.Args[0], "-test.run=^TestStateFileTwoProcesses$", "-test.count=1")
	child.Env = append(os.Environ(), stateWriterEnv+"="+dir)
	out := make(chan error, 1)
	var buf []byte
	go func() {
		var err error
		buf, err = child.CombinedOutput()
		out <- err
	}()
	writeState(t, m, "parent")
	if err := <-out; err != nil {
		t.Fatalf("child writer: %v\n%s", err, buf)
	}
	st, err := m.loadState()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"parent", "child"} {
		for i := range stateWrites {
			if b, ok := st[p+"-"+strconv.Itoa(i)]; !ok || b.PID != i {
				t.Fatalf("%s-%d lost (state holds %d of %d entries)", p, i, len(st), 2*stateWrites)
			}
		}
	}
}
