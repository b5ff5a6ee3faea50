package main

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

	"github.com/screengraph/screengraph-agent/appium"
)

// localAppiumState is dataDir/appium.json: the local Appium server this data
// dir started, so later runs reuse it and the sessions it holds.
type localAppiumState struct {
	URL     string `json:"url"`
	PID     int    `json:"pid"`
	ADBPort int    `json:"adbPort"`
}

func localAppiumFile(dataDir string) string { return filepath.Join(dataDir, "appium.json") }

// localAppium returns the URL of the data dir's local Appium server for the
// adb server on adbPort, starting a detached one when none answers. started
// is how long a start took (0 when one was reused).
func localAppium(ctx context.Context, dataDir, bin string, adbPort int) (url string, started time.Duration, err error) {
	return localAppiumOn(ctx, dataDir, bin, adbPort, 0)
}

// localAppiumOn is localAppium starting a new server on port (0: a free one):
// a supervisor restarts a dead server where the daemon's driver expects it.
// bin is --appium-binary ("" = appium.Locate's search).
func localAppiumOn(ctx context.Context, dataDir, bin string, adbPort, port int) (url string, started time.Duration, err error) {
	var st localAppiumState
	if b, err := os.ReadFile(localAppiumFile(dataDir)); err == nil && json.Unmarshal(b, &st) == nil && st.PID > 0 {
		alive := syscall.Kill(st.PID, 0) == nil
		if alive && st.ADBPort == adbPort {
			// A busy server (a loaded host, sessions being created) may answer
			// late: give it up to 10 s before replacing it.
			c, err := appium.New(st.URL, appium.Options{Timeout: 2 * time.Second})
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
			stopLocalAppium(dataDir)
		}
	}
	start := time.Now()
	srv, err := appium.StartServer(ctx, appium.ServerConfig{Bin: bin, DataDir: dataDir, ADBServerPort: adbPort, Detached: true, Port: port,
		LogFile: filepath.Join(dataDir, "appium.log")})
	if err != nil {
		return "", 0, fmt.Errorf("local Appium server: %w", err)
	}
	st = localAppiumState{URL: srv.URL, PID: srv.PID(), ADBPort: adbPort}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(localAppiumFile(dataDir), b, 0o600); err != nil {
		return "", 0, err
	}
	return srv.URL, time.Since(start), nil
}

// superviseLocalAppium watches the local Appium server at url while ctx
// lasts (see appiumWatch) and starts a new one on the same port when it is
// gone, so the daemon's driver reaches it again. Sessions are lost with the
// old server: EnsureDevice's REUSE_OR_CREATE finds its stored session gone
// and creates one. down is true while a replacement starts (the scheduler
// starts no run meanwhile).
func superviseLocalAppium(ctx context.Context, dataDir, bin string, adbPort int, url string, down *atomic.Bool, logf func(string, ...any)) {
	c, err := appium.New(url, appium.Options{Timeout: 2 * time.Second})
	if err != nil {
		return
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return
	}
	port, _ := strconv.Atoi(u.Port())
	w := appiumWatch{
		Interval:  2 * time.Second,
		HungAfter: 60 * time.Second,
		Status:    func(ctx context.Context) error { _, err := c.Status(ctx); return err },
		Alive: func() bool {
			var st localAppiumState
			b, err := os.ReadFile(localAppiumFile(dataDir))
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
			_, took, err := localAppiumOn(ctx, dataDir, bin, adbPort, port)
			if err != nil {
				logf("local Appium restart: %v", err)
				return err
			}
			logf("local Appium server back on port %d after %v", port, took.Round(time.Millisecond))
			return nil
		},
		Logf: logf,
	}
	w.run(ctx)
}

// appiumWatch decides when a local Appium server is to be replaced. A
// server that does not answer /status but whose process lives and whose port
// accepts connections is busy, not dead (Node is single-threaded: creating
// several UiAutomator2 sessions on a loaded host stalls it for tens of
// seconds): it is replaced only once it has not answered for HungAfter.
// A server whose process is gone or whose port refuses connections is
// replaced after two checks in a row. The fleet chaos test lost every run of
// a daemon when a busy server was replaced after three slow answers (12 s)
// and the new one took longer to start than the runs' retries lasted.
type appiumWatch struct {
	Interval  time.Duration
	HungAfter time.Duration
	Status    func(context.Context) error // the /status probe (bounded)
	Alive     func() bool                 // the process lives and the port accepts
	Restart   func(context.Context) error
	Logf      func(string, ...any)
}

func (w appiumWatch) run(ctx context.Context) {
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

// stopLocalAppium ends the data dir's local Appium server, if any.
func stopLocalAppium(dataDir string) (bool, error) {
	b, err := os.ReadFile(localAppiumFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var st localAppiumState
	if err := json.Unmarshal(b, &st); err != nil || st.PID <= 0 {
		return false, fmt.Errorf("%s: unreadable", localAppiumFile(dataDir))
	}
	os.Remove(localAppiumFile(dataDir))
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

type appiumCmd struct {
	Stop appiumStopCmd `cmd:"" help:"Stop the local Appium server that runs of this data dir started."`
}

type appiumStopCmd struct {
	storeFlags
}

func (c *appiumStopCmd) Run() error {
	dir, err := c.dir()
	if err != nil {
		return err
	}
	stopped, err := stopLocalAppium(dir)
	if err != nil {
		return err
	}
	if stopped {
		fmt.Println("stopped the local Appium server")
	} else {
		fmt.Println("no local Appium server was running")
	}
	return nil
}
