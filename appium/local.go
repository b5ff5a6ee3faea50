package appium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// LocalState is dataDir/appium.json: the local Appium server a data dir
// started (detached, in its own process group), so later runs reuse it and
// the sessions it holds.
type LocalState struct {
	URL     string `json:"url"`
	PID     int    `json:"pid"`
	ADBPort int    `json:"adbPort"`
}

// LocalStateFile is the file of dataDir's LocalState.
func LocalStateFile(dataDir string) string { return filepath.Join(dataDir, "appium.json") }

// Local returns the URL of the data dir's local Appium server for the adb
// server on adbPort, starting a detached one (StartServer, its log in
// dataDir/appium.log) when none answers /status within 10 s; a server of
// another adb port, or one that does not answer, is stopped first. started
// is how long a start took (0 when one was reused). bin is the appium
// executable ("" = Locate's search). Errors: StartServer's, wrapped ("local
// Appium server: …"), ctx's, or writing LocalStateFile.
func Local(ctx context.Context, dataDir, bin string, adbPort int) (url string, started time.Duration, err error) {
	return LocalOn(ctx, dataDir, bin, adbPort, 0)
}

// LocalOn is Local starting a new server on port (0: a free one): a
// supervisor restarts a dead server where the daemon's driver expects it.
func LocalOn(ctx context.Context, dataDir, bin string, adbPort, port int) (url string, started time.Duration, err error) {
	var st LocalState
	if b, err := os.ReadFile(LocalStateFile(dataDir)); err == nil && json.Unmarshal(b, &st) == nil && st.PID > 0 {
		alive := syscall.Kill(st.PID, 0) == nil
		if alive && st.ADBPort == adbPort {
			// A busy server (a loaded host, sessions being created) may answer
			// late: give it up to 10 s before replacing it.
			c, err := New(st.URL, Options{Timeout: 2 * time.Second})
			for i := 0; err == nil && i < 5; i++ {
				if _, serr := c.Status(ctx); serr == nil {
					return st.URL, 0, nil
				}
				if ctx.Err() != nil {
					return "", 0, ctx.Err()
				}
			}
		}
		if alive {
			// Replaced, not left running: a second server would hold the
			// sessions this data dir's runs can no longer reach.
			StopLocal(dataDir)
		}
	}
	start := time.Now()
	srv, err := StartServer(ctx, ServerConfig{Bin: bin, DataDir: dataDir, ADBServerPort: adbPort, Detached: true, Port: port,
		LogFile: filepath.Join(dataDir, "appium.log")})
	if err != nil {
		return "", 0, fmt.Errorf("local Appium server: %w", err)
	}
	st = LocalState{URL: srv.URL, PID: srv.PID(), ADBPort: adbPort}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(LocalStateFile(dataDir), b, 0o600); err != nil {
		return "", 0, err
	}
	return srv.URL, time.Since(start), nil
}

// SuperviseLocal watches dataDir's local Appium server at url while ctx
// lasts (see Watch) and starts a new one on the same port when it is
// gone, so the daemon's driver reaches it again. Sessions are lost with the
// old server: EnsureDevice's REUSE_OR_CREATE finds its stored session gone
// and creates one. down is true while a replacement starts (the scheduler
// starts no run meanwhile).
func SuperviseLocal(ctx context.Context, dataDir, bin string, adbPort int, url string, down *atomic.Bool, logf func(string, ...any)) {
	c, err := New(url, Options{Timeout: 2 * time.Second})
	if err != nil {
		return
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return
	}
	port, _ := strconv.Atoi(u.Port())
	w := Watch{
		Interval:  2 * time.Second,
		HungAfter: 60 * time.Second,
		Status:    func(ctx context.Context) error { _, err := c.Status(ctx); return err },
		Alive: func() bool {
			var st LocalState
			b, err := os.ReadFile(LocalStateFile(dataDir))
			if err != nil || json.Unmarshal(b, &st) != nil || st.PID <= 0 || syscall.Kill(st.PID, 0) != nil {
				return false
			}
			conn, err := net.DialTimeout("tcp", u.Host, time.Second)
			if err != nil {
				return false
			}
			conn.Close()
			return true
		},
		Restart: func(ctx context.Context) error {
			logf("local Appium server %s is gone or hung; starting a new one on port %d", url, port)
			down.Store(true)
			defer down.Store(false)
			_, took, err := LocalOn(ctx, dataDir, bin, adbPort, port)
			if err != nil {
				logf("local Appium restart: %v", err)
				return err
			}
			logf("local Appium server back on port %d after %v", port, took.Round(time.Millisecond))
			return nil
		},
		Logf: logf,
	}
	w.Run(ctx)
}

// Watch decides when a local Appium server is to be replaced. A
// server that does not answer /status but whose process lives and whose port
// accepts connections is busy, not dead (Node is single-threaded: creating
// several UiAutomator2 sessions on a loaded host stalls it for tens of
// seconds): it is replaced only once it has not answered for HungAfter.
// A server whose process is gone or whose port refuses connections is
// replaced after two checks in a row. The fleet chaos test lost every run of
// a daemon when a busy server was replaced after three slow answers (12 s)
// and the new one took longer to start than the runs' retries lasted.
type Watch struct {
	Interval  time.Duration
	HungAfter time.Duration
	Status    func(context.Context) error // the /status probe (bounded)
	Alive     func() bool                 // the process lives and the port accepts
	Restart   func(context.Context) error
	Logf      func(string, ...any)
}

// Run checks every Interval until ctx ends, calling Restart when the
// server is to be replaced.
func (w Watch) Run(ctx context.Context) {
	dead, warned := 0, false
	var silentSince time.Time // zero while it answers
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.Interval):
		}
		if err := w.Status(ctx); err == nil {
			dead, silentSince, warned = 0, time.Time{}, false
			continue
		}
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		if silentSince.IsZero() {
			silentSince = now
		}
		restart := false
		if w.Alive() {
			dead = 0
			if restart = now.Sub(silentSince) >= w.HungAfter; !restart && !warned && now.Sub(silentSince) >= 5*w.Interval {
				warned = true
				w.Logf("local Appium server busy: no /status answer for %v (process alive, port open)", now.Sub(silentSince).Round(time.Second))
			}
		} else {
			dead++
			restart = dead >= 2
		}
		if restart && w.Restart(ctx) == nil {
			dead, silentSince, warned = 0, time.Time{}, false
		}
	}
}

// StopLocal ends dataDir's local Appium server, if any (SIGTERM to its
// process group, SIGKILL after 10 s) and removes LocalStateFile. stopped is
// false when none was recorded or it was already gone; an unreadable state
// file is an error.
func StopLocal(dataDir string) (bool, error) {
	b, err := os.ReadFile(LocalStateFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st LocalState
	if err := json.Unmarshal(b, &st); err != nil || st.PID <= 0 {
		return false, fmt.Errorf("%s: unreadable", LocalStateFile(dataDir))
	}
	os.Remove(LocalStateFile(dataDir))
	// The server leads its own session and process group (setsid).
	if err := syscall.Kill(-st.PID, syscall.SIGTERM); err != nil {
		return false, nil // already gone
	}
	for i := 0; i < 100 && syscall.Kill(st.PID, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(-st.PID, syscall.SIGKILL)
	return true, nil
}
