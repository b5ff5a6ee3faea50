package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// startDaemonLimited is startDaemon with serve run under `prlimit
// --nofile=N:N` (soft and hard: Go raises the soft limit to the hard one at
// start), on dataDir ("" = a temporary directory).
func startDaemonLimited(t *testing.T, srv *simtest.ADBServer, nofile int, dataDir string, extra ...string) *daemon {
	t.Helper()
	pl, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	bin := buildAgent(t)
	if nofile > 0 {
		wrap := filepath.Join(t.TempDir(), "serve-limited")
		script := fmt.Sprintf("#!/bin/sh\nexec %s --nofile=%d:%d -- %s \"$@\"\n", pl, nofile, nofile, bin)
		if err := os.WriteFile(wrap, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		bin = wrap
	}
	if dataDir == "" {
		dataDir = t.TempDir()
	} else if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, bin: bin, srv: srv, dataDir: dataDir,
		httpPort: simtest.FreePort(t), natsPort: simtest.FreePort(t), extra: extra}
	t.Cleanup(func() {
		d.stop()
		appium.StopLocal(d.dataDir)
	})
	d.start()
	return d
}

// openFDs counts the descriptors process pid holds.
func openFDs(pid int) int {
	es, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// runStatusInStore reads a run's status from the embedded store of dataDir
// directly (not through the daemon's HTTP API, which a flood may block).
func runStatusInStore(t *testing.T, st *sqlite.Store, id string) agent.RunStatus {
	t.Helper()
	r, err := st.GetRun(context.Background(), agent.Admin(), id)
	if err != nil {
		t.Fatalf("run %s in the store: %v", id, err)
	}
	return r.Status
}

// TestServeConnectionFlood (issue 22, item 5): serve under `ulimit -n 1024`
// with a run in flight on the simulator (the signed demo APK through adb and
// Appium); 1,500 keep-alive connections are opened to the API from 30
// loopback addresses (127.0.0.2-31, 50 each: no address reaches its own
// cap), each sends GET /healthz and then sits idle, held until the run
// ends. The old daemon accepted them all, ran out of descriptors and the
// run failed with network_error "socket: too many open files" (and the API
// answered nobody); now the connection cap and the keep-alive pressure
// shed the flood: the daemon never holds more descriptors than its limit
// allows, the API answers during and after the flood, and the run finishes.
func TestServeConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve, Appium and a 1,500-connection flood")
	}
	const nofile, flood, addrs = 1024, 1500, 30
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemonLimited(t, srv, nofile, "")
	pid := d.cmd.Process.Pid
	if lim, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits"); !strings.Contains(string(lim), "Max open files            1024                 1024") {
		t.Fatalf("serve's descriptor limit is not 1024:\n%s", lim)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "agent.db"), sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	id := d.submit(t, runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil))

	// The flood: every connection sends one request, reads its answer (if
	// it gets one) and then holds the connection idle until released.
	release := make(chan struct{})
	var wg sync.WaitGroup
	var dialed, answered, dialFailed, closedByServer atomic.Int64
	host := "127.0.0.1:" + strconv.Itoa(d.httpPort)
	for i := range flood {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%addrs))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dl := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
			c, err := dl.Dial("tcp", host)
			if err != nil {
				dialFailed.Add(1)
				return
			}
			defer c.Close()
			dialed.Add(1)
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			gone := make(chan struct{})
			go func() {
				defer close(gone)
				br := bufio.NewReader(c)
				if resp, err := http.ReadResponse(br, nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answered.Add(1)
				}
				br.ReadByte() // blocks while the connection stays open
			}()
			select {
			case <-release:
			case <-gone:
				closedByServer.Add(1)
			}
		}()
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
		wg.Wait()
	}()

	// While the flood is held: the daemon's descriptors stay under its
	// limit, the API answers a newcomer, and the run goes on.
	maxFDs := 0
	var during time.Duration
	deadline := time.Now().Add(3 * time.Minute)
	for {
		maxFDs = max(maxFDs, openFDs(pid))
		if during == 0 && dialed.Load()+dialFailed.Load() == flood {
			t0 := time.Now()
			c := http.Client{Timeout: 30 * time.Second}
			resp, err := c.Get(d.URL() + "/healthz")
			if err != nil {
				t.Fatalf("the API does not answer during the flood (%d connections open, %d failed): %v\n%s", dialed.Load(), dialFailed.Load(), err, d.log())
			}
			resp.Body.Close()
			during = time.Since(t0)
		}
		s := runStatusInStore(t, st, id)
		if s.Terminal() && during > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after 3 minutes of flood\n%s", id, s, d.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	t.Logf("flood: %d connected, %d dial failures, %d answered, %d closed by the daemon; daemon held at most %d descriptors (limit %d); /healthz during the flood took %v",
		dialed.Load(), dialFailed.Load(), answered.Load(), closedByServer.Load(), maxFDs, nofile, during)

	// After: the API answers, the run finished with gapless events.
	v := d.run(t, id)
	evs := d.events(t, id)
	if v.Status != agent.RunFinished {
		t.Fatalf("run %s: %s under the flood; events:\n%v\n%s", id, v.Status, evs, d.log())
	}
	checkRunEvents(t, evs, agent.KindRunFinished)
	if maxFDs >= nofile {
		t.Fatalf("the daemon reached its descriptor limit (%d of %d)", maxFDs, nofile)
	}
	metrics := getText(t, d.URL()+"/metrics")
	if !strings.Contains(metrics, "screengraph_http_keepalive_pressure_total ") || strings.Contains(metrics, "screengraph_http_keepalive_pressure_total 0\n") {
		t.Fatalf("keep-alives were never switched off under the flood:\n%s", grepLines(metrics, "screengraph_http_"))
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
