package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
		t.Fatal("prlimit not found: tools/setup.sh installs Debian's util-linux, which has it")
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
// (prlimit) and the simulator. 1,500 clients from 30 loopback addresses
// (127.0.0.2-31, 50 each: no address reaches its own cap) each keep one
// keep-alive connection to the API open for 25 s: GET /healthz, then idle,
// and a new connection a second after the daemon closes theirs. A run (the
// signed demo APK, installed and launched through adb and Appium) is in
// flight when the flood begins, another is submitted under it: both must
// finish, the daemon's descriptors stay under its limit, the API answers
// during and after. The old daemon accepted every connection, reached 1,024
// descriptors, failed the run in flight ("socket: too many open files"
// dialing adb) and answered no one.
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

	// The flood, for 25 s at least and until the run ends: 1,500 clients,
	// each keeping one keep-alive connection open. A client sends one
	// request, reads its answer (if it gets one) and then holds the
	// connection idle; when the daemon closes it, the client opens another
	// a second later (pacing the load generator, not waiting for a state).
	const hold = 25 * time.Second
	// A run is in flight when the flood begins.
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	body := runBody(emu.Serial(), "file://"+apk, signerDigest(t, apk), "ALWAYS_REINSTALL", "FORCE_RESTART", nil)
	inFlight := d.submit(t, body)
	release := make(chan struct{})
	var wg sync.WaitGroup
	var firstRound, dials, answered, dialFailed, closedByServer atomic.Int64
	host := "127.0.0.1:" + strconv.Itoa(d.httpPort)
	pause := func() bool {
		select {
		case <-release:
			return false
		case <-time.After(time.Second):
			return true
		}
	}
	t0 := time.Now()
	for i := range flood {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%addrs))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				dl := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
				c, err := dl.Dial("tcp", host)
				if round == 0 {
					firstRound.Add(1)
				}
				if err != nil {
					dialFailed.Add(1)
					if !pause() {
						return
					}
					continue
				}
				dials.Add(1)
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
					c.Close()
					return
				case <-gone:
					c.Close()
					closedByServer.Add(1)
				}
				if !pause() {
					return
				}
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
	maxFDs := 0
	for firstRound.Load() < flood {
		maxFDs = max(maxFDs, openFDs(pid))
		if time.Since(t0) > time.Minute {
			t.Fatalf("1,500 dials did not return within a minute (%d did)", firstRound.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Under the flood: the API takes another run, both runs go on to the
	// end, and the daemon's descriptors stay under its limit.
	b, _ := json.Marshal(body)
	ts := time.Now()
	resp, err := (&http.Client{Timeout: time.Minute}).Post(d.URL()+"/v1/runs", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the API does not answer during the flood (%d connections opened, %d dials failed; the run in flight: %s): %v\n%s",
			dials.Load(), dialFailed.Load(), runStatusInStore(t, st, inFlight), err, d.log())
	}
	during := time.Since(ts)
	var sub struct {
		RunID string `json:"runId"`
	}
	json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit during the flood: %d", resp.StatusCode)
	}
	ids := []string{inFlight, sub.RunID}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		maxFDs = max(maxFDs, openFDs(pid))
		a, b := runStatusInStore(t, st, ids[0]), runStatusInStore(t, st, ids[1])
		if a.Terminal() && b.Terminal() && time.Since(t0) >= hold {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs %s, %s after 3 minutes of flood\n%s", a, b, d.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := time.Since(t0)
	close(release)
	wg.Wait()
	t.Logf("flood of %v: %d connections opened, %d dial failures, %d answered, %d closed by the daemon; the daemon held at most %d descriptors (limit %d); the submit during the flood took %v",
		held.Round(time.Second), dials.Load(), dialFailed.Load(), answered.Load(), closedByServer.Load(), maxFDs, nofile, during.Round(time.Millisecond))

	// After: the API answers, both runs finished with gapless events.
	for _, id := range ids {
		v := d.run(t, id)
		evs := d.events(t, id)
		if v.Status != agent.RunFinished {
			t.Fatalf("run %s: %s under the flood; events:\n%v\n%s", id, v.Status, evs, d.log())
		}
		checkRunEvents(t, evs, agent.KindRunFinished)
	}
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
