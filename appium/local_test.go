package appium

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// The local Appium supervisor replaces a dead server within two checks, but
// leaves a busy one (no /status answer, process alive, port open) alone until
// it has been silent for HungAfter.
func TestAppiumWatchBusyIsNotDead(t *testing.T) {
	busy := errors.New("status: context deadline exceeded")
	watch := func(alive *atomic.Bool, answering *atomic.Bool, restarts *atomic.Int32) Watch {
		return Watch{
			Interval: 2 * time.Second, HungAfter: time.Minute,
			Status: func(context.Context) error {
				if answering.Load() {
					return nil
				}
				time.Sleep(2 * time.Second) // the probe's own timeout
				return busy
			},
			Alive: alive.Load,
			Restart: func(context.Context) error {
				restarts.Add(1)
				answering.Store(true)
				alive.Store(true)
				return nil
			},
			Logf: t.Logf,
		}
	}
	t.Run("busy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var alive, answering atomic.Bool
			var restarts atomic.Int32
			alive.Store(true)
			ctx, cancel := context.WithCancel(t.Context())
			go watch(&alive, &answering, &restarts).Run(ctx)
			time.Sleep(50 * time.Second) // silent, alive: busy
			synctest.Wait()
			if n := restarts.Load(); n != 0 {
				t.Fatalf("a busy server was replaced %d times within 50 s", n)
			}
			answering.Store(true) // it answers again: the silence is forgotten
			time.Sleep(10 * time.Second)
			answering.Store(false)
			time.Sleep(50 * time.Second)
			synctest.Wait()
			if n := restarts.Load(); n != 0 {
				t.Fatalf("replaced %d times: silences apart must not add up", n)
			}
			time.Sleep(20 * time.Second) // now silent for over a minute: hung
			synctest.Wait()
			if n := restarts.Load(); n != 1 {
				t.Fatalf("a server silent for over HungAfter was replaced %d times, want 1", n)
			}
			cancel()
		})
	})
	t.Run("dead", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var alive, answering atomic.Bool
			var restarts atomic.Int32
			ctx, cancel := context.WithCancel(t.Context())
			go watch(&alive, &answering, &restarts).Run(ctx)
			time.Sleep(9 * time.Second) // two checks of 4 s (interval + probe) and a bit
			synctest.Wait()
			if n := restarts.Load(); n != 1 {
				t.Fatalf("a dead server was replaced %d times after two checks, want 1", n)
			}
			cancel()
		})
	})
}

// unusedPort is a loopback port nothing listens on.
func unusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func readState(t *testing.T, dir string) LocalState {
	t.Helper()
	var st LocalState
	b, err := os.ReadFile(LocalStateFile(dir))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("%s: %v %q", LocalStateFile(dir), err, b)
	}
	return st
}

// The real Appium server: a data dir's local server is started once,
// recorded, reused by the next run (no start), replaced for another adb
// server (the old one stopped, not left holding sessions), and stopped.
func TestLocalStartReuseStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() { StopLocal(dir) })
	adbPort := unusedPort(t) // Appium starts without reaching its adb server

	url, took, err := Local(ctx, dir, "", adbPort)
	if err != nil {
		t.Fatal(err)
	}
	first := readState(t, dir)
	if took <= 0 || first.URL != url || first.PID <= 0 || first.ADBPort != adbPort {
		t.Fatalf("Local = %s after %v; state %+v", url, took, first)
	}
	again, took, err := Local(ctx, dir, "", adbPort)
	if err != nil || again != url || took != 0 {
		t.Fatalf("second Local = %s, %v, %v: want the same server reused", again, took, err)
	}

	other, took, err := Local(ctx, dir, "", adbPort+1)
	if err != nil || took <= 0 {
		t.Fatalf("Local for another adb server = %s, %v, %v", other, took, err)
	}
	if syscall.Kill(first.PID, 0) == nil {
		t.Errorf("the first server (pid %d) still runs beside its replacement", first.PID)
	}
	second := readState(t, dir)
	if second.PID == first.PID || second.ADBPort != adbPort+1 || second.URL != other {
		t.Errorf("state after the replacement: %+v", second)
	}

	if stopped, err := StopLocal(dir); err != nil || !stopped {
		t.Fatalf("StopLocal = %v, %v", stopped, err)
	}
	if syscall.Kill(second.PID, 0) == nil {
		t.Errorf("the server (pid %d) still runs after StopLocal", second.PID)
	}
	if _, err := os.Stat(LocalStateFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left: %v", err)
	}
	if stopped, err := StopLocal(dir); err != nil || stopped {
		t.Errorf("StopLocal with none = %v, %v", stopped, err)
	}
	if err := os.WriteFile(LocalStateFile(dir), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := StopLocal(dir); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("StopLocal of an unreadable state = %v", err)
	}
}
