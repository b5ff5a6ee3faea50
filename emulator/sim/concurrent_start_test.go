package sim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// TestAVDLockOneWinner: emulators started at the same moment on one AVD
// (CI: two runs naming the same stopped AVD) get the writable lock once; the
// rest find it held. With a stale lock (its pid dead, or a file left empty)
// it is the same: exactly one takes it over.
func TestAVDLockOneWinner(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stale []byte // nil: no lock file
	}{
		{"none", nil},
		{"dead-pid", []byte(strconv.Itoa(dead.Process.Pid))},
		{"empty", []byte{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "hardware-qemu.ini.lock")
			if c.stale != nil {
				if err := os.WriteFile(path, c.stale, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			const n = 8
			var (
				start = make(chan struct{})
				wg    sync.WaitGroup
				mu    sync.Mutex
				won   int
			)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if _, ok := avdLock(dir); ok {
						mu.Lock()
						won++
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			if won != 1 {
				t.Errorf("%d of %d starts took the AVD's lock, want 1", won, n)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != strconv.Itoa(os.Getpid()) {
				t.Errorf("lock file %q (%v), want this pid", b, err)
			}
		})
	}
}

// TestConsoleTokenOneToken: emulators started at the same moment on a host
// with no ~/.emulator_console_auth_token agree on one token, and none reads
// an empty one (which would turn its console's auth off).
func TestConsoleTokenOneToken(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), ".emulator_console_auth_token")
		const n = 8
		var (
			start = make(chan struct{})
			wg    sync.WaitGroup
			toks  [n]string
			errs  [n]error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				toks[i], errs[i] = consoleToken(path)
			}()
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || len(toks[i]) != 16 || toks[i] != toks[0] {
				t.Fatalf("round %d: start %d got token %q (%v), start 0 got %q: want one 16-character token", round, i, toks[i], errs[i], toks[0])
			}
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != toks[0] {
			t.Fatalf("round %d: file holds %q (%v), want %q", round, b, err, toks[0])
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("round %d: mode %v (%v), want 0600", round, fi.Mode(), err)
		}
		if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
			t.Fatalf("round %d: %d files left beside the token, want none", round, len(ents)-1)
		}
	}
}
