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
